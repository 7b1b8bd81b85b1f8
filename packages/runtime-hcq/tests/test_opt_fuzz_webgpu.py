"""Random legal opt sequences executed on the WEBGPU device (wgpu; Mesa's lavapipe here and in CI), not only
interpreted.

The same drawing as codegen's opt fuzzer (packages/codegen/tests/test_opt_fuzz.py, imported by path): a corpus
kernel and up to four opts, illegal ones skipped while drawing, so every example is a non-empty legal sequence;
here the kernel is lowered for the WEBGPU device's WGSL renderer, validated and built into a pipeline by wgpu, run
on the device, and compared with the corpus case's numpy reference (exact where the case says so). Only the corpus
kernels of the dtypes WEBGPU stores are drawn (32-bit scalars and bool). 300 examples per run, the seed pinned so
a CI run is reproducible; a run takes about half a minute.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parents[2] / "codegen" / "tests"))  # codegen's corpus and fuzzer, by path

from corpus import CORPUS, KernelCase, assert_matches, from_storage, to_storage
from test_opt_fuzz import draw_opt

from kiln.codegen import KernelOptError, Opt, Program, apply_opt, get_program
from kiln.codegen.numpy_semantics import storage_dtype
from kiln.codegen.opt.apply import prepare_axes
from kiln.renderers import dtypes_for, webgpu_available
from kiln.runtime import Buffer, Device

EXAMPLES = 300
STORED = dtypes_for("WEBGPU")
CASES = [
    case for case in CORPUS if case.name != "conv2d" and all(dtype.scalar() in STORED for dtype, _ in case.buffers)
]  # conv2d: its many opt variants each take long to build
executed: list[tuple[str, tuple[Opt, ...]]] = []

pytestmark = pytest.mark.skipif(
    not webgpu_available(), reason="no WebGPU adapter: pip install wgpu, apt install mesa-vulkan-drivers"
)


@functools.cache
def inputs_of(case_index: int) -> list[np.ndarray]:
    return CASES[case_index].inputs(np.random.default_rng(case_index))


def run_on_webgpu(case: KernelCase, opts: list[Opt], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The case's outputs (values) after lowering for WEBGPU with `opts`, validating and running on the device."""
    device = Device["WEBGPU"]
    program = Program(get_program(case.sink, device.renderer, opts))
    buffers = [Buffer("WEBGPU", size, dtype) for dtype, size in case.buffers]
    for buffer, (dtype, size) in zip(buffers[: case.outputs], case.buffers):
        buffer.copyin(np.zeros(size, storage_dtype(dtype)))
    for buffer, values, (dtype, _) in zip(buffers[case.outputs :], inputs, case.buffers[case.outputs :]):
        buffer.copyin(np.ascontiguousarray(to_storage(values, dtype)))
    device.runtime(program)(buffers, case.var_vals, wait=True)
    results = []
    for buffer, (dtype, size) in zip(buffers[: case.outputs], case.buffers):
        raw = np.empty(size, storage_dtype(dtype))
        buffer.copyout(raw)
        results.append(from_storage(raw, dtype))
    return results


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@seed(20)
@given(data=st.data())
def test_random_legal_opt_sequences_run_on_webgpu(data: st.DataObject) -> None:
    case_index = data.draw(st.integers(0, len(CASES) - 1), label="case")
    case = CASES[case_index]
    renderer = Device["WEBGPU"].renderer
    sink = prepare_axes(case.sink, renderer)
    opts: list[Opt] = []
    for _ in range(data.draw(st.integers(1, 4), label="length")):
        opt = draw_opt(data, sink)
        try:
            sink = apply_opt(sink, opt, renderer)
        except KernelOptError:
            continue
        opts.append(opt)
        event(f"WEBGPU {opt.op.name}")
    assume(opts)
    inputs = inputs_of(case_index)
    got = run_on_webgpu(case, opts, inputs)
    executed.append((case.name, tuple(opts)))
    assert_matches(case, got, case.reference(inputs, case.var_vals), exact=case.exact)


def test_the_fuzzer_ran_at_least_300_legal_sequences_on_webgpu() -> None:
    if not executed:
        pytest.skip("run together with test_random_legal_opt_sequences_run_on_webgpu (same process)")
    assert len(executed) >= EXAMPLES, f"only {len(executed)} legal sequences ran on WEBGPU"
    distinct = len(set(executed))
    assert distinct > EXAMPLES // 2, f"only {distinct} distinct (kernel, opts) pairs"  # not one sequence repeated
