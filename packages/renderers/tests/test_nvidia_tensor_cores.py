"""NVIDIA tensor cores without a GPU: the bfloat16 unit (mma.sync m16n8k16 .f32.bf16.bf16.f32) beside the float16 ones.

The TC opt's programs are checked three ways against numpy (inputs exactly representable, sums in float64): run by
codegen's interpreter (the WMMA through kiln's fragment layouts), rendered as PTX and run by the PTX model (the mma
through the PTX ISA's fragment formulas, `ptx_mma.py`, written without kiln's layouts), and rendered as CUDA C and
compiled by NVRTC (cubin: NVRTC's own ptxas) with the PTX renderer's text assembled by the toolkit's ptxas.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from ptx_mma import f32_to_bf16_bits, mma_m16n8k16, pack_pair
from ptx_model import PTXModel

from kiln.codegen import KernelInfo, KernelOptError, Opt, OptOps, Program, get_program, run_program
from kiln.renderers.cuda import CUDARenderer
from kiln.renderers.nvrtc import nvrtc_available
from kiln.renderers.ptx import PTXCompiler, PTXRenderer
from kiln.renderers.tensor_cores import TENSOR_CORES_SM80
from kiln.uops import AxisKind, Context, DType, Ops, UOp, dtypes

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC missing: pip install 'kiln-renderers[cuda]'")
needs_ptxas = pytest.mark.usefixtures("requires_ptxas")
BF16 = 2
"""The bfloat16 unit's index in TENSOR_CORES_SM80 (after the float16 ones, whose indices stay 0 and 1)."""
ANY = -1


class TextCUDARenderer(CUDARenderer):
    """The CUDA renderer without NVRTC: get_program stops at the source."""

    compiler = None  # type: ignore[assignment]


class TextPTXRenderer(PTXRenderer):
    """The PTX renderer without ptxas: get_program stops at the PTX text."""

    compiler = None  # type: ignore[assignment]


def matmul(m: int, n: int, k: int, dtype_in: DType, dtype_out: DType = dtypes.float32) -> UOp:
    """out[i, j] = sum_r a[i, r] * b[r, j]: a (m x k) and b (k x n) of `dtype_in`, each cast to `dtype_out` when they
    differ and summed in it; out in slot 0 (axes i=0, j=1, r=2)."""

    def buffer(slot: int, dtype: DType, size: int) -> UOp:
        return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), slot)

    out, a, b = buffer(0, dtype_out, m * n), buffer(1, dtype_in, m * k), buffer(2, dtype_in, k * n)
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisKind.REDUCE)
    left, right = a.index(i * k + r).load(), b.index(r * n + j).load()
    if dtype_in != dtype_out:
        left, right = left.cast(dtype_out), right.cast(dtype_out)
    store = out.index(i * n + j).store((left * right).reduce(r)).end(i, j)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo(f"matmul_{m}x{n}x{k}_{dtype_in.name}_{dtype_out.name}"))


