"""The Metal renderer; its compiler runs only on macOS, so on Linux the MSL is parsed by clang++ against a shim.

Golden text pins the dialect (address spaces and [[buffer]] slots, packed wide accesses, threadgroup memory and
barrier, as_type). Every coverage kernel (MSL has no float64: those are refused, and the cast kernels here leave
float64 out) is then parsed by clang++ as C++ against `metal_shim/metal_stdlib`, a hand-written stand-in for
Apple's header declaring the MSL names the renderer uses: that catches undeclared names, type mismatches and
syntax errors, not Metal semantics (the shim erases address spaces and ignores attributes). The simdgroup layout is
checked against the reverse-engineered formula, and codegen's programs with it compute a matmul in the interpreter.
On macOS the kernels are also compiled by `xcrun metal`.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gpu_kernels import (
    check_tensor_core_matmul,
    coverage_sinks,
    group_reduce_kernel,
    matmul_sink,
    vector_kernel,
    wmma_program,
)

from kiln.codegen import KernelInfo, Opt, OptOps, Program, get_program
from kiln.renderers import DEVICE_TABLE, ToolchainNotFoundError, dtypes_for, renderers_for
from kiln.renderers.metal import MetalCompiler, MetalRenderer
from kiln.renderers.tensor_cores import TENSOR_CORES_METAL
from kiln.uops import AxisKind, DType, Ops, UOp, dtypes

SHIM = Path(__file__).parent / "metal_shim"
# the newest clang++ first: the shim's bfloat is __bf16, which x86 clang supports from version 17
CXX_NAMES = (*(f"clang++-{version}" for version in range(22, 16, -1)), "clang++", "g++")
CLANGXX = next((path for name in CXX_NAMES if (path := shutil.which(name))), None)
needs_cxx = pytest.mark.skipif(CLANGXX is None, reason="no clang++/g++ to parse MSL against the shim")
on_macos = platform.system() == "Darwin"


class SourceOnlyRenderer(MetalRenderer):
    """The Metal renderer without its compiler: get_program stops at the source."""

    compiler = None  # type: ignore[assignment]


VECTOR_SOURCE = """\
/* kiln SourceOnlyRenderer kernel vectors */
#include <metal_stdlib>
using namespace metal;
kernel void kiln_kernel(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], \
const device float* data2 [[buffer(2)]], uint3 kiln_group [[threadgroup_position_in_grid]], \
uint3 kiln_thread [[thread_position_in_threadgroup]]) {
  int sidx0 = ((int)kiln_group.x);
  int alu0 = ((int)((uint)(sidx0)*(uint)(4)));
  float4 val0 = (*((device packed_float4*)(data1+alu0)));
  float4 val1 = (*((device packed_float4*)(data2+alu0)));
  float alu1 = (val0[0]*val1[0]);
  float alu2 = (alu1+1.0f);
  float alu3 = (val0[1]*val1[1]);
  float alu4 = (alu3+1.0f);
  float alu5 = (val0[2]*val1[2]);
  float alu6 = (alu5+1.0f);
  float alu7 = (val0[3]*val1[3]);
  float alu8 = (alu7+1.0f);
  float4 vec0 = float4(alu2,alu4,alu6,alu8);
  *((device packed_float4*)(data0+alu0)) = vec0;
}
"""


def test_golden_vector_kernel() -> None:
    sink, opts = vector_kernel()
    assert Program(get_program(sink, SourceOnlyRenderer(), opts)).source == VECTOR_SOURCE


def test_golden_lines_of_a_group_reduce() -> None:
    sink, opts = group_reduce_kernel()
    lines = [line.strip() for line in Program(get_program(sink, SourceOnlyRenderer(), opts)).source.splitlines()]
    assert "threadgroup float smem0[16];" in lines
    assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in lines
    assert "int sidx1 = ((int)kiln_thread.x);" in lines
    assert "*acc0 = as_type<float>(0xff800000u);" in lines  # -inf, the identity of MAX


def test_float64_is_refused_and_bfloat16_is_native_from_msl_3_1() -> None:
    float64 = next(sink for name, sink, _ in coverage_sinks() if name == "alu_float64")
    with pytest.raises(ValueError, match="float64"):
        get_program(float64, SourceOnlyRenderer(), [])
    assert dtypes.float64 not in dtypes_for("METAL") and dtypes.int64 in dtypes_for("METAL")
    assert "METAL" in DEVICE_TABLE and renderers_for("METAL") == (MetalRenderer,)
    bfloat16 = next(sink for name, sink, _ in coverage_sinks() if name == "alu_bfloat16")
    assert "bfloat " in Program(get_program(bfloat16, SourceOnlyRenderer("3.1"), [])).source
    assert "bfloat " not in Program(get_program(bfloat16, SourceOnlyRenderer("3.0"), [])).source  # emulated
    with pytest.raises(ValueError, match="'3'"):
        MetalRenderer("3")


@pytest.mark.skipif(on_macos, reason="this is the error off macOS")
def test_compiling_off_macos_says_it_needs_macos() -> None:
    with pytest.raises(ToolchainNotFoundError, match="only on macOS"):
        MetalCompiler().compile("kernel void kiln_kernel() {}")


def cast_kernel_without_float64(source: DType) -> UOp:
    """`source` cast and bit cast to every other dtype but float64 (slot order: the targets, then the input)."""
    targets = [(t, False) for t in dtypes.all if t not in (source, dtypes.float64)]
    if source != dtypes.bool:
        same_size = (t for t in dtypes.all if t.itemsize == source.itemsize and t not in (source, dtypes.bool))
        targets += [(t, True) for t in same_size if t != dtypes.float64]
    loop = UOp.range(16, 0, AxisKind.LOOP)
    value = UOp(Ops.DEFINE_GLOBAL, source.ptr(16), (), len(targets)).index(loop).load()
    stores = []
    for slot, (target, bits) in enumerate(targets):
        result = value.bitcast(target) if bits else value.cast(target)
        stores.append(UOp(Ops.DEFINE_GLOBAL, target.ptr(16), (), slot).index(loop).store(result).end(loop))
    return UOp(Ops.SINK, dtypes.void, tuple(stores), KernelInfo(f"casts_{source.name}"))


def metal_kernels() -> list[tuple[str, UOp, list[Opt] | None]]:
    """Codegen's corpus and the coverage kernels, float64 left out, plus the TC opt on a matmul for each core."""
    kernels = [k for k in coverage_sinks() if "float64" not in k[0] and not k[0].startswith("casts_")]
    kernels += [(f"casts_{d.name}", cast_kernel_without_float64(d), []) for d in dtypes.all if d != dtypes.float64]
    for number, core in enumerate(TENSOR_CORES_METAL[1:], start=1):  # matmul_sink reads float16
        kernels.append((f"tc_{core}", matmul_sink(16, 16, 16, core.dtype_out), [Opt(OptOps.TC, 2, number)]))
    return kernels


