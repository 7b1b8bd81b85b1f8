"""Check that kiln.tensor keeps no mutated module-level state (issue 41: explicit context).

    uv run python scripts/check_module_state.py [--list] [FOLDER ...]

State belongs to an object (the `Engine`, a context on a thread-local stack, a module of the model): a module-level
container that code mutates is shared by every thread, test and model of the process. The source is read with ast
(nothing is imported). A finding is one of:

- a module-level name bound to a mutable container (a dict, list or set display or comprehension, `dict()`,
  `OrderedDict()`, `defaultdict()`, `deque()`, `WeakValueDictionary()`, `threading.local()`, ...) that is mutated
  in any scanned module: a mutating method (`append`, `update`, `setdefault`, ...), an item or attribute
  written or deleted (`name[key] = value`, `del name[key]`, `name.attribute = value`), or an augmented assignment;
  the name may be reached directly or imported into the mutating module with `from module import name`;
- a module-level name bound to any other object (`name = SomeClass()`) whose attributes are written from anywhere
  (`name.attribute = value`, `name.attribute += 1`, `name.items.append(value)`): a process-wide object with state;
- a module-level name rebound from a function through `global name`, or from another module
  (`from package import module; module.name = value`).

A finding is allowed when its statement (the binding, or the `global` line) carries a comment
`# module-state: <reason>` with a non-empty reason, e.g. a bounded, thread-safe cache keyed by immutable values.
The exit status is 1 when a finding is not allowed. `--list` prints the allowed ones too.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FOLDERS = (ROOT / "packages" / "tensor" / "src" / "kiln" / "tensor",)
ALLOW = re.compile(r"#\s*module-state:\s*(\S.*)$")

# callables whose result is a mutable container (by the last part of their dotted name)
MUTABLE_FACTORIES = frozenset(
    {
        "dict",
        "list",
        "set",
        "bytearray",
        "defaultdict",
        "OrderedDict",
        "deque",
        "Counter",
        "WeakValueDictionary",
        "WeakKeyDictionary",
        "WeakSet",
        "local",
    }
)
MUTATING_METHODS = frozenset(
    {
        "append",
        "appendleft",
        "extend",
        "extendleft",
        "insert",
        "pop",
        "popleft",
        "popitem",
        "remove",
        "clear",
        "update",
        "setdefault",
        "add",
        "discard",
        "difference_update",
        "intersection_update",
        "symmetric_difference_update",
        "move_to_end",
        "sort",
        "reverse",
        "rotate",
    }
)


@dataclass
class Binding:
    """A module-level name bound to a mutable container."""

    module: str
    path: Path
    name: str
    line: int
    allowed: str | None  # the reason of its `# module-state:` comment, None without one
    mutations: list[str] = field(default_factory=list)  # "path:line" of each mutation found


@dataclass
class GlobalRebinding:
    """A `global name` statement, or a `module.name = value` from another module, rebinding a module-level name."""

    path: Path
    name: str
    line: int
    allowed: str | None


def _is_mutable_container(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp):
        return True
    if isinstance(value, ast.BinOp):  # `{...} | {...}` builds a new dict
        return _is_mutable_container(value.left) or _is_mutable_container(value.right)
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        return name in MUTABLE_FACTORIES
    return False


def _allow_reasons(source: str) -> dict[int, str]:
    """line -> the reason of a `# module-state:` comment on it."""
    reasons: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and (match := ALLOW.search(token.string)):
            reasons[token.start[0]] = match.group(1).strip()
    return reasons


def _statement_reason(node: ast.stmt, reasons: dict[int, str]) -> str | None:
    for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        if line in reasons:
            return reasons[line]
    return None


def _module_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run at module level, including those inside top-level if / try blocks."""
    found: list[ast.stmt] = []
    for node in body:
        found.append(node)
        if isinstance(node, ast.If):
            found += _module_statements(node.body) + _module_statements(node.orelse)
        elif isinstance(node, ast.Try):
            found += (
                _module_statements(node.body) + _module_statements(node.orelse) + _module_statements(node.finalbody)
            )
            for handler in node.handlers:
                found += _module_statements(handler.body)
    return found


def _root_name(target: ast.expr) -> str | None:
    """`name` for `name`, `name[k]`, `name.attribute`, `name[k][j].attribute`, ..."""
    while isinstance(target, ast.Subscript | ast.Attribute):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _mutated_names(tree: ast.Module) -> list[tuple[str, int, bool]]:
    """(root name, line) of each in-place change of a module-level name: item / attribute writes and deletes,
    augmented assignments, mutating method calls. A name a function binds itself (a parameter, an assignment without
    `global`) is that function's own and is skipped there. The flag is True for a change of the object's own
    attributes or items (not a method call on the name itself, which only a known container is known to mutate)."""
    found: list[tuple[str, int, bool]] = []

    def written(target: ast.expr, line: int, local: set[str]) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                written(element, line, local)
        elif isinstance(target, ast.Subscript | ast.Attribute) and (name := _root_name(target)) and name not in local:
            found.append((name, line, True))

    def visit(nodes: list[ast.AST], local: set[str]) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(list(ast.iter_child_nodes(node)), local | _function_locals(node))
                continue
            if isinstance(node, ast.Assign | ast.Delete):
                for target in node.targets:
                    written(target, node.lineno, local)
            elif isinstance(node, ast.AnnAssign):
                written(node.target, node.lineno, local)
            elif isinstance(node, ast.AugAssign):
                if isinstance(node.target, ast.Name):
                    if node.target.id not in local:
                        found.append((node.target.id, node.lineno, True))
                else:
                    written(node.target, node.lineno, local)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = node.func.value
                name = _root_name(receiver)
                if node.func.attr in MUTATING_METHODS and name and name not in local:
                    found.append((name, node.lineno, not isinstance(receiver, ast.Name)))
            visit(list(ast.iter_child_nodes(node)), local)

    visit([tree], set())
    return found


