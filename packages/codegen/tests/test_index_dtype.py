"""dtypes.index lowering: int32 when range analysis proves every index fits, int64 otherwise."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from renderers_for_tests import ScalarRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import Program, get_program
from kiln.codegen.lowering.index_dtype import index_dtype_for, lower_index_dtype
from kiln.uops import Ops, PtrDType, UOp, dtypes


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
