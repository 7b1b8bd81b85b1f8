"""Memory access legalization: wide loads/stores only where contiguity and alignment are proven."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, Renderer, get_program, run_program
from kiln.codegen.lowering import memory_access
from kiln.codegen.lowering.memory_access import known_factor
from kiln.uops import AxisKind, MemoryScope, Ops, PtrDType, UOp, dtypes

CPU, GPU, SCALAR = CPULikeRenderer(), GPULikeRenderer(), ScalarRenderer()
N = 16  # outputs; source buffer of 64 elements

Offset = Callable[[UOp, UOp], UOp]


def gather_kernel(offset: Offset) -> UOp:
    """out[i] = a[offset(i, n)] for i < 16 (n: a variable 1..4 that the offset may use)."""
    out, a = buffer(0, N), buffer(1, 4 * N)
    i = UOp.range(N, 0)
    n = UOp.variable("n", 1, 4)
    return kernel(out.index(i).store(a.index(offset(i, n)).load()).end(i))


def access_widths(program: Program, op: Ops) -> list[int]:
    widths = []
    for uop in program.uops:
        if uop.op is op:
            pointer = uop.src[0].dtype
            assert isinstance(pointer, PtrDType)
            if pointer.scope is MemoryScope.GLOBAL and uop.src[0].src[0].arg == (1 if op is Ops.LOAD else 0):
                widths.append(pointer.base.count)
    return sorted(widths)


CASES: list[tuple[str, Offset, Callable[[np.ndarray], np.ndarray]]] = [
    ("contiguous", lambda i, n: i, lambda i: i),
    ("shifted by one", lambda i, n: i + 1, lambda i: i + 1),
    ("shifted by two", lambda i, n: i + 2, lambda i: i + 2),
    ("stride two", lambda i, n: i * 2, lambda i: i * 2),
    ("reversed", lambda i, n: (N - 1) - i, lambda i: N - 1 - i),
    ("symbolic stride", lambda i, n: i * n, lambda i: i * 3),
    ("broadcast", lambda i, n: (i // 4) * 4, lambda i: (i // 4) * 4),
]
# expected global load widths for one upcast-by-4 output block, per renderer (CPU widths 4/8, GPU 2/4)
EXPECTED_LOADS = {
    "contiguous": {"TESTCPU": [4], "TESTGPU": [4], "TESTSCALAR": [1, 1, 1, 1]},
    # lanes at 4k+1..4k+4: 4k+1 and 4k+4 alone; 4k+2, 4k+3 form an aligned pair on the GPU
    "shifted by one": {"TESTCPU": [1, 1, 1, 1], "TESTGPU": [1, 1, 2], "TESTSCALAR": [1, 1, 1, 1]},
    "shifted by two": {"TESTCPU": [1, 1, 1, 1], "TESTGPU": [2, 2], "TESTSCALAR": [1, 1, 1, 1]},
    "stride two": {"TESTCPU": [1, 1, 1, 1], "TESTGPU": [1, 1, 1, 1], "TESTSCALAR": [1, 1, 1, 1]},
    "reversed": {"TESTCPU": [1, 1, 1, 1], "TESTGPU": [1, 1, 1, 1], "TESTSCALAR": [1, 1, 1, 1]},
    # i*n + lane*n: not provably contiguous (n may be 2)
    "symbolic stride": {"TESTCPU": [1, 1, 1, 1], "TESTGPU": [1, 1, 1, 1], "TESTSCALAR": [1, 1, 1, 1]},
    # all four lanes read one address: a single scalar load
    "broadcast": {"TESTCPU": [1], "TESTGPU": [1], "TESTSCALAR": [1]},
}


@pytest.mark.parametrize("renderer", [CPU, GPU, SCALAR], ids=lambda r: r.device)
@pytest.mark.parametrize(("name", "offset", "reference"), CASES, ids=[c[0] for c in CASES])
def test_load_widths_follow_proven_alignment(
    renderer: Renderer, name: str, offset: Offset, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    program = Program(get_program(gather_kernel(offset), renderer, (Opt(OptOps.UPCAST, 0, 4),)))
    assert access_widths(program, Ops.LOAD) == EXPECTED_LOADS[name][renderer.device]
    # the store of 4 contiguous outputs at 4k is aligned: one wide store where the renderer has width 4
    assert access_widths(program, Ops.STORE) == ([4] if renderer.vector_widths != (1,) else [1, 1, 1, 1])
    a, out = np.arange(4 * N, dtype=np.float32), np.zeros(N, np.float32)
    global_size, local_size = program.launch_dims({"n": 3})
    run_program(program, [out, a], {"n": 3}, global_size, local_size)
    np.testing.assert_array_equal(out, a[reference(np.arange(N))])


def test_widest_width_that_fits_is_chosen() -> None:
    program = Program(get_program(gather_kernel(lambda i, n: i), CPU, (Opt(OptOps.UPCAST, 0, 16),)))
    assert access_widths(program, Ops.LOAD) == [8, 8]
    program = Program(get_program(gather_kernel(lambda i, n: i + 4), CPU, (Opt(OptOps.UPCAST, 0, 16),)))
    # 4..19: 4..7 (aligned to 4, not 8), 8..15 (8), 16..19 (4)
    assert access_widths(program, Ops.LOAD) == [4, 4, 8]


def test_registers_are_accessed_lane_by_lane() -> None:
    out, a = buffer(0, 8), buffer(1, 64)
    i, k = UOp.range(8, 0), UOp.range(8, 2, AxisKind.REDUCE)
    sink = kernel(out.index(i).store(a.index(i * 8 + k).load().reduce(k)).end(i))
    program = Program(get_program(sink, CPU, (Opt(OptOps.UPCAST, 0, 4),)))
    register_accesses = [
        u for u in program.uops if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].dtype.scope is MemoryScope.REG
    ]
    assert register_accesses and all(u.src[0].dtype.base.count == 1 for u in register_accesses)


def test_masked_lanes_stay_scalar() -> None:
    out, a = buffer(0, 10), buffer(1, 10)
    i = UOp.range(10, 0)
    sink = kernel(out.index(i).store(a.index(i).load() + 1.0).end(i))
    program = Program(get_program(sink, CPU, (Opt(OptOps.PADTO, 0, 16), Opt(OptOps.UPCAST, 0, 4))))
    # each lane has its own gate (i < 10), so no lanes may be merged into one wide access
    assert access_widths(program, Ops.LOAD) == [1, 1, 1, 1]
    result = np.zeros(10, np.float32)
    run_program(program, [result, np.arange(10, dtype=np.float32)])
    np.testing.assert_array_equal(result, np.arange(10) + 1)


def test_known_factor() -> None:
    i = UOp.range(8, 0)
    n = UOp.variable("n", 1, 9)
    assert known_factor(UOp.const(dtypes.index, 12)) == 12
    assert known_factor(i * 4) == 4
    assert known_factor(i * 4 + n * 6) == 2
    assert known_factor((i * 4) * (n * 2)) == 8
    assert known_factor(i + 4) == 1
    assert known_factor(n) == 1


class _VectorALURenderer(CPULikeRenderer):
    device = "TESTVECTORALU"
    vector_alu = True  # accesses may start anywhere; vector values stay whole (as on LLVM)


# lanes of one aligned access, out of order
SWAPPED: list[tuple[str, Offset, Callable[[np.ndarray], np.ndarray]]] = [
    ("pairs swapped", lambda i, n: i + 1 - (i % 2) * 2, lambda i: i + 1 - (i % 2) * 2),
    ("quads reversed", lambda i, n: i + 3 - (i % 4) * 2, lambda i: i + 3 - (i % 4) * 2),
]


@pytest.mark.parametrize("renderer", [CPU, GPU, SCALAR, _VectorALURenderer()], ids=lambda r: r.device)
@pytest.mark.parametrize("upcast", [2, 4, 8, 16])
@pytest.mark.parametrize(("name", "offset", "reference"), CASES + SWAPPED, ids=[c[0] for c in CASES + SWAPPED])
def test_a_whole_vector_access_is_the_folded_vectorize_of_its_lanes(
    renderer: Renderer,
    upcast: int,
    name: str,
    offset: Offset,
    reference: Callable[[np.ndarray], np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a load or store whose lanes are one access in order skips building VECTORIZE(GEP(access, i)...), which the
    # lane folding turns back into the access: the program must be the one the lanes give
    def lowered() -> list[UOp]:
        return Program(get_program(gather_kernel(offset), renderer, (Opt(OptOps.UPCAST, 0, upcast),))).uops

    with_shortcut = lowered()
    monkeypatch.setattr(memory_access, "_one_access_in_order", lambda runs, placement: False)
    assert lowered() == with_shortcut
    program = Program(get_program(gather_kernel(offset), renderer, (Opt(OptOps.UPCAST, 0, upcast),)))
    a, out = np.arange(4 * N, dtype=np.float32), np.zeros(N, np.float32)
    global_size, local_size = program.launch_dims({"n": 3})
    run_program(program, [out, a], {"n": 3}, global_size, local_size)
    np.testing.assert_array_equal(out, a[reference(np.arange(N))])
