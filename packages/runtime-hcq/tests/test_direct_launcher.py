"""`HCQProgramRunner.direct_launcher`: the direct launch made once for a launch whose two buffers change each time
(the eager lane's output and operand): numpy's values for every slot layout (the two buffers in either order, a
fixed buffer), and a refusal that runs nothing where a direct launch must not run (PROFILE, a misaligned buffer, a
multi-core kernel)."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import CASES_BY_NAME, to_storage

from kiln.codegen import Opt, OptOps, Program, get_program
from kiln.renderers import LLVMRenderer
from kiln.runtime import Buffer, Device
from kiln.runtime.hcq_runner import HCQProgramRunner
from kiln.uops import Context, dtypes

TWO = CASES_BY_NAME["sum_axis1"]  # an output and one input
THREE = CASES_BY_NAME["elementwise_float32"]  # an output and two inputs


def _runner(case: object, opts: list[Opt] | None = None) -> HCQProgramRunner:
    renderer = LLVMRenderer()
    renderer.thread_max = 4
    runner = Device["CPU"].runtime(Program(get_program(case.sink, renderer, opts or [])))  # type: ignore[attr-defined]
    assert isinstance(runner, HCQProgramRunner)
    return runner


def _filled(dtype: object, size: int, values: np.ndarray) -> Buffer:
    buffer = Buffer("CPU", size, dtype).allocate()  # type: ignore[arg-type]
    buffer.copyin(np.ascontiguousarray(to_storage(values, dtype)))
    return buffer


def _output(buffer: Buffer) -> np.ndarray:
    raw = np.empty(buffer.nbytes, np.uint8)
    buffer.copyout(raw)
    return raw.view(np.float32)


@pytest.mark.parametrize("swapped", [False, True])
def test_two_slots_in_either_order(swapped: bool) -> None:
    runner = _runner(TWO)
    launch = runner.direct_launcher([1, 0] if swapped else [0, 1])
    assert launch is not None
    for seed in range(3):
        (values,) = TWO.inputs(np.random.default_rng(seed))
        out_dtype, out_size = TWO.buffers[0]
        output = Buffer("CPU", out_size, out_dtype).allocate()
        source = _filled(TWO.buffers[1][0], TWO.buffers[1][1], values)
        assert launch(source, output) if swapped else launch(output, source)
        np.testing.assert_allclose(_output(output), TWO.reference([values], {})[0], rtol=1e-5)


def test_a_fixed_buffer_slot() -> None:
    runner = _runner(THREE)
    first, second = THREE.inputs(np.random.default_rng(4))
    fixed = _filled(THREE.buffers[2][0], THREE.buffers[2][1], second)
    launch = runner.direct_launcher([0, 1, fixed])
    assert launch is not None
    for seed in range(2):
        first = THREE.inputs(np.random.default_rng(seed))[0]
        output = Buffer("CPU", THREE.buffers[0][1], THREE.buffers[0][0]).allocate()
        assert launch(output, _filled(THREE.buffers[1][0], THREE.buffers[1][1], first))
        np.testing.assert_allclose(_output(output), THREE.reference([first, second], {})[0], rtol=1e-6)


def test_profiling_and_misalignment_refuse_and_nothing_runs() -> None:
    runner = _runner(TWO, [Opt(OptOps.UPCAST, 0, 2)])  # vector stores: the output's address must be aligned
    launch = runner.direct_launcher([0, 1])
    assert launch is not None
    (values,) = TWO.inputs(np.random.default_rng(5))
    output = _filled(dtypes.float32, TWO.buffers[0][1], np.zeros(TWO.buffers[0][1], np.float32))
    source = _filled(TWO.buffers[1][0], TWO.buffers[1][1], values)
    with Context(PROFILE=1):
        assert not launch(output, source)
    np.testing.assert_array_equal(_output(output), np.zeros(TWO.buffers[0][1], np.float32))
    assert runner.alignment_mask >= 4
    # an output view one element in: its address is off the alignment the kernel stores with
    size = TWO.buffers[0][1]
    base = _filled(dtypes.float32, size + 1, np.zeros(size + 1, np.float32))
    shifted = Buffer("CPU", size, dtypes.float32, base=base, offset=4).allocate()
    assert not launch(shifted, source)
    np.testing.assert_array_equal(_output(shifted), np.zeros(size, np.float32))
    assert launch(output, source)
    np.testing.assert_allclose(_output(output), TWO.reference([values], {})[0], rtol=1e-5)


def test_a_multi_core_kernel_has_no_direct_launcher() -> None:
    assert _runner(THREE, [Opt(OptOps.THREAD, 0, 2)]).direct_launcher([0, 1, 1]) is None