def _function_locals(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names a function binds itself: its parameters and the names it assigns without declaring them global."""
    arguments = function.args
    names = {argument.arg for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    names |= {argument.arg for argument in (arguments.vararg, arguments.kwarg) if argument is not None}
    declared: set[str] = set()
    stack: list[ast.AST] = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            if not isinstance(node, ast.Lambda):
                names.add(node.name)
            continue
        if isinstance(node, ast.Global | ast.Nonlocal):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return names - declared


def module_name(folder: Path, path: Path) -> str:
    parts = list(path.relative_to(folder.parent.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _module_aliases(tree: ast.Module, modules: set[str]) -> dict[str, str]:
    """Local name -> scanned module, for `import a.b as name` and `from a import b` where a.b is scanned."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def scan(folders: list[Path]) -> tuple[list[Binding], list[GlobalRebinding]]:
    """The module-level bindings that are mutated (with where), and every `global` / outside rebinding."""
    trees: dict[Path, tuple[str, ast.Module, dict[int, str]]] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            source = path.read_text()
            trees[path] = (module_name(folder, path), ast.parse(source, str(path)), _allow_reasons(source))
    modules = {module for module, _tree, _reasons in trees.values()}

    # (module, name) -> its binding, and whether it is a known container (else any object built by a call)
    bindings: dict[tuple[str, str], tuple[Binding, bool]] = {}
    rebindings: list[GlobalRebinding] = []
    for path, (module, tree, reasons) in trees.items():
        for node in _module_statements(tree.body):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            container = _is_mutable_container(value)
            if not container and not isinstance(value, ast.Call):
                continue
            for target in targets:
                if isinstance(target, ast.Name):
                    binding = Binding(module, path, target.id, node.lineno, _statement_reason(node, reasons))
                    bindings[(module, target.id)] = (binding, container)
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                for name in node.names:
                    rebindings.append(GlobalRebinding(path, name, node.lineno, _statement_reason(node, reasons)))

    for path, (module, tree, reasons) in trees.items():
        # what each name of this module refers to: its own bindings, and names imported from scanned modules
        refers: dict[str, tuple[str, str]] = {name: (module, name) for owner, name in bindings if owner == module}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    if (node.module, alias.name) in bindings:
                        refers[alias.asname or alias.name] = (node.module, alias.name)
        for name, line, own_state in _mutated_names(tree):
            if name in refers:
                binding, container = bindings[refers[name]]
                if container or own_state:
                    binding.mutations.append(f"{_shown(path)}:{line}")
        # `module.name = value` from outside the module: a rebinding of that module's global
        aliases = _module_aliases(tree, modules)
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in aliases
                ):
                    name = f"{aliases[target.value.id]}.{target.attr}"
                    rebindings.append(GlobalRebinding(path, name, node.lineno, _statement_reason(node, reasons)))
    return [binding for binding, _container in bindings.values() if binding.mutations], rebindings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", type=Path, help="package folders to scan (default: kiln.tensor)")
    parser.add_argument("--list", action="store_true", help="print the allowed findings too")
    options = parser.parse_args()
    folders = [folder.resolve() for folder in options.folders] or list(DEFAULT_FOLDERS)
    mutated, rebindings = scan(folders)
    failures = 0
    for binding in mutated:
        where = f"{_shown(binding.path)}:{binding.line}"
        if binding.allowed is None:
            failures += 1
            print(f"{where}: module-level state {binding.name!r} is mutated at {', '.join(binding.mutations)}")
        elif options.list:
            print(f"{where}: allowed {binding.name!r}: {binding.allowed}")
    for rebinding in rebindings:
        where = f"{_shown(rebinding.path)}:{rebinding.line}"
        if rebinding.allowed is None:
            failures += 1
            print(f"{where}: module-level name {rebinding.name!r} is rebound (`global` or from another module)")
        elif options.list:
            print(f"{where}: allowed `global {rebinding.name}`: {rebinding.allowed}")
    allowed = len(mutated) + len(rebindings) - failures
    print(f"module state: {failures} finding(s) without a `# module-state: <reason>` comment, {allowed} allowed")
    if failures:
        print("move the state onto the Engine or a context (kiln.tensor.realize.engine), or justify it in a comment")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
