"""Fixtures of the viz tests: the files of a real traced training step (VIZ=1 PROFILE=1, written at exit), and a
viz server over them for each test module that asks for one (`server`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kiln.viz.server import VizServer, start_server

TRAINING_STEP = """
import numpy as np
from kiln.tensor import Tensor, nn, optim

rng = np.random.default_rng(0)
model = nn.Linear(8, 4)
optimizer = optim.SGD(model.parameters(), lr=0.1)
x = Tensor(rng.standard_normal((16, 8)).astype(np.float32))
y = Tensor(rng.standard_normal((16, 4)).astype(np.float32))
for _ in range(2):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    print(loss.item())
import sys
assert sys.argv[1:] in ([], ["--x", "1"]), sys.argv
"""


def run_traced(script: str, out: Path, serve: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter with VIZ=1 and PROFILE=1, its files going to `out`."""
    path = out.parent / f"{out.name}_script.py"
    path.write_text(script)
    environment = dict(os.environ, VIZ="1", PROFILE="1", VIZ_SERVE="1" if serve else "0", VIZ_OUT=str(out))
    return subprocess.run(
        [sys.executable, str(path)], env=environment, capture_output=True, text=True, timeout=300, check=True
    )


@pytest.fixture(scope="session")
def training_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory with trace.json and profile.json of two traced SGD steps of a Linear layer."""
    out = tmp_path_factory.mktemp("training") / "viz"
    run_traced(TRAINING_STEP, out)
    return out


@pytest.fixture(scope="module")
def server(training_files: Path) -> Iterator[VizServer]:
    """A viz server over `training_files` for the test module, shut down after it."""
    running = start_server([training_files])
    yield running
    running.shutdown()


@pytest.fixture(scope="session")
def training_trace(training_files: Path) -> dict[str, Any]:
    """The trace document of `training_files`, read with plain json (the oracle for the endpoints)."""
    document: dict[str, Any] = json.loads((training_files / "trace.json").read_text())
    return document


@pytest.fixture(scope="session")
def training_profile(training_files: Path) -> list[dict[str, Any]]:
    """The profile's complete events, read with plain json, their numbered pid / tid replaced by the names the
    metadata events give them."""
    events: list[dict[str, Any]] = json.loads((training_files / "profile.json").read_text())["traceEvents"]
    meta = [event for event in events if event["ph"] == "M"]
    processes = {event["pid"]: event["args"]["name"] for event in meta if event["name"] == "process_name"}
    threads = {(event["pid"], event["tid"]): event["args"]["name"] for event in meta if event["name"] == "thread_name"}
    return [
        dict(event, pid=processes[event["pid"]], tid=threads[(event["pid"], event["tid"])])
        for event in events
        if event["ph"] == "X"
    ]


SMALL_PROGRAM = """
from kiln.tensor import Tensor
print((Tensor([1.0, 2.0, 3.0]) * 2 + 1).sum().item())
"""


@pytest.fixture(scope="session")
def small_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trace.json and profile.json of one small traced program (one schedule, one kernel, one launch): the seed
    files the loader fuzzer mutates."""
    out = tmp_path_factory.mktemp("small") / "viz"
    run_traced(SMALL_PROGRAM, out)
    return out
