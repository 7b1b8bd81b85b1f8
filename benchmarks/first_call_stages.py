"""Where the first call of a new kernel spends its time, stage by stage (codegen_bench.py --first-call N).

The workload is tensor_bench's "first call of a new kernel" row: `((x * salt + 1.0).relu() - salt).realize()` on a
float32 vector of a length no earlier kernel had (64, 65, ...) and a constant no earlier run used, so neither the
process nor the disk cache holds its program. Each stage is timed with the main thread's CPU time (time.thread_time:
the whole first call runs on it, LLVM included, and other load on a shared machine barely moves it), by wrapping the
functions that run it for the measurement only; printed per stage is the median over the kernels, next to the
whole call's median CPU and wall time. The stages nest: "lowering passes" is the sum of the pass rows under it, and
"LLVM compile" of its IR pipeline and code generator rows.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np

from kiln.codegen import compiler as compiler_module
from kiln.codegen import lifecycle
from kiln.codegen.lowering import pipeline
from kiln.renderers import LLVMRenderer
from kiln.renderers.llvm_compiler import LLVMCompiler
from kiln.runtime import Device
from kiln.tensor import Tensor

Totals = defaultdict[str, float]


@contextmanager
def _timed(owner: Any, attribute: str, totals: Totals, stage: str | Callable[..., str]) -> Iterator[None]:
    """Adds the thread CPU seconds of `owner.attribute` calls to totals[stage] inside the block."""
    original = getattr(owner, attribute)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            totals[stage if isinstance(stage, str) else stage(*args, **kwargs)] += time.thread_time() - start

    setattr(owner, attribute, timed)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


def _instruments(totals: Totals) -> list[Any]:
    def stage_name(name: str, *args: Any, **kwargs: Any) -> str:
        return name if name in ("optimize", "linearize") else f"  pass: {name}"

    def code_generator(compiler: LLVMCompiler, source: str, module: Any) -> bytes:
        start = time.thread_time()
        try:
            return bytes(compiler.target_machine_for(source).emit_object(module))
        finally:
            totals["  LLVM code generator"] += time.thread_time() - start

    def compile_locked(compiler: LLVMCompiler, source: str) -> bytes:
        return code_generator(compiler, source, compiler._optimized_module(source))

    cache = compiler_module._compile_cache
    return [
        _timed(pipeline, "run_stage", totals, stage_name),
        _timed(lifecycle, "run_stage", totals, stage_name),
        _timed(lifecycle, "lower", totals, "lowering passes"),
        _timed(LLVMRenderer, "render", totals, "render"),
        _timed(LLVMCompiler, "compile", totals, "LLVM compile"),
        _timed(LLVMCompiler, "_optimized_module", totals, "  LLVM parse, verify, IR passes"),
        _patched(LLVMCompiler, "_compile_locked", compile_locked),
        _timed(cache, "get", totals, "disk cache lookup"),
        _timed(cache, "put", totals, "disk cache write"),
        _timed(LLVMCompiler, "load", totals, "load"),
    ]


@contextmanager
def _patched(owner: Any, attribute: str, value: Any) -> Iterator[None]:
    original = getattr(owner, attribute)
    setattr(owner, attribute, value)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


def _first_call(length: int, totals: Totals) -> tuple[float, float]:
    x = Tensor(np.arange(length, dtype=np.float32), device="CPU").realize()
    Device["CPU"].synchronize()
    salt = float(time.time_ns() % 1_000_003) / 7.0
    totals.clear()
    start, cpu = time.perf_counter(), time.thread_time()
    result = ((x * salt + 1.0).relu() - salt).realize()
    Device["CPU"].synchronize()
    wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
    expected = np.maximum(np.arange(length, dtype=np.float32) * np.float32(salt) + 1, 0) - np.float32(salt)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)
    return wall, cpu


def first_call_stages(kernels: int) -> None:
    """Prints the per-stage median thread CPU of `kernels` first calls (see the module docstring)."""
    totals: Totals = defaultdict(float)
    rows: list[dict[str, float]] = []
    walls, cpus = [], []
    with ExitStack() as stack:
        for instrument in _instruments(totals):
            stack.enter_context(instrument)
        _first_call(16, totals)  # the process's first kernel also builds the pattern matchers: not counted
        for length in range(64, 64 + kernels):
            wall, cpu = _first_call(length, totals)
            walls.append(wall)
            cpus.append(cpu)
            rows.append(dict(totals))
    top = [
        "optimize",
        "lowering passes",
        "linearize",
        "render",
        "disk cache lookup",
        "LLVM compile",
        "disk cache write",
    ]
    top.append("load")
    passes = [stage for stage in dict.fromkeys(s for row in rows for s in row) if stage.startswith("  pass")]
    llvm = ["  LLVM parse, verify, IR passes", "  LLVM code generator"]
    print(f"\nfirst call of a new kernel, {kernels} kernels: median main-thread CPU per stage")
    for stage in top[:2] + passes + top[2:6] + llvm + top[6:]:
        print(f"  {stage:<40} {statistics.median(row.get(stage, 0.0) for row in rows) * 1e3:7.3f} ms")
    rest = [cpu - sum(row.get(stage, 0.0) for stage in top) for cpu, row in zip(cpus, rows)]
    print(f"  {'rest (schedule, spec checks, engine)':<40} {statistics.median(rest) * 1e3:7.3f} ms")
    print(f"  {'whole call, CPU':<40} {statistics.median(cpus) * 1e3:7.3f} ms")
    print(f"  {'whole call, wall':<40} {statistics.median(walls) * 1e3:7.3f} ms")