def parse_with_shim(sources: dict[str, str]) -> dict[str, str]:
    """name -> clang++'s errors for each source that does not parse against the shim (four parses at a time)."""
    assert CLANGXX is not None
    compiler = CLANGXX
    with tempfile.TemporaryDirectory() as directory:

        def errors_of(name: str) -> str:
            path = Path(directory) / f"{name}.cpp"
            path.write_text(sources[name])
            command = [compiler, "-std=c++17", "-fsyntax-only", f"-I{SHIM}", "-Wno-unknown-attributes", str(path)]
            completed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
            return completed.stderr if completed.returncode != 0 else ""

        with ThreadPoolExecutor(max_workers=4) as pool:
            results = dict(zip(sources, pool.map(errors_of, sources)))
    return {name: errors for name, errors in results.items() if errors}


@needs_cxx
@pytest.mark.parametrize("version", ["3.0", "3.1"])
def test_every_kernel_parses_against_the_shim(version: str) -> None:
    renderer = SourceOnlyRenderer(version)
    sources = {name: Program(get_program(sink, renderer, opts)).source for name, sink, opts in metal_kernels()}
    assert any("simdgroup_multiply_accumulate" in source for source in sources.values())
    assert parse_with_shim(sources) == {}


@needs_cxx
def test_the_shim_rejects_what_metal_rejects() -> None:
    # the oracle can fail: an undeclared function, a double (the shim poisons the name) and a wrong type all stop it
    sink, opts = vector_kernel()
    source = Program(get_program(sink, SourceOnlyRenderer(), opts)).source
    broken = {
        "wrong_type": source.replace("float4 vec0 = float4(", "float4 vec0 = float2("),
        "undeclared": source.replace("float alu2 = (alu1+1.0f);", "float alu2 = kiln_undeclared(alu1);"),
        "double": source.replace("float alu2 = (alu1+1.0f);", "double alu2 = (alu1+1.0);"),
    }
    assert set(parse_with_shim(broken)) == {"wrong_type", "undeclared", "double"}


def test_simdgroup_layout_is_the_reverse_engineered_formula() -> None:
    # metal-flash-attention's simdgroup_matrix_storage offset(): lane l holds row (l / 2) % 4 + 4 (l / 16), columns
    # 2 (l % 2) + 4 ((l / 8) % 2) + element
    for core in TENSOR_CORES_METAL:
        assert core.layouts is not None
        for layout in core.layouts:
            for lane in range(32):
                for element in range(2):
                    row = (lane // 2) % 4 + 4 * (lane // 16)
                    column = 2 * (lane % 2) + 4 * ((lane // 8) % 2) + element
                    assert layout.coordinate(lane, element) == (row, column)


def test_wmma_renders_simdgroup_matrices() -> None:
    renderer = SourceOnlyRenderer()
    source = renderer.render(wmma_program(TENSOR_CORES_METAL[1], renderer), "wmma")
    assert "simdgroup_half8x8 matrix_a, matrix_b;" in source and "simdgroup_float8x8 matrix_c;" in source
    assert "simdgroup_multiply_accumulate(matrix_c, matrix_a, matrix_b, matrix_c);" in source


@pytest.mark.parametrize("core_number", [1, 2], ids=["f32_accumulator", "f16_accumulator"])
def test_tensor_core_programs_compute_the_matmul(core_number: int) -> None:
    check_tensor_core_matmul(SourceOnlyRenderer(), core_number, (16, 8, 24), seed=9)


@pytest.mark.skipif(not on_macos or shutil.which("xcrun") is None, reason="xcrun metal exists only on macOS")
def test_every_kernel_compiles_with_xcrun_metal() -> None:
    renderer = MetalRenderer()
    for name, sink, opts in metal_kernels():
        binary = Program(get_program(sink, renderer, opts)).binary
        assert binary is not None and binary[:4] == b"MTLB", name


def test_vector_types_are_msls_own_bool_vectors_included() -> None:
    renderer = MetalRenderer()
    assert renderer.vector_type(dtypes.float16.vec(4)) == ("half4", None)
    assert renderer.vector_type(dtypes.uint32.vec(3)) == ("uint3", None)
    assert renderer.vector_type(dtypes.bool.vec(2)) == ("bool2", None)
    with pytest.raises(ValueError, match=r"MSL has no vector of 8 lanes"):
        renderer.vector_type(dtypes.float32.vec(8))
