"""Every test file of the repository is collected by `pytest`: it lies under a folder of `testpaths`.

A test file outside `testpaths` (pyproject.toml, [tool.pytest.ini_options]) is silently never run: 22 tests of
tests/scripts/ were missed that way. A test file is one whose name matches pytest's `python_files` patterns
(default `test_*.py` and `*_test.py`); the files looked at are git's (tracked, and untracked ones not ignored), so
a fresh clone checks the same set. Test files kiln runs with a launcher of their own (MPI ranks) are named
`mpi_test_*.py` and match neither pattern. A file inside a folder pytest never enters (`norecursedirs`, by default
hidden folders, build/, dist/, venv/ ...) is reported too.

    uv run python scripts/check_test_paths.py     # exit status 1 and the list when a test file would not be collected
"""

from __future__ import annotations

import fnmatch
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


def main() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    testpaths = _patterns(config.get("testpaths"), ["."])
    python_files = _patterns(config.get("python_files"), DEFAULT_PYTHON_FILES)
    norecurse = _patterns(config.get("norecursedirs"), DEFAULT_NORECURSE)
    missed = uncollected(repository_files(ROOT), testpaths, python_files, norecurse)
    for name in missed:
        print(f"{name}: a test file pytest never collects (testpaths = {testpaths})")
    if missed:
        print(f"{len(missed)} test file(s) outside testpaths: add their folder to pyproject.toml's testpaths")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
