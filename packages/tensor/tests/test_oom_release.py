"""Dropping a tensor whose kernel is still queued, and running out of memory while kernels run, never crash.

Each case runs in a subprocess (the bug killed the process with SIGSEGV): with `LRU=0` a dropped tensor's block was
unmapped at once while the queued kernel still wrote it. `CPU_SHARES=2` keeps launches on the queue's thread (one
device on every core runs them in the caller's thread when the queue is idle), which is how the crash showed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

DROP_AFTER_REALIZE = """
import numpy as np
from kiln.runtime import Device
from kiln.tensor import Tensor

rng = np.random.default_rng(0)
x = rng.random((512, 512), dtype=np.float32)
a = Tensor(x).realize()
device = Device["CPU"]
queued = 0
for step in range(50):
    b = (a @ a + step).realize()
    queued += device.timeline_signal.value < device.timeline_value - 1
    del b  # dropped while its kernel may still be writing it
last = (a @ a + 1).numpy()
assert np.allclose(last, x @ x + 1, rtol=1e-4), "wrong result after the drops"
print("queued", queued)
"""

OUT_OF_MEMORY_WHILE_RUNNING = """
import numpy as np
from kiln.runtime import Device, OutOfMemoryError
from kiln.tensor import Tensor

rng = np.random.default_rng(0)
x = rng.random((512, 512), dtype=np.float32)
a = Tensor(x).realize()
allocator = Device["CPU"].allocator
allocator.max_bytes = allocator.allocated_bytes + (16 << 20)
errors = 0
for step in range(50):
    kept = [(a @ a + step).realize() for _ in range(3)]
    del kept  # into the cache (or released) while the kernels may still run
    try:
        Tensor.empty(5 << 20).realize()  # 20 MiB: over the cap, empties the cache first
    except OutOfMemoryError as error:
        assert "could not allocate 20971520 bytes" in str(error), error
        errors += 1
assert errors == 50, errors
assert np.allclose((a @ a).numpy(), x @ x, rtol=1e-4), "wrong result after the out-of-memory errors"
print("oom", errors)
"""


def _run(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**os.environ, "CPU_SHARES": "2", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_dropping_tensors_right_after_realize_with_lru_off_never_crashes() -> None:
    result = _run(DROP_AFTER_REALIZE, LRU="0")
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-3000:]}"
    assert int(result.stdout.split()[-1]) > 0  # some kernels were still queued when their tensor was dropped


def test_out_of_memory_while_kernels_run_raises_and_leaves_the_process_usable() -> None:
    result = _run(OUT_OF_MEMORY_WHILE_RUNNING)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-3000:]}"
    assert result.stdout.split() == ["oom", "50"]
