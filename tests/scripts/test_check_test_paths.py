"""scripts/check_test_paths.py reports exactly the test files a pytest run would miss (checked against pytest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_every_way_of_editing_sys_path_is_reported() -> None:
    # written with {} for the name, so that this file does not edit sys.path in the check's eyes
    edits = [
        "{}.insert(0, str(Path(__file__).parent))",
        "    {}.append(folder)",
        "{}.extend([a, b])",
        "{} .remove(folder)",
        "{}[:0] = [folder]",
        "{} = [folder, *sys.path]",
        "{} += [folder]",
        '"import sys; {}.insert(0, sys.argv[1]); import helper\\n"',  # the source of a subprocess
    ]
    reads = ["print({})", "assert {}[0] == folder", "if folder in {}:", "# {} is not edited"]
    lines = [line.format("sys.path") for line in edits + reads]
    found = checker.sys_path_edits({f"packages/a/tests/test_{i}.py": line for i, line in enumerate(lines)})
    assert found == [f"packages/a/tests/test_{i}.py:1: {line.strip()}" for i, line in enumerate(lines[: len(edits)])]


def test_a_tests_folder_without_conftest_is_reported() -> None:
    files = [
        "packages/a/tests/test_x.py",
        "packages/a/tests/deep/test_y.py",
        "packages/b/tests/conftest.py",
        "packages/b/tests/test_z.py",
        "packages/c/src/kiln/c/tests.py",  # product code, no tests folder
        "tests/scripts/test_w.py",
        "README.md",
    ]
    assert checker.missing_conftests(files) == ["packages/a/tests", "tests/scripts"]
    assert checker.missing_conftests([*files, "packages/a/tests/conftest.py", "tests/scripts/conftest.py"]) == []
    assert checker.missing_conftests(["tests/test_v.py"]) == ["tests"]


def test_ambiguous_names_on_the_pythonpath_are_reported() -> None:
    files = [
        "packages/a/tests/conftest.py",
        "packages/a/tests/corpus.py",
        "packages/a/tests/test_shared.py",
        "packages/a/tests/test_imported.py",
        "packages/a/tests/conformance/cases.py",
        "packages/b/tests/conftest.py",
        "packages/b/tests/test_shared.py",  # a test file of the same name, imported by no one: no clash
        "packages/b/tests/test_imported.py",
        "packages/b/tests/corpus.py",
        "packages/b/tests/conformance/other.py",
        "packages/b/tests/random.py",
    ]
    sources = {"packages/b/tests/test_user.py": "import numpy\nfrom test_imported import helper\n"}
    pythonpath = ["packages/a/tests", "packages/b/tests", "packages/gone/tests"]
    assert checker.ambiguous_modules(pythonpath, files, sources) == [
        "packages/gone/tests: a pythonpath folder with no Python module (missing, or a stale entry)",
        "conformance: a module name in 2 pythonpath folders ['packages/a/tests', 'packages/b/tests']: rename one",
        "corpus: a module name in 2 pythonpath folders ['packages/a/tests', 'packages/b/tests']: rename one",
        "random: in packages/b/tests, shadows the standard-library module of that name: rename it",
        "test_imported: a module name in 2 pythonpath folders ['packages/a/tests', 'packages/b/tests']: rename one",
    ]
    assert checker.ambiguous_modules(pythonpath[:1], files, sources) == []


def test_helpers_import_from_the_pythonpath_of_pytest(tmp_path: Path) -> None:
    # the mechanism itself: a test imports a helper beside it by name, with no sys.path edit, under importlib mode
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "helper_of_a.py").write_text("VALUE = 3\n")
    test = "from helper_of_a import VALUE\n\ndef test_it():\n    assert VALUE == 3\n"
    (tmp_path / "tests" / "test_a.py").write_text(test)
    ini = "[pytest]\naddopts = --import-mode=importlib\ntestpaths = tests\n"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    for config, expected in ((ini + "pythonpath = tests\n", 0), (ini, 2)):  # 2: the collection error without it
        (tmp_path / "pytest.ini").write_text(config)
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == expected, done.stdout
