"""Only codegen builds PROGRAM/LINEAR/SOURCE/BINARY uops or reads a program's sources (ARCHITECTURE.md).

An AST scan of every .py file under packages/ outside packages/codegen flags:
- any reference to `Ops.PROGRAM`, `Ops.LINEAR`, `Ops.SOURCE`, `Ops.BINARY` or `GroupOp.Program` (also through an
  alias of Ops, `getattr(Ops, "PROGRAM")` or `Ops["PROGRAM"]`): building or matching program uops;
- `.src[N]` on an expression whose text names a program (`program.src[2]`, `prg.src[3]`), and `.src[3].arg` /
  `.src[4].arg` anywhere (the SOURCE and BINARY positions of a PROGRAM): reading its stages by position.
The one place outside codegen allowed to name these ops is the module that defines them (kiln/uops/ops.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[2]
ALLOWED = {Path("uops/src/kiln/uops/ops.py")}
PROGRAM_OPS = frozenset({"PROGRAM", "LINEAR", "SOURCE", "BINARY"})
PROGRAM_NAME = re.compile(r"program|prg", re.IGNORECASE)
STAGE_POSITIONS = frozenset({3, 4})  # PROGRAM(SINK, DEVICE, LINEAR, SOURCE, BINARY)


def _ops_aliases(tree: ast.AST) -> set[str]:
    names = {"Ops"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.asname for alias in node.names if alias.name == "Ops" and alias.asname)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in names:
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
    return names


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def find_offenses(source: str, filename: str = "<snippet>") -> list[str]:
    """Lines of `source` that build or index program uops, as 'file:line: what'."""
    tree = ast.parse(source, filename)
    ops_names = _ops_aliases(tree)
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    found: list[str] = []

    def flag(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = _last_name(node.value)
            if node.attr in PROGRAM_OPS and owner in ops_names:
                flag(node, f"uses Ops.{node.attr}")
            if node.attr == "Program" and owner == "GroupOp":
                flag(node, "uses GroupOp.Program")
        elif isinstance(node, ast.Call) and _last_name(node.func) == "getattr" and len(node.args) >= 2:
            target, name = node.args[0], node.args[1]
            if _last_name(target) in ops_names and isinstance(name, ast.Constant) and name.value in PROGRAM_OPS:
                flag(node, f"uses getattr(Ops, {name.value!r})")
        elif isinstance(node, ast.Subscript):
            position = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if _last_name(node.value) in ops_names and position in PROGRAM_OPS:
                flag(node, f"uses Ops[{position!r}]")
            if not (isinstance(node.value, ast.Attribute) and node.value.attr == "src" and isinstance(position, int)):
                continue
            base_text = ast.unparse(node.value.value)
            if PROGRAM_NAME.search(base_text):
                flag(node, f"indexes {base_text}.src[{position}]")
            parent = parents.get(node)
            if position in STAGE_POSITIONS and isinstance(parent, ast.Attribute) and parent.attr == "arg":
                flag(node, f"reads {base_text}.src[{position}].arg (a PROGRAM stage by position)")
    return found


def test_scanner_flags_synthetic_offenders() -> None:
    offending = {
        "UOp(Ops.PROGRAM, src=(sink, device))": "Ops.PROGRAM",
        "pattern = UPat(Ops.SOURCE, name='s')": "Ops.SOURCE",
        "from kiln.uops import Ops as O\nx = O.BINARY": "Ops.BINARY",
        "kind = getattr(Ops, 'LINEAR')": "getattr",
        "kind = Ops['LINEAR']": "Ops['LINEAR']",
        "ok = node.op in GroupOp.Program": "GroupOp.Program",
        "text = p.src[3].arg": ".src[3].arg",
        "uops = program.src[2].src": "program.src[2]",
        "code = self.prg.src[0]": "prg.src[0]",
    }
    for snippet, expected in offending.items():
        offenses = find_offenses(snippet)
        assert offenses and any(expected in o for o in offenses), (snippet, offenses)
    clean = "size = rng.src[0].arg\nvalue = x.src[1].arg + y.src[2].src[0].arg\nop = Ops.ADD\nname = 'PROGRAM'"
    assert find_offenses(clean) == []


def test_no_module_outside_codegen_builds_or_indexes_programs() -> None:
    files = sorted(p for p in PACKAGES.rglob("*.py") if p.relative_to(PACKAGES).parts[0] != "codegen")
    assert any(p.relative_to(PACKAGES).parts[0] == "uops" for p in files), f"no packages found under {PACKAGES}"
    offenses = []
    for path in files:
        relative = path.relative_to(PACKAGES)
        if relative in ALLOWED or ".venv" in relative.parts:
            continue
        offenses += find_offenses(path.read_text(encoding="utf-8"), str(relative))
    assert not offenses, "program uops are codegen's; use kiln.codegen.Program instead:\n" + "\n".join(offenses)
