"""`import kiln.codegen` does not import numpy: only the reference interpreter needs it, imported on first use."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
import kiln.codegen
assert "numpy" not in sys.modules, sorted(m for m in sys.modules if m.startswith("numpy"))[:5]
from kiln.codegen import run_program
assert "numpy" in sys.modules and callable(run_program)
print("ok")
"""


def test_import_codegen_leaves_numpy_out_until_the_interpreter_is_used() -> None:
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_unknown_attributes_still_raise() -> None:
    import kiln.codegen

    try:
        kiln.codegen.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("kiln.codegen.no_such_name did not raise AttributeError")
