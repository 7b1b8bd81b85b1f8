"""Vector-ALU lowering (vector_folding.py and the pipeline's vector-ALU mode): a renderer with `vector_alu` keeps
vector ALU ops, wide register accumulators and fused multiply-adds; the others get scalars exactly as before. Every
program also runs in the interpreter against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import CORPUS, KernelCase, assert_matches, run_case
from renderers_for_tests import CPULikeRenderer
from sinks_for_tests import matmul

from kiln.codegen import Opt, OptOps, Program, get_program, run_program
from kiln.uops import GroupOp, MemoryScope, Ops, PtrDType, UOp


class VectorCPURenderer(CPULikeRenderer):
    """CPULikeRenderer with vector ALU ops and native, fusable multiply-adds (like the LLVM IR renderer)."""

    device = "TESTVECTORCPU"
    vector_alu = True
    fuse_multiply_add = True
    vector_widths = (4, 8, 16)
    native_ops = GroupOp.ALU


VECTOR, SCALAR = VectorCPURenderer(), CPULikeRenderer()
TILE = [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 8)]


def _program(sink: UOp, renderer: CPULikeRenderer, opts: list[Opt]) -> Program:
    return Program(get_program(sink, renderer, opts))


def _alu_lane_counts(program: Program) -> set[int]:
    return {u.dtype.count for u in program.uops if u.op in GroupOp.ALU}


def _register_accesses(program: Program) -> list[UOp]:
    def on_register(index: UOp) -> bool:
        pointer = index.src[0]
        while pointer.op is Ops.AFTER:
            pointer = pointer.src[0]
        return isinstance(pointer.dtype, PtrDType) and pointer.dtype.scope is MemoryScope.REG

    return [u for u in program.uops if u.op in (Ops.LOAD, Ops.STORE) and on_register(u.src[0])]


def _run_matmul(program: Program, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(a.shape[0] * b.shape[1], np.float32)
    buffers = [out, a.reshape(-1).copy(), b.reshape(-1).copy()]
    run_program(program, buffers, {}, *program.launch_dims({}))
    return out.reshape(a.shape[0], b.shape[1])


def test_vector_alu_renderer_keeps_a_4x8_tile_as_one_32_lane_fused_multiply_add() -> None:
    program = _program(matmul(8, 16, 16), VECTOR, TILE)
    multiply_adds = [u for u in program.uops if u.op is Ops.MULACC]
    assert [u.dtype.count for u in multiply_adds] == [32]
    # the accumulator is read and written as one 32-lane vector (SROA turns it into registers)
    assert {
        access.dtype.count if access.op is Ops.LOAD else access.src[1].dtype.count
        for access in _register_accesses(program)
    } == {32}


def test_scalar_renderer_gets_scalar_alu_and_lane_by_lane_accumulators() -> None:
    program = _program(matmul(8, 16, 16), SCALAR, TILE)
    assert _alu_lane_counts(program) == {1}
    assert not any(u.op is Ops.MULACC for u in program.uops)  # a*b+c rounds twice there, as the kernel says
    assert all(access.dtype.count == 1 for access in _register_accesses(program) if access.op is Ops.LOAD)


@pytest.mark.parametrize("renderer", [VECTOR, SCALAR], ids=lambda r: r.device)
def test_tiled_matmul_matches_numpy(renderer: CPULikeRenderer) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-8, 8, (8, 16)).astype(np.float32)
    b = rng.integers(-8, 8, (16, 16)).astype(np.float32)
    got = _run_matmul(_program(matmul(8, 16, 16), renderer, TILE), a, b)
    np.testing.assert_array_equal(got, a @ b)  # small integers: every rounding is exact


def test_fused_accumulation_rounds_once() -> None:
    # k=0 leaves -(1 + 2**-22) in the accumulator; k=1 adds (1 + 2**-23)**2 = 1 + 2**-22 + 2**-46: fused, the sum is
    # exactly 2**-46; a separate multiply rounds the product to 1 + 2**-22 first and the sum is 0
    a = np.zeros((8, 16), np.float32)
    b = np.zeros((16, 16), np.float32)
    a[:, 0], b[0, :] = np.float32(-1), np.float32(1 + 2**-22)
    a[:, 1], b[1, :] = np.float32(1 + 2**-23), np.float32(1 + 2**-23)
    fused = _run_matmul(_program(matmul(8, 16, 16), VECTOR, TILE), a, b)
    separate = _run_matmul(_program(matmul(8, 16, 16), SCALAR, TILE), a, b)
    assert np.all(fused == np.float32(2**-46))
    assert np.all(separate == 0)


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_corpus_lowered_with_vector_alu_matches_numpy(case: KernelCase) -> None:
    inputs = case.inputs(np.random.default_rng(2))
    expected = case.reference(inputs, case.var_vals)
    for opts in ([], None):  # no optimization, then the heuristic's choice (vector tiles and unrolls)
        assert_matches(case, run_case(case, VECTOR, opts, inputs), expected, exact=case.exact)
