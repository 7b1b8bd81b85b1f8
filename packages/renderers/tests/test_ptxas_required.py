"""The ptxas tests skip without ptxas, but fail when KILN_REQUIRE_PTXAS=1 (CI): checked in a pytest process of their
own where a plugin hides ptxas."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TEST_PTX = Path(__file__).parent / "test_ptx.py"
HIDE_PTXAS = "import kiln.renderers.ptx as ptx\n\nptx.find_ptxas = lambda: None\n"


@pytest.mark.parametrize(("required", "outcome"), [("1", "1 error"), ("", "1 skipped")])
def test_a_missing_ptxas_fails_only_when_required(tmp_path: Path, required: str, outcome: str) -> None:
    (tmp_path / "hide_ptxas.py").write_text(HIDE_PTXAS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "KILN_REQUIRE_PTXAS": required}
    command = [sys.executable, "-m", "pytest", "-p", "hide_ptxas", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs"]
    command += ["-k", "test_ptxas_errors_carry_the_log", str(TEST_PTX)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert outcome in done.stdout, done.stdout
    assert (done.returncode != 0) == bool(required)
    assert "ptxas (CUDA toolkit) not found" in done.stdout
