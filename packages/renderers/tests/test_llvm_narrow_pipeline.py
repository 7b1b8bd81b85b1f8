"""Which kernels keep LLVM's -O2 under the 'kernel' pipeline (NARROW_TYPES_MARK, llvm_ir.uses_narrow_types): those
that compute in float16 or move i8 / i16 through memory, not those with i8 values in registers only (a maximum of
bools cast to uint8, as resnet18.onnx's max pooling computes: 400 ms of -O2 for no faster code). Values against
numpy; the mark is read from the source's header only."""

from __future__ import annotations

import cpu_kernels as kernels
import numpy as np
import pytest

from kiln.codegen import Program, get_program
from kiln.codegen.kernel_info import Opt, OptOps
from kiln.renderers import LLVMRenderer
from kiln.renderers.llvm_compiler import NARROW_TYPES_MARK
from kiln.uops import AxisKind, Context, DType, Ops, UOp, dtypes

pytest.importorskip("llvmlite")

SIZE = 64


def _buffer(slot: int, dtype: DType) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(SIZE), arg=slot)


def _kernel(store: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, (store,))


def _program(sink: UOp) -> Program:
    with Context(DISABLE_COMPILER_CACHE=True):
        return Program(get_program(sink, LLVMRenderer(), [Opt(OptOps.UPCAST, 0, 16)]))


def _nan_flags_max() -> UOp:
    # out[i] = float(max(uint8(isnan(a[i])), uint8(isnan(b[i])))): i8 only between the loads and the store
    out, a, b = _buffer(0, dtypes.float32), _buffer(1, dtypes.float32), _buffer(2, dtypes.float32)
    i = UOp.range(SIZE, 0, AxisKind.LOOP)
    flags = [x.index(i).load() for x in (a, b)]
    bytes_ = [flag.ne(flag).cast(dtypes.uint8) for flag in flags]
    return _kernel(out.index(i).store(bytes_[0].maximum(bytes_[1]).cast(dtypes.float32)).end(i))


def _doubled(dtype: DType) -> UOp:
    # out[i] = a[i] + a[i] over `dtype` in memory
    out, a = _buffer(0, dtype), _buffer(1, dtype)
    i = UOp.range(SIZE, 0, AxisKind.LOOP)
    return _kernel(out.index(i).store(a.index(i).load() + a.index(i).load()).end(i))


def _positive() -> UOp:
    # out[i] = a[i] > 0, a bool stored as a byte
    out, a = _buffer(0, dtypes.bool), _buffer(1, dtypes.float32)
    i = UOp.range(SIZE, 0, AxisKind.LOOP)
    return _kernel(out.index(i).store(UOp.const(dtypes.float32, 0.0).lt(a.index(i).load())).end(i))


def _run(program: Program, buffers: list[np.ndarray]) -> None:
    renderer = LLVMRenderer()
    kernels.run_native(program, renderer.compiler, buffers, {})


def test_i8_in_registers_only_keeps_the_kernel_pipeline_and_computes_like_numpy() -> None:
    program = _program(_nan_flags_max())
    assert "<16 x i8>" in program.source and NARROW_TYPES_MARK not in program.source
    assert LLVMRenderer().compiler.pipeline_for(program.source) == "kernel"
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(SIZE).astype(np.float32), rng.standard_normal(SIZE).astype(np.float32)
    a[::5], b[::3] = np.nan, np.nan
    out = np.zeros(SIZE, np.float32)
    _run(program, [out, a, b])
    np.testing.assert_array_equal(out, (np.isnan(a) | np.isnan(b)).astype(np.float32))


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.float16])
def test_narrow_values_in_memory_take_o2(dtype: DType) -> None:
    program = _program(_doubled(dtype))
    assert program.source.splitlines()[1:3].count(NARROW_TYPES_MARK) == 1
    assert LLVMRenderer().compiler.pipeline_for(program.source) == "O2"
    values = np.arange(-SIZE // 2, SIZE // 2).astype(dtype.fmt or "f")
    out = np.zeros(SIZE, values.dtype)
    _run(program, [out, values])
    np.testing.assert_array_equal(out, values + values)


def test_a_stored_bool_takes_o2() -> None:
    program = _program(_positive())
    assert NARROW_TYPES_MARK in program.source
    values = np.random.default_rng(1).standard_normal(SIZE).astype(np.float32)
    out = np.zeros(SIZE, np.bool_)
    _run(program, [out, values])
    np.testing.assert_array_equal(out, values > 0)


def test_float32_kernels_are_not_marked() -> None:
    assert NARROW_TYPES_MARK not in _program(_doubled(dtypes.float32)).source


def test_the_mark_counts_in_the_header_only() -> None:
    compiler = LLVMRenderer().compiler
    body = "define void @kiln_kernel() {\nentry:\n  ret void\n}\n"
    assert compiler.pipeline_for(f"; kiln LLVMRenderer kernel k\n{NARROW_TYPES_MARK}\n{body}") == "O2"
    assert compiler.pipeline_for(f"; kiln LLVMRenderer kernel k\n{body}{NARROW_TYPES_MARK}\n") == "kernel"
    assert compiler.pipeline_for(body) == "kernel"
    with Context(LLVM_PIPELINE="O2"):
        assert compiler.pipeline_for(body) == "O2"
