"""The harness shared by the on-device opt fuzzers (test_opt_fuzz_cpu.py, test_opt_fuzz_cl.py, test_opt_fuzz_webgpu.py).

Each fuzzer draws like codegen's opt fuzzer (packages/codegen/tests/test_opt_fuzz.py, imported by path): a corpus
kernel and up to four opts, illegal ones skipped while drawing, so every example is a non-empty legal sequence. Here
the kernel is then lowered for a real device's renderer, built by that device's compiler, run on the device, and
compared with the corpus case's numpy reference (exact where the case says so).
"""

from __future__ import annotations

import numpy as np
from corpus import KernelCase, assert_matches, from_storage, to_storage
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from test_opt_fuzz import draw_legal_opts

from kiln.codegen import Opt, Program, get_program
from kiln.codegen.numpy_semantics import storage_dtype
from kiln.runtime import Buffer, Device

EXAMPLES = 300
"""Examples per fuzzer run (the seed is pinned by each fuzzer, so a CI run is reproducible)."""


def run_on_device(device_name: str, case: KernelCase, opts: list[Opt], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The case's outputs (values) after lowering for `device_name` with `opts`, building and running there."""
    device = Device[device_name]
    program = Program(get_program(case.sink, device.renderer, opts))
    buffers = [Buffer(device_name, size, dtype) for dtype, size in case.buffers]
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


def fuzz_one(
    data: st.DataObject,
    device_name: str,
    cases: list[KernelCase],
    inputs_of: dict[int, list[np.ndarray]],
    executed: list[tuple[str, tuple[Opt, ...]]],
) -> None:
    """Draws a case and a legal opt sequence, runs it on the device and checks it against the case's reference."""
    case_index = data.draw(st.integers(0, len(cases) - 1), label="case")
    case = cases[case_index]
    opts = draw_legal_opts(data, case.sink, Device[device_name].renderer)
    if case_index not in inputs_of:
        inputs_of[case_index] = case.inputs(np.random.default_rng(case_index))
    inputs = inputs_of[case_index]
    got = run_on_device(device_name, case, opts, inputs)
    executed.append((case.name, tuple(opts)))
    assert_matches(case, got, case.reference(inputs, case.var_vals), exact=case.exact)


def fuzz(device_name: str, cases: list[KernelCase], seed_value: int) -> list[tuple[str, tuple[Opt, ...]]]:
    """Runs EXAMPLES hypothesis examples of `fuzz_one` with a pinned seed; returns the (case, opts) pairs that ran.

    The coverage check belongs in the same test as the loop (check_coverage): a separate test could run on another
    xdist worker, see an empty list and prove nothing.
    """
    inputs_of: dict[int, list[np.ndarray]] = {}
    executed: list[tuple[str, tuple[Opt, ...]]] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @seed(seed_value)
    @given(data=st.data())
    def one_example(data: st.DataObject) -> None:
        fuzz_one(data, device_name, cases, inputs_of, executed)

    one_example()
    return executed


def check_coverage(device_name: str, executed: list[tuple[str, tuple[Opt, ...]]]) -> None:
    """At least EXAMPLES legal sequences ran on the device, and more than half of them distinct."""
    assert len(executed) >= EXAMPLES, f"only {len(executed)} legal sequences ran on {device_name}, not {EXAMPLES}"
    distinct = len(set(executed))
    assert distinct > EXAMPLES // 2, f"only {distinct} distinct (kernel, opts) pairs"  # not one sequence repeated
