"""scripts/pytest_plugins/kiln_run_report.py: what a real pytest run (2 xdist workers, one of them killed) records,
and the retry rule of scripts/test.sh: only a lost worker's tests are retried, any other failure is final."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from script_loading import load_script

PLUGINS = Path(__file__).resolve().parents[2] / "scripts" / "pytest_plugins"


run_report = load_script("scripts/pytest_plugins/kiln_run_report.py")

PASSING = "def test_one():\n    assert 1 + 1 == 2\n\ndef test_two():\n    assert 'a' * 2 == 'aa'\n"
# SIGKILL: the worker dies as it does when the kernel's OOM killer or a native crash takes it
CRASHING = "import os, signal\n\ndef test_dies():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
FAILING = "def test_flaky_timing():\n    assert 3 < 2\n"
SKIPPING = "import pytest\n\ndef test_needs_tool():\n    pytest.skip('tool not found')\n"


def run_pytest(tmp_path: Path, files: dict[str, str], workers: int = 2) -> tuple[int, dict[str, Any], str]:
    """(exit status, the JSON report, output) of pytest over `files`, with the plugin, in a process of its own."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(PLUGINS)}
    command = [sys.executable, "-m", "pytest", "-p", "kiln_run_report", "--run-report", str(report)]
    command += ["-p", "no:cacheprovider", "-n", str(workers), "-rs", str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(report.read_text()), done.stdout + done.stderr


def test_a_lost_workers_test_is_the_only_one_retried(tmp_path: Path) -> None:
    status, record, output = run_pytest(tmp_path, {"test_ok.py": PASSING, "test_crash.py": CRASHING})
    assert status == 1, output
    assert "crashed while running" in output  # xdist's own words for the same event
    assert record["crashed"] == ["test_crash.py::test_dies"]
    assert record["failed"] == ["test_crash.py::test_dies"]
    assert set(record["collected"]) == {"test_ok.py::test_one", "test_ok.py::test_two", "test_crash.py::test_dies"}
    assert set(record["finished"]) == set(record["collected"])
    assert run_report.tests_to_retry(record) == ["test_crash.py::test_dies"]


def test_a_failing_test_is_never_retried(tmp_path: Path) -> None:
    # before: test.sh reran every failed test once, so an intermittent assertion went green on the second try
    status, record, _ = run_pytest(tmp_path, {"test_ok.py": PASSING, "test_flaky.py": FAILING})
    assert status == 1
    assert record["crashed"] == []
    assert record["failed"] == ["test_flaky.py::test_flaky_timing"]
    with pytest.raises(ValueError, match=r"test_flaky\.py::test_flaky_timing"):
        run_report.tests_to_retry(record)


def test_a_collection_error_is_final(tmp_path: Path) -> None:
    status, record, _ = run_pytest(tmp_path, {"test_ok.py": PASSING, "test_broken.py": "import no_such_module_x\n"})
    assert status != 0
    assert "collect:test_broken.py" in record["failed"]
    with pytest.raises(ValueError):
        run_report.tests_to_retry(record)


def test_skips_are_listed_as_not_run_and_finish(tmp_path: Path) -> None:
    status, record, output = run_pytest(tmp_path, {"test_skip.py": SKIPPING, "test_ok.py": PASSING})
    assert status == 0
    assert "SKIPPED" in output and "tool not found" in output  # -rs names each test that did not run
    assert "test_skip.py::test_needs_tool" in record["finished"]
    assert record["failed"] == []


def test_without_xdist_the_controller_collects(tmp_path: Path) -> None:
    status, record, _ = run_pytest(tmp_path, {"test_ok.py": PASSING}, workers=0)
    assert status == 0
    assert record["collected"] == record["finished"] == ["test_ok.py::test_one", "test_ok.py::test_two"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"exitstatus": 2}, "exit status 2"),  # interrupted, usage error, internal error: nothing to retry
        ({"collected": ["a::x", "a::y", "a::z"]}, r"1 test\(s\) never finished: a::z"),
        ({"crashed": [], "failed": []}, "no worker was lost"),
        ({"failed": ["a::x", "a::y"]}, r"1 failure\(s\) not on a lost worker.*a::x"),  # a real failure beside
    ],
)
def test_runs_that_are_not_only_lost_workers_are_final(change: dict[str, object], reason: str) -> None:
    record: dict[str, object] = {
        "exitstatus": 1,
        "collected": ["a::x", "a::y"],
        "finished": ["a::x", "a::y"],
        "failed": ["a::y"],
        "crashed": ["a::y"],
    }
    assert run_report.tests_to_retry(record) == ["a::y"]
    with pytest.raises(ValueError, match=reason):
        run_report.tests_to_retry({**record, **change})
