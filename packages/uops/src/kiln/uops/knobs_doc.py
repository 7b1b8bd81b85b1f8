"""Print docs/knobs.md: `uv run python -m kiln.uops.knobs_doc > docs/knobs.md`.

Every installed kiln package is imported first (found dynamically, so kiln.uops depends on none of them) so that
the knobs they register appear too.
"""

from __future__ import annotations

import importlib
import pathlib
import sys

from kiln.uops.knobs import knobs_markdown


def _package_names(prefix: str, paths: list[str]) -> list[str]:
    """Dotted names of the regular packages under namespace `prefix`, descending into nested namespaces
    (e.g. kiln.drivers, which has no __init__.py and so is invisible to pkgutil.iter_modules)."""
    names: list[str] = []
    children: dict[str, list[str]] = {}
    for path in paths:
        for entry in sorted(pathlib.Path(path).iterdir()):
            if entry.is_dir() and entry.name.isidentifier():
                children.setdefault(entry.name, []).append(str(entry))
    for child, child_paths in sorted(children.items()):
        if any((pathlib.Path(p) / "__init__.py").exists() for p in child_paths):
            names.append(f"{prefix}.{child}")
        elif any(any(pathlib.Path(p).glob("*/__init__.py")) for p in child_paths):
            names.extend(_package_names(f"{prefix}.{child}", child_paths))
    return names


def import_kiln_packages() -> list[str]:
    """Import every installed kiln package (kiln.drivers.* included); returns the names imported."""
    import kiln

    imported = []
    for name in _package_names("kiln", list(kiln.__path__)):
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
