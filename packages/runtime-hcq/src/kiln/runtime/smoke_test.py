"""The one-kernel smoke test of a (device, renderer) pair, run by `python -m kiln.runtime`.

One small kernel (a row sum plus an elementwise term, `out[i] = 2 * sum_j a[i, j] + b[i]`) goes the whole way:
kernel sink -> `get_program` with the renderer (the renderer's own compiler) -> `device.runtime(program)` -> launch on
device buffers -> copy back, compared exactly with numpy (small integers, so every summation order gives the same
float32 result).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from kiln.codegen import KernelInfo, Program, Renderer, get_program
from kiln.runtime.buffer import Buffer
from kiln.runtime.device import DeviceBase
from kiln.uops import AxisKind, Ops, UOp, dtypes

__all__ = ["SmokeResult", "smoke_test", "smoke_test_sink"]

ROWS, COLUMNS = 13, 8


def smoke_test_sink() -> UOp:
    """The smoke-test kernel: out[i] = 2 * sum_j a[i * COLUMNS + j] + b[i] over float32 buffers (out, a, b)."""
    row, column = UOp.range(ROWS, 0), UOp.range(COLUMNS, 1, AxisKind.REDUCE)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(ROWS), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(ROWS * COLUMNS), arg=1)
    b = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(ROWS), arg=2)
    total = a.index(row * COLUMNS + column).load().reduce(column, op=Ops.ADD)
    value = total * 2.0 + b.index(row).load()
    return UOp(Ops.SINK, src=(out.index(row).store(value).end(row),), arg=KernelInfo("kiln_smoke_test"))


@dataclass(frozen=True)
class SmokeResult:
    """The outcome of one smoke test: `ok`, and a one-line description (time, or what went wrong)."""

    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"ok ({self.detail})" if self.ok else f"FAILED: {self.detail}"


def smoke_test(device: DeviceBase, renderer: Renderer) -> SmokeResult:
    """Compiles and runs the smoke-test kernel on `device` with `renderer`; never raises for a failing pair."""
    try:
        start = time.perf_counter()
        program = Program(get_program(smoke_test_sink(), renderer))
        compiled = time.perf_counter()
        rng = np.random.default_rng(0)
        a_values = rng.integers(-8, 9, ROWS * COLUMNS).astype(np.float32)
        b_values = rng.integers(-8, 9, ROWS).astype(np.float32)
        out = Buffer(device.name, ROWS, dtypes.float32)
        a = Buffer(device.name, ROWS * COLUMNS, dtypes.float32).copyin(a_values)
        b = Buffer(device.name, ROWS, dtypes.float32).copyin(b_values)
        kernel_seconds = device.runtime(program)([out, a, b], wait=True)
        result = np.empty(ROWS, np.float32)
        out.copyout(result)
        expected = a_values.reshape(ROWS, COLUMNS).sum(axis=1) * np.float32(2) + b_values
        if not np.array_equal(result, expected):
            wrong = int(np.argmax(result != expected))
            return SmokeResult(False, f"wrong result: out[{wrong}] = {result[wrong]}, expected {expected[wrong]}")
        kernel = f"{kernel_seconds * 1e6:.0f} us" if kernel_seconds is not None else "untimed"
        return SmokeResult(True, f"compile {1e3 * (compiled - start):.0f} ms, kernel {kernel}")
    except Exception as error:  # a survey reports broken pairs instead of stopping
        return SmokeResult(False, f"{type(error).__name__}: {error}")
