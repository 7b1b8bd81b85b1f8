"""A failing rank ends the whole MPI job with a clear error instead of hanging (run by scripts/ci.d/30-mpi.sh;
each test launches its own `mpirun -n 2` on failing_rank.py, bounded by a timeout)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("failing_rank.py")
pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun (openmpi-bin)")


def _launch(mode: str) -> tuple[int, str, float]:
    environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    started = time.monotonic()
    finished = subprocess.run(
        ["mpirun", "-n", "2", "--oversubscribe", sys.executable, str(SCRIPT), mode],
        capture_output=True,
        text=True,
        timeout=90,
        env=environment,
    )
    return finished.returncode, finished.stdout + finished.stderr, time.monotonic() - started


def test_a_raising_rank_aborts_every_rank() -> None:
    code, output, seconds = _launch("raise")
    assert code != 0, output
    assert "rank 1 of 2 failed" in output and "ValueError: rank 1 found a bad batch on purpose" in output, output
    assert "rank 1 aborts all 2 ranks" in output, output
    assert "should not have" not in output
    assert seconds < 60


def test_a_missing_rank_makes_the_collective_time_out() -> None:
    code, output, seconds = _launch("timeout")
    assert code != 0, output
    assert "DistributedTimeout: rank 0 of 2: all_reduce" in output, output
    assert "did not complete within 3 s" in output, output
    assert "should not have" not in output
    assert seconds < 60
