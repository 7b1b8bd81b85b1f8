"""Every test file of the repository is collected by `pytest`: it lies under a folder of `testpaths`.

A test file outside `testpaths` (pyproject.toml, [tool.pytest.ini_options]) is silently never run: 22 tests of
tests/scripts/ were missed that way. A test file is one whose name matches pytest's `python_files` patterns
(default `test_*.py` and `*_test.py`); the files looked at are git's (tracked, and untracked ones not ignored), so
a fresh clone checks the same set. Test files kiln runs with a launcher of their own (MPI ranks) are named
`mpi_test_*.py` and match neither pattern. A file inside a folder pytest never enters (`norecursedirs`, by default
hidden folders, build/, dist/, venv/ ...) is reported too.

The tests import their helper modules by name from the folders of pytest's `pythonpath` (README: "Test helpers"),
so the check also fails when a file of a tests folder edits `sys.path` (in code, or in the source of a subprocess it
starts), when a package's tests folder (packages/*/tests, each folder of tests/) has no conftest.py, when a
`pythonpath` folder is missing, and when a module name is ambiguous on that path: a helper module (or subfolder)
name found in two of its folders, a test module that another file imports found in two, or a helper named like a
standard-library module.

    uv run python scripts/check_test_paths.py     # exit status 1 and the list when a check fails
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PYTHON_FILES = ["test_*.py", "*_test.py"]
# pytest's default norecursedirs (pytest/main.py)
DEFAULT_NORECURSE = ["*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}"]


def _patterns(value: str | list[str] | None, default: list[str]) -> list[str]:
    if value is None:
        return default
    return value.split() if isinstance(value, str) else list(value)


def uncollected(
    files: list[str], testpaths: list[str], python_files: list[str], norecurse: list[str] = DEFAULT_NORECURSE
) -> list[str]:
    """The test files among `files` (paths relative to the root, with /) that a pytest run over `testpaths` misses."""
    missed = []
    roots = [PurePosixPath(path) for path in testpaths]
    for name in files:
        path = PurePosixPath(name)
        if not any(fnmatch.fnmatch(path.name, pattern) for pattern in python_files):
            continue
        under = next((root for root in roots if path == root or root in path.parents), None)
        # pytest does not enter a norecursedirs folder below a testpath (a testpath itself is always entered)
        inside = path.relative_to(under).parts[:-1] if under is not None else ()
        skipped = any(fnmatch.fnmatch(part, pattern) for part in inside for pattern in norecurse)
        if under is None or skipped:
            missed.append(name)
    return missed


def repository_files(root: Path) -> list[str]:
    """git's files of `root`: tracked, and untracked ones that are not ignored."""
    command = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
    listing = subprocess.run(command, cwd=root, capture_output=True, text=True, check=True).stdout
    return sorted({line for line in listing.splitlines() if line and (root / line).is_file()})


# sys.path changed in place (.insert( .append( .extend( .remove( .pop( .clear() or assigned (sys.path[...] =, =, +=)
SYS_PATH_EDIT = re.compile(
    r"\bsys\.path\s*(?:\.\s*(?:insert|append|extend|remove|pop|clear)\s*\(|\[[^\]]*\]\s*=(?!=)|\+?=(?!=))"
)
IMPORTED_NAME = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", re.MULTILINE)


def tests_folder(name: str) -> str | None:
    """The tests folder of a package that holds `name`, or None: packages/<package>/tests, or a folder of tests/ (the
    repository's own tests, tests/scripts: those of scripts/), or tests/ itself for a file directly in it."""
    parts = PurePosixPath(name).parts
    if len(parts) > 3 and parts[0] == "packages" and parts[2] == "tests":
        return "/".join(parts[:3])
    if len(parts) > 1 and parts[0] == "tests":
        return "/".join(parts[:2]) if len(parts) > 2 else "tests"
    return None


def sys_path_edits(sources: dict[str, str]) -> list[str]:
    """`file:line: text` for each line of a tests folder's Python file (`sources`: path -> text) that edits sys.path."""
    found = []
    for name, text in sources.items():
        for number, line in enumerate(text.splitlines(), 1):
            if SYS_PATH_EDIT.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    return found


def missing_conftests(files: list[str]) -> list[str]:
    """The package tests folders (holding a file of `files`) that have no conftest.py."""
    folders = {folder for name in files if (folder := tests_folder(name)) is not None}
    return sorted(folder for folder in folders if f"{folder}/conftest.py" not in files)


def top_level_modules(folder: str, files: list[str]) -> set[str]:
    """The module names a folder on sys.path offers: its .py files (conftest.py aside) and its subfolders of code."""
    names = set()
    for name in files:
        path = PurePosixPath(name)
        if not name.endswith(".py") or PurePosixPath(folder) not in path.parents:
            continue
        inside = path.relative_to(folder).parts
        if len(inside) > 1:
            names.add(inside[0])
        elif path.stem != "conftest":
            names.add(path.stem)
    return names


def ambiguous_modules(pythonpath: list[str], files: list[str], sources: dict[str, str]) -> list[str]:
    """The problems of the `pythonpath` folders: a missing folder; a module name that two folders offer and that is a
    helper or is imported by a file of `sources`; a helper named like a standard-library module."""
    problems = []
    offered: dict[str, list[str]] = {}
    for folder in pythonpath:
        modules = top_level_modules(folder, files)
        if not modules:
            problems.append(f"{folder}: a pythonpath folder with no Python module (missing, or a stale entry)")
        for module in modules:
            offered.setdefault(module, []).append(folder)
    imported = {match for text in sources.values() for match in IMPORTED_NAME.findall(text)}
    for module, folders in sorted(offered.items()):
        test_module = any(fnmatch.fnmatch(f"{module}.py", pattern) for pattern in DEFAULT_PYTHON_FILES)
        if len(folders) > 1 and (not test_module or module in imported):
            problems.append(f"{module}: a module name in {len(folders)} pythonpath folders {folders}: rename one")
        if module in sys.stdlib_module_names:
            problems.append(f"{module}: in {folders[0]}, shadows the standard-library module of that name: rename it")
    return problems


def main() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    testpaths = _patterns(config.get("testpaths"), ["."])
    python_files = _patterns(config.get("python_files"), DEFAULT_PYTHON_FILES)
    norecurse = _patterns(config.get("norecursedirs"), DEFAULT_NORECURSE)
    files = repository_files(ROOT)
    missed = uncollected(files, testpaths, python_files, norecurse)
    for name in missed:
        print(f"{name}: a test file pytest never collects (testpaths = {testpaths})")
    if missed:
        print(f"{len(missed)} test file(s) outside testpaths: add their folder to pyproject.toml's testpaths")
    sources = {name: (ROOT / name).read_text() for name in files if name.endswith(".py") and tests_folder(name)}
    edits = sys_path_edits(sources)
    for edit in edits:
        print(f"{edit}: a test edits sys.path; import the helper by name from a pythonpath folder instead")
    missing = missing_conftests(files)
    for folder in missing:
        print(f"{folder}: a package's tests folder without a conftest.py (a docstring saying what it configures)")
    ambiguous = ambiguous_modules(_patterns(config.get("pythonpath"), []), files, sources)
    for problem in ambiguous:
        print(problem)
    return 1 if missed or edits or missing or ambiguous else 0


if __name__ == "__main__":
    sys.exit(main())
