"""The runtime reads programs through `Program`'s facts and holds renderer objects: an AST scan of kiln.runtime for
renderer class names in strings (lookups by name) and for `.uops` reads (scanning the IR itself)."""

from __future__ import annotations

import ast
from pathlib import Path

import kiln.renderers
import kiln.runtime
from kiln.codegen import Renderer

RUNTIME = Path(kiln.runtime.__file__).parent


def _renderer_names() -> set[str]:
    return {
        name
        for name in dir(kiln.renderers)
        if isinstance(getattr(kiln.renderers, name), type) and issubclass(getattr(kiln.renderers, name), Renderer)
    }


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (prose may name renderers; lookups may not)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def scan(source: str, names: set[str]) -> list[str]:
    tree = ast.parse(source)
    skip = _docstrings(tree)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            problems += [f"line {node.lineno}: string names {n}" for n in sorted(names) if n in node.value]
        if isinstance(node, ast.Attribute) and node.attr == "uops":
            problems.append(f"line {node.lineno}: reads .uops")
    return problems


def test_runtime_names_no_renderer_class_and_never_scans_uops() -> None:
    names = _renderer_names()
    assert {"CRenderer", "LLVMRenderer", "PythonRenderer", "CUDARenderer", "PTXRenderer"} <= names
    problems = {
        str(path.relative_to(RUNTIME)): found
        for path in sorted(RUNTIME.rglob("*.py"))
        if (found := scan(path.read_text(), names))
    }
    assert problems == {}


def test_the_scan_finds_name_lookups_and_uop_scans() -> None:
    sample = '"""Docs may say CRenderer."""\nx = getattr(mod, "CRenderer")\ny = [u for u in program.uops]\n'
    assert scan(sample, {"CRenderer"}) == ["line 2: string names CRenderer", "line 3: reads .uops"]
