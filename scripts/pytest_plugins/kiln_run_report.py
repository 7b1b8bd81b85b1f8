"""A pytest plugin that writes what a run did to a JSON file, and the rule scripts/test.sh applies to it.

scripts/test.sh loads it (`-p kiln_run_report`, this folder on PYTHONPATH) with `--run-report PATH`. On the
controlling process (never on an xdist worker) it records:

- `collected`: the node ids the run was to execute (after deselection), from xdist's workers or pytest's own
  collection without xdist;
- `finished`: the node ids that got a final outcome (the call phase reported, a skip, an error in setup or teardown,
  or a lost worker);
- `failed`: the node ids with a failed or errored phase, and each collection error (as `collect:<node id>`);
- `crashed`: the node ids that were running on an xdist worker when it died (xdist's `pytest_handlecrashitem`,
  the run's only report of "worker 'gwN' crashed while running ...");
- `exitstatus`: pytest's exit status.

`python kiln_run_report.py retry REPORT` prints the node ids worth a second run, one per line, and exits 0 only when
every failure of the run was a lost worker's test and every other test finished; any other failure (a test that
failed, a collection error, tests left unrun) exits 1 with the reason, so it fails CI however often it would pass
again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

# pytest's exit statuses (pytest.ExitCode): only "tests failed" can be a lost worker's doing
TESTS_FAILED = 1


class RunReport:
    """Collects the run's outcomes on the controlling process and writes them at the end of the session."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.collected: set[str] = set()
        self.finished: set[str] = set()
        self.failed: set[str] = set()
        self.crashed: set[str] = set()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # without xdist the controlling process collects; with it, the workers do (the hook below)
        self.collected.update(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self.collected.update(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: object) -> None:
        self.crashed.add(crashitem)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.failed.add(f"collect:{report.nodeid}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.add(report.nodeid)
        if report.when == "call" or report.skipped or report.failed or report.nodeid in self.crashed:
            self.finished.add(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        record = {
            "exitstatus": int(exitstatus),
            "collected": sorted(self.collected),
            "finished": sorted(self.finished),
            "failed": sorted(self.failed),
            "crashed": sorted(self.crashed),
        }
        self.path.write_text(json.dumps(record, indent=1) + "\n")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-report", metavar="PATH", help="write the run's outcomes (kiln_run_report) to PATH as JSON")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--run-report")
    if path and not hasattr(config, "workerinput"):  # xdist workers report to the controller, which writes
        config.pluginmanager.register(RunReport(Path(path)), "kiln-run-report-writer")


def tests_to_retry(record: dict[str, Any]) -> list[str]:
    """The lost workers' tests when they are the run's only failures; ValueError naming what else went wrong."""
    crashed, failed = set(record["crashed"]), set(record["failed"])
    if record["exitstatus"] != TESTS_FAILED:
        raise ValueError(f"pytest exit status {record['exitstatus']}: not a run whose only problem is failed tests")
    other = sorted(failed - crashed)
    if other:
        raise ValueError(f"{len(other)} failure(s) not on a lost worker, not retried: " + ", ".join(other))
    unrun = sorted(set(record["collected"]) - set(record["finished"]))
    if unrun:
        raise ValueError(f"{len(unrun)} test(s) never finished: " + ", ".join(unrun[:20]))
    if not crashed:
        raise ValueError("the run failed but no test failed and no worker was lost")
    return sorted(crashed)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "retry":
        print("usage: kiln_run_report.py retry REPORT.json", file=sys.stderr)
        return 2
    try:
        retry = tests_to_retry(json.loads(Path(argv[1]).read_text()))
    except (OSError, ValueError) as error:
        print(f"no retry: {error}", file=sys.stderr)
        return 1
    print("\n".join(retry))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
