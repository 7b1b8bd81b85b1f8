"""Print docs/knobs.md: `uv run python -m kiln.uops.knobs_doc > docs/knobs.md`.

Every installed kiln package is imported first (found dynamically, so kiln.uops depends on none of them) so that
the knobs they register appear too.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

from kiln.uops.knobs import knobs_markdown


def import_kiln_packages() -> list[str]:
    """Import every installed kiln package (and kiln.drivers.*); returns the names imported."""
    import kiln

    names = [f"kiln.{info.name}" for info in pkgutil.iter_modules(kiln.__path__)]
    if "kiln.drivers" in names:
        drivers = importlib.import_module("kiln.drivers")
        names.remove("kiln.drivers")
        names.extend(f"kiln.drivers.{info.name}" for info in pkgutil.iter_modules(drivers.__path__))
    imported = []
    for name in sorted(names):
        try:
            importlib.import_module(name)
        except Exception as error:  # a half-built package must not stop the documentation of the others
            print(f"warning: could not import {name}: {error}", file=sys.stderr)
        else:
            imported.append(name)
    return imported


def main() -> None:
    """Write the Markdown of every registered knob to stdout."""
    import_kiln_packages()
    sys.stdout.write(knobs_markdown())


if __name__ == "__main__":
    main()
