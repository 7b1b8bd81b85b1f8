"""scripts/check_test_paths.py reports exactly the test files a pytest run would miss (checked against pytest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from script_loading import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_test_paths.py"


checker = load_script("scripts/check_test_paths.py")

TREE = [
    "packages/a/tests/test_x.py",
    "packages/a/tests/helper.py",  # not a test file
    "packages/a/tests/mpi/mpi_test_ranks.py",  # run by its own launcher: no pytest pattern matches
    "packages/a/tests/build/test_in_build.py",  # pytest does not enter build/ below a testpath
    "packages/a/tests/.hidden/test_hidden.py",
    "packages/a/tests/check_test.py",  # the second default pattern
    "tests/scripts/test_y.py",
    "tools/test_z.py",
    "test_top.py",
]


def test_files_outside_testpaths_are_reported() -> None:
    missed = checker.uncollected(TREE, ["packages"], checker.DEFAULT_PYTHON_FILES)
    assert missed == [
        "packages/a/tests/build/test_in_build.py",
        "packages/a/tests/.hidden/test_hidden.py",
        "tests/scripts/test_y.py",
        "tools/test_z.py",
        "test_top.py",
    ]
    assert checker.uncollected(TREE, ["packages", "tests", "tools", "test_top.py"], ["test_*.py"]) == [
        "packages/a/tests/build/test_in_build.py",
        "packages/a/tests/.hidden/test_hidden.py",
    ]


def test_a_prefix_of_a_folder_name_is_not_that_folder() -> None:
    # "tests" must not cover "tests_extra/": folders are compared by their parts, not by string prefixes
    assert checker.uncollected(["tests_extra/test_a.py"], ["tests"], ["test_*.py"]) == ["tests_extra/test_a.py"]


def test_the_check_agrees_with_what_pytest_collects(tmp_path: Path) -> None:
    for name in TREE:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("def test_it():\n    pass\n" if path.name != "helper.py" else "")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = packages\n")
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    collected = {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}
    test_files = [name for name in TREE if name.endswith(".py") and Path(name).name != "helper.py"]
    test_files.remove("packages/a/tests/mpi/mpi_test_ranks.py")
    missed = checker.uncollected(TREE, ["packages"], checker.DEFAULT_PYTHON_FILES)
    assert collected == set(test_files) - set(missed), done.stdout


def test_every_test_file_of_this_repository_is_collected() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
