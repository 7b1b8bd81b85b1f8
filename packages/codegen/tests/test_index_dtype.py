"""dtypes.index lowering: int32 when range analysis proves every index fits, int64 otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, Renderer, get_program, run_program, verify_linear
from kiln.codegen.lowering.index_dtype import index_dtype_for, lower_index_dtype
from kiln.uops import Ops, PtrDType, SpecError, SpecialArg, UOp, dtypes


def copy_kernel(rows: int, columns: int, high: int = 1) -> UOp:
    n = UOp.variable("n", 1, high)
    out, a = buffer(0, rows * columns), buffer(1, rows * columns)
    i, j = UOp.range(rows, 0), UOp.range(columns, 1)
    offset = (i * columns + j) * n
    return kernel(out.index(offset).store(a.index(offset).load()).end(i, j))


def index_dtypes(program: Program) -> set[str]:
    return {u.dtype.name for u in program.uops if not isinstance(u.dtype, PtrDType) and dtypes.is_int(u.dtype)}


def test_small_kernels_use_int32() -> None:
    assert index_dtype_for(copy_kernel(1024, 1024)) == dtypes.int32
    assert index_dtypes(Program(get_program(copy_kernel(64, 64), ScalarRenderer(), ()))) == {"int32"}


def test_offsets_past_int32_use_int64() -> None:
    # 65536 * 65536 elements: the largest offset is 2**32 - 1
    assert index_dtype_for(copy_kernel(65536, 65536)) == dtypes.int64
    program = Program(get_program(copy_kernel(65536, 65536), ScalarRenderer(), ()))
    assert index_dtypes(program) == {"int64"}


def test_variables_count_by_their_bounds() -> None:
    # 1024 * 1024 offsets times n <= 4096 reach 2**32
    assert index_dtype_for(copy_kernel(1024, 1024, high=2048)) == dtypes.int32
    assert index_dtype_for(copy_kernel(1024, 1024, high=4096)) == dtypes.int64


def test_no_index_dtype_is_left() -> None:
    lowered = lower_index_dtype(copy_kernel(8, 8, high=3))
    assert all(
        node.dtype.scalar() != dtypes.index for node in lowered.toposort() if not isinstance(node.dtype, PtrDType)
    )
    assert {node.op for node in lowered.toposort() if node.dtype == dtypes.int32} >= {Ops.RANGE, Ops.DEFINE_VAR}


def gather_rows(rows: int, width: int, table_rows: int) -> UOp:
    """out[i, j] = table[row[i], j] (a gather, as an embedding lookup is): the loaded row may be any int32, so its
    offset row * width needs int64; buffers (out, row: int32, table)."""
    out, row_of, table = buffer(0, rows * width), buffer(1, rows, dtypes.int32), buffer(2, table_rows * width)
    i, j = UOp.range(rows, 0), UOp.range(width, 1)
    row = row_of.index(i).load().cast(dtypes.index)
    return kernel(out.index(i * width + j).store(table.index(row * width + j).load()).end(i, j))


HARDWARE_INDEX_CASES = [
    pytest.param(CPULikeRenderer(), (Opt(OptOps.THREAD, 0, 4),), {"core_id"}, id="cpu-core_id"),
    pytest.param(GPULikeRenderer(), (Opt(OptOps.LOCAL, 1, 8),), {"gidx0", "gidx1", "lidx0"}, id="gpu-gidx-lidx"),
]


@pytest.mark.parametrize(("renderer", "opts", "names"), HARDWARE_INDEX_CASES)
def test_hardware_indices_stay_int32_when_index_math_is_int64(
    renderer: Renderer, opts: tuple[Opt, ...], names: set[str]
) -> None:
    # a SPECIAL reads a 32-bit register or the CPU kernels' `int core_id` parameter whatever the kernel's index dtype:
    # it stays int32 (its size too) and is widened by a CAST where the index math is int64 (issue 36: an LLVM kernel
    # declared `i32 %core_id` and used it as an i64)
    rows, width, table_rows = 16, 64, 10
    program = Program(get_program(gather_rows(rows, width, table_rows), renderer, opts))
    specials = [u for u in program.uops if u.op is Ops.SPECIAL]
    assert {u.arg.name for u in specials} == names
    assert all(u.dtype == dtypes.int32 and u.src[0].dtype == dtypes.int32 for u in specials)
    assert "int64" in index_dtypes(program)
    users = [u for u in program.uops if any(s.op is Ops.SPECIAL for s in u.src)]
    assert users and all(u.op is Ops.CAST and u.dtype == dtypes.int64 for u in users)
    verify_linear(list(program.uops))
    rng = np.random.default_rng(36)
    row_of = rng.integers(0, table_rows, rows).astype(np.int32)
    table = rng.standard_normal(table_rows * width).astype(np.float32)
    out = np.zeros(rows * width, np.float32)
    global_size, local_size = program.launch_dims()
    run_program(program, [out, row_of, table], {}, global_size, local_size)
    np.testing.assert_array_equal(out.reshape(rows, width), table.reshape(table_rows, width)[row_of])


def test_an_int64_hardware_index_breaks_the_linear_spec() -> None:
    size = UOp.const(dtypes.int64, 4)
    out = buffer(0, 4, dtypes.int64)
    core = UOp(Ops.SPECIAL, dtypes.int64, (size,), SpecialArg("core_id"))
    with pytest.raises(SpecError, match="SPECIAL"):
        verify_linear([out, size, core, out.index(core), out.index(core).store(core)])
    size32 = UOp.const(dtypes.int32, 4)
    core32 = UOp(Ops.SPECIAL, dtypes.int32, (size32,), SpecialArg("core_id"))
    wide = core32.cast(dtypes.int64)
    verify_linear([out, size32, core32, wide, out.index(wide), out.index(wide).store(wide)])


def test_a_symbolic_launch_size_survives_the_narrowed_hardware_index() -> None:
    # n up to 2**30 times 3 needs int64; gidx0's size n is cast to int32 in the program, but the launch size read
    # back from it is the variable itself (an exact index expression)
    n = UOp.variable("n", 1, 2**30)
    out, a = buffer(0, 64), buffer(1, 64)
    i = UOp.range(n, 0)
    program = Program(
        get_program(kernel(out.index(i * 3 % 64).store(a.index(i % 64).load()).end(i)), GPULikeRenderer())
    )
    (special,) = [u for u in program.uops if u.op is Ops.SPECIAL]
    assert special.dtype == dtypes.int32 and special.src[0].op is Ops.CAST
    assert "int64" in index_dtypes(program)
    assert program.global_size == (UOp.variable("n", 1, 2**30), 1, 1)
    assert program.launch_dims({"n": 21}) == ((21, 1, 1), (1, 1, 1))
    out_values, a_values = np.zeros(64, np.float32), np.arange(64, dtype=np.float32)
    run_program(program, [out_values, a_values], {"n": 21}, (21, 1, 1), (1, 1, 1))
    expected = np.zeros(64, np.float32)
    expected[np.arange(21) * 3 % 64] = np.arange(21) % 64
    np.testing.assert_array_equal(out_values, expected)
