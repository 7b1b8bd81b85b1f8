"""Loads a script of scripts/ (not a package) as a module, for the tests of tests/scripts/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str, name: str | None = None) -> ModuleType:
    """The module of the script at `relative` (to the repository root), registered under `name` (default: its stem)
    in sys.modules, so that dataclasses and pickling inside it work."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
