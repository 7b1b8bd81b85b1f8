"""Tests of the package as a whole: what `import kiln.uops` loads, and the public names."""

from __future__ import annotations

import json
import subprocess
import sys

import kiln.uops

PROBE = """
import json, sys
before = set(sys.modules)
import kiln.uops
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_import_loads_no_other_kiln_package_and_no_third_party_module() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    loaded = json.loads(result.stdout)
    roots = {name.split(".")[0] for name in loaded}
    allowed_roots = set(sys.stdlib_module_names) | {"kiln"}
    assert roots <= allowed_roots, f"third-party modules loaded: {sorted(roots - allowed_roots)}"
    kiln_modules = [name for name in loaded if name.startswith("kiln")]
    assert kiln_modules and all(name == "kiln" or name.startswith("kiln.uops") for name in kiln_modules), kiln_modules


def test_every_public_name_is_importable_and_documented() -> None:
    for name in kiln.uops.__all__:
        value = getattr(kiln.uops, name)
        if callable(value) and not isinstance(value, type(kiln.uops.dtypes.int32)):
            assert getattr(value, "__doc__", None), f"{name} has no docstring"
    assert len(set(kiln.uops.__all__)) == len(kiln.uops.__all__)
