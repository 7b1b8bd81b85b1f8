"""Check that the modules of each kiln package form a DAG: no import cycle inside a package.

    uv run python scripts/check_import_cycles.py [--import-time-only] [--allow PACKAGE ...]

The import graph is read from the source (ast), not by importing anything. An edge A -> B exists when module A
imports module B (or a name from B) anywhere: at module level, inside functions (a deferred import hides a cycle
in the design rather than removes it) and under `if TYPE_CHECKING:` (a type-only cycle still means the two modules
need each other to be understood). `--import-time-only` keeps only the imports that run when A is imported
(module level, outside TYPE_CHECKING). Importing a package (`from kiln.x import y` where kiln/x/__init__.py
exists) is an edge to its `__init__` module. Each strongly connected component with more than one module is
printed with one cycle through it; the exit status is 1 when a package not named by `--allow` has a cycle.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_roots() -> dict[str, Path]:
    """kiln.<name> -> its source folder, for every workspace package."""
    roots: dict[str, Path] = {}
    for src in sorted((ROOT / "packages").glob("*/src/kiln")):
        for child in sorted(src.iterdir()):
            if child.is_dir() and (child / "__init__.py").exists():
                roots[f"kiln.{child.name}"] = child
            elif child.is_dir():  # namespace folder (kiln.drivers): its sub-packages are the packages
                for grandchild in sorted(child.iterdir()):
                    if grandchild.is_dir() and (grandchild / "__init__.py").exists():
                        roots[f"kiln.{child.name}.{grandchild.name}"] = grandchild
    return roots


def module_name(package: str, root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.Module, all_imports: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import statement, deferred) for the imports of a module; deferred = inside a function or type-only.

    With `all_imports` False only the import-time ones (module level, outside TYPE_CHECKING) are listed.
    """

    def visit(nodes: list[ast.stmt], deferred: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node, deferred
            elif isinstance(node, ast.If):
                if not _is_type_checking(node.test):
                    yield from visit(node.body, deferred)
                elif all_imports:
                    yield from visit(node.body, True)
                yield from visit(node.orelse, deferred)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                    yield from visit(block, deferred)
            elif isinstance(node, ast.With):
                yield from visit(node.body, deferred)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and all_imports:
                yield from visit(node.body, True)
            elif isinstance(node, ast.ClassDef):
                yield from visit(node.body, deferred)
                if all_imports:
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                            yield from visit(item.body, True)

    yield from visit(tree.body, False)


def resolve(current: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> Iterator[str]:
    """The modules of `known` that an import statement loads."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in known:
                yield alias.name
        return
    if node.level:
        base = current.split(".") if is_package else current.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    found_submodule = False
    for alias in node.names:
        candidate = f"{target}.{alias.name}"
        if candidate in known:
            found_submodule = True
            yield candidate
    if target in known and not (found_submodule and all(f"{target}.{a.name}" in known for a in node.names)):
        yield target


def graph(package: str, root: Path, all_imports: bool) -> dict[str, set[tuple[str, bool]]]:
    files = {module_name(package, root, p): p for p in sorted(root.rglob("*.py"))}
    known = set(files)
    edges: dict[str, set[tuple[str, bool]]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, deferred in imports(tree, all_imports):
            for target in resolve(module, path.name == "__init__.py", node, known):
                if target != module:
                    edges[module].add((target, deferred))
    return edges


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def one_cycle(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first search inside the component)."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in parents:
                    parents[child] = node
                    following.append(child)
        frontier = following
    return component


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--import-time-only", action="store_true", help="only module-level imports outside TYPE_CHECKING blocks"
    )
    parser.add_argument("--allow", nargs="*", default=[], help="packages whose cycles are reported but tolerated")
    args = parser.parse_args(argv)
    failed = False
    for package, root in package_roots().items():
        full = graph(package, root, not args.import_time_only)
        plain = {m: {t for t, _ in targets} for m, targets in full.items()}
        components = strongly_connected(plain)
        for component in components:
            cycle = one_cycle(plain, component)
            tolerated = package in args.allow
            failed = failed or not tolerated
            label = "tolerated" if tolerated else "CYCLE"
            print(f"{label} in {package}: {len(component)} modules; e.g. {' -> '.join(cycle)}")
            deferred = sorted(f"{m} -> {t}" for m in component for t, d in full[m] if d and t in component)
            if deferred:
                print(f"    of which deferred (function-local or type-only) imports: {', '.join(deferred[:8])}")
        if not components:
            print(f"ok {package}: {len(full)} modules, no import cycle")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