def bf16_operands(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(bfloat16 bit patterns as uint16, their values as float64): normal values cut to bfloat16 (exact)."""
    bits = (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    values = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bits, values


def f16_operands(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    values = rng.standard_normal(shape).astype(np.float16)
    return values, values.astype(np.float64)


def run_matmul(program: Program, shape: tuple[int, int, int], dtype_in: DType, dtype_out: DType, engine: str) -> None:
    """Run `program` (an m x n x k matmul) on random inputs with `engine` ("interpreter" or "ptx model") and compare
    with numpy's float64 product of the same values."""
    m, n, k = shape
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    operands = bf16_operands if dtype_in == dtypes.bfloat16 else f16_operands
    (a, a64), (b, b64) = operands(rng, (m, k)), operands(rng, (k, n))
    out = np.zeros(m * n, np.float32 if dtype_out == dtypes.float32 else np.float16)
    buffers = [out, a.ravel(), b.ravel()]
    global_size, local_size = program.launch_dims({})
    if engine == "interpreter":
        run_program(program, buffers, {}, global_size, local_size)
    else:
        PTXModel(program.source).run(buffers, {}, global_size, local_size)
    tolerance = 1e-5 if dtype_out == dtypes.float32 else 2e-2
    np.testing.assert_allclose(out.reshape(m, n).astype(np.float64), a64 @ b64, rtol=tolerance, atol=tolerance * k)


def test_the_bfloat16_unit_follows_the_float16_ones() -> None:
    assert [(core.dtype_in, core.dtype_out) for core in TENSOR_CORES_SM80] == [
        (dtypes.float16, dtypes.float32),
        (dtypes.float16, dtypes.float16),
        (dtypes.bfloat16, dtypes.float32),
    ]
    assert TENSOR_CORES_SM80[BF16].layouts == TENSOR_CORES_SM80[0].layouts  # the ISA's .bf16 fragments are .f16's
    assert str(TENSOR_CORES_SM80[BF16]) == "WMMA_8_16_16_bfloat16_float32"


@pytest.mark.parametrize("arg", [BF16, ANY], ids=["index", "first_that_fits"])
def test_bf16_matmul_in_the_interpreter(arg: int) -> None:
    sink = matmul(32, 16, 48, dtypes.bfloat16)
    program = Program(get_program(sink, TextCUDARenderer("sm_80"), [Opt(OptOps.TC, 2, arg)]))
    wmmas = [u for u in program.uops if u.op is Ops.WMMA]
    assert len(wmmas) == 1 and wmmas[0].arg == TENSOR_CORES_SM80[BF16].wmma_arg()
    run_matmul(program, (32, 16, 48), dtypes.bfloat16, dtypes.float32, "interpreter")


def test_the_first_unit_that_fits_follows_the_dtypes() -> None:
    renderer = TextCUDARenderer("sm_80")
    for dtype_in, dtype_out, expected in (
        (dtypes.float16, dtypes.float32, 0),
        (dtypes.float16, dtypes.float16, 1),
        (dtypes.bfloat16, dtypes.float32, BF16),
    ):
        program = Program(get_program(matmul(16, 8, 16, dtype_in, dtype_out), renderer, [Opt(OptOps.TC, 2, ANY)]))
        assert [u.arg for u in program.uops if u.op is Ops.WMMA] == [TENSOR_CORES_SM80[expected].wmma_arg()]
    # a bfloat16 sum has no unit (the ISA has no bf16 accumulator); float32 inputs none either
    for dtype_in, dtype_out in ((dtypes.bfloat16, dtypes.bfloat16), (dtypes.float32, dtypes.float32)):
        with pytest.raises(KernelOptError, match=r"fits none of .* WMMA_8_16_16_bfloat16_float32"):
            get_program(matmul(16, 8, 16, dtype_in, dtype_out), renderer, [Opt(OptOps.TC, 2, ANY)])
    with pytest.raises(KernelOptError, match=r"index 0\.\.2 or -1 .* got 3"):
        get_program(matmul(16, 8, 16, dtypes.bfloat16), renderer, [Opt(OptOps.TC, 2, 3)])
    with pytest.raises(KernelOptError, match="needs a product of two bfloat16 loads"):
        get_program(matmul(16, 8, 16, dtypes.float16), renderer, [Opt(OptOps.TC, 2, BF16)])


@pytest.mark.parametrize(
    ("dtype_in", "dtype_out", "opts"),
    [
        (dtypes.bfloat16, dtypes.float32, [Opt(OptOps.TC, 2, BF16)]),
        (dtypes.bfloat16, dtypes.float32, [Opt(OptOps.TC, 2, BF16), Opt(OptOps.LOCAL, 0, 2)]),
        (dtypes.float16, dtypes.float32, [Opt(OptOps.TC, 2, 0)]),
        (dtypes.float16, dtypes.float16, [Opt(OptOps.TC, 2, 1)]),
    ],
    ids=["bf16", "bf16_two_warps", "f16_f32", "f16_f16"],
)
def test_tensor_core_matmul_in_the_ptx_model(dtype_in: DType, dtype_out: DType, opts: list[Opt]) -> None:
    # the PTX renderer's program, its mma.sync executed warp by warp from the ISA's fragment formulas
    program = Program(get_program(matmul(32, 16, 32, dtype_in, dtype_out), TextPTXRenderer("sm_80"), opts))
    inputs = "bf16.bf16" if dtype_in == dtypes.bfloat16 else "f16.f16"
    accumulate = "f32" if dtype_out == dtypes.float32 else "f16"
    assert program.source.count(f"mma.sync.aligned.m16n8k16.row.col.{accumulate}.{inputs}.{accumulate} ") == 1
    run_matmul(program, (32, 16, 32), dtype_in, dtype_out, "ptx model")


def test_the_model_rounds_bfloat16_to_nearest_even() -> None:
    # around 1.0 a bfloat16 ulp is 2**-7: a quarter and three quarters of one, then two ties (to the even neighbour)
    values = (1.0, 1 + 2**-9, 1 + 3 * 2**-9, 1 + 2**-8, 1 + 3 * 2**-8)
    assert [f32_to_bf16_bits(v) for v in values] == [0x3F80, 0x3F80, 0x3F81, 0x3F80, 0x3F82]
    assert f32_to_bf16_bits(-2.0) == 0xC000 and f32_to_bf16_bits(math.nan) == 0x7FFF
    assert f32_to_bf16_bits(3.4028234663852886e38) == 0x7F80  # the largest float32 rounds up to infinity
    assert pack_pair("bf16x2", 1.0, -2.0) == 0x3F80C000 and pack_pair("f16x2", 1.0, -2.0) == 0x3C00C000


def test_the_model_mma_is_a_tile_product() -> None:
    # each lane's registers placed by the ISA's formulas: A[r][c] = r + c / 16, B[r][c] = (r == c) (identity of 8)
    def bf16(value: float) -> int:
        bits = f32_to_bf16_bits(value)
        assert (bits << 16) == int(np.array([value], np.float32).view(np.uint32)[0]), value  # exact by construction
        return bits

    lanes = []
    for lane in range(32):
        group, tig = lane >> 2, lane % 4
        a = [(group + 8 * (i in (2, 3, 6, 7)), 2 * tig + (i & 1) + 8 * (i >= 4)) for i in range(8)]
        b = [(2 * tig + (i & 1) + 8 * (i >= 2), group) for i in range(4)]
        a_bits = [bf16(r + c / 16) for r, c in a]
        b_bits = [bf16(float(r == c)) for r, c in b]
        a_registers = [a_bits[2 * i] | a_bits[2 * i + 1] << 16 for i in range(4)]
        b_registers = [b_bits[2 * i] | b_bits[2 * i + 1] << 16 for i in range(2)]
        lanes.append((a_registers, b_registers, [0.5, 0.5, 0.5, 0.5]))
    result = mma_m16n8k16("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", lanes)  # type: ignore[arg-type]
    for lane, values in enumerate(result):
        group, tig = lane >> 2, lane % 4
        for i, value in enumerate(values):
            row, column = group + 8 * (i >= 2), 2 * tig + (i & 1)
            assert value == row + column / 16 + 0.5, (lane, i)
    with pytest.raises(AssertionError, match="no bf16 accumulator"):
        mma_m16n8k16("mma.sync.aligned.m16n8k16.row.col.f16.bf16.bf16.f16", lanes)  # type: ignore[arg-type]


@needs_nvrtc
@pytest.mark.parametrize(("arch", "output"), [("sm_80", "ptx"), ("sm_90", "cubin")])
def test_bf16_matmul_cuda_c_compiles(arch: str, output: str) -> None:
    renderer = CUDARenderer(arch, output=output)
    opts = [Opt(OptOps.TC, 2, ANY), Opt(OptOps.LOCAL, 0, 2)]
    program = Program(get_program(matmul(64, 32, 64, dtypes.bfloat16), renderer, opts))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in program.source
    assert "kiln_pack_bf16x2" in program.source and "cuda_bf16.h" not in program.source
    binary = program.binary
    assert binary is not None
    if output == "cubin":
        assert binary[:4] == b"\x7fELF"
    else:
        ptx = binary.decode()
        assert f".target {arch}" in ptx and "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_bf16_matmul_ptx_assembles(arch: str) -> None:
    program = Program(get_program(matmul(64, 32, 64, dtypes.bfloat16), PTXRenderer(arch), [Opt(OptOps.TC, 2, ANY)]))
    assert program.source.count("cvt.rn.bf16x2.f32") == 6  # 4 A and 2 B registers per mma
    PTXCompiler(arch).compile(program.source)  # ptxas --gpu-name <arch>: a rejection raises


def heuristic_wmmas(sink: UOp) -> int:
    """How many WMMA the heuristic opts (no opts given) leave in `sink`'s program for the CUDA renderer."""
    return [u.op for u in Program(get_program(sink, TextCUDARenderer("sm_80"))).uops].count(Ops.WMMA)


@pytest.mark.parametrize(
    ("dtype_in", "dtype_out"),
    [(dtypes.bfloat16, dtypes.float32), (dtypes.float16, dtypes.float32), (dtypes.float16, dtypes.float16)],
)
def test_the_heuristic_puts_a_half_precision_matmul_on_tensor_cores(dtype_in: DType, dtype_out: DType) -> None:
    # no opts given: the heuristic's step 0 picks the unit; the interpreter's and PTX model's results equal numpy's
    program = Program(get_program(matmul(32, 16, 48, dtype_in, dtype_out), TextCUDARenderer("sm_80")))
    assert [u.op for u in program.uops].count(Ops.WMMA) == 1
    run_matmul(program, (32, 16, 48), dtype_in, dtype_out, "interpreter")
    ptx = Program(get_program(matmul(32, 16, 32, dtype_in, dtype_out), TextPTXRenderer("sm_80")))
    assert ptx.source.count("mma.sync.aligned.m16n8k16") == 1
    run_matmul(ptx, (32, 16, 32), dtype_in, dtype_out, "ptx model")
    with Context(TENSOR_CORES=False):  # the knob turns it off
        assert heuristic_wmmas(matmul(32, 16, 48, dtype_in, dtype_out)) == 0


def test_the_heuristic_keeps_products_no_unit_fits_off_tensor_cores() -> None:
    assert heuristic_wmmas(matmul(32, 16, 48, dtypes.float32)) == 0
    assert heuristic_wmmas(matmul(32, 16, 48, dtypes.bfloat16, dtypes.bfloat16)) == 0  # no bf16 accumulator
    assert heuristic_wmmas(matmul(32, 16, 12, dtypes.float16)) == 0  # a reduce of 12: no k=16 unit divides it
