"""The WGSL renderer and its compiler (wgpu's shader validation).

Golden text pins the dialect (bindings in slot order then the variables' array, `let`/`var` declarations, gated
loads under an `if`, `var<workgroup>` memory and `workgroupBarrier`, bool buffers packed in u32 words with atomic
byte stores, NaN/inf/INT_MIN constants as bit casts); wgpu then validates every coverage kernel of the dtypes WGSL
has, and errors name what is wrong. Running the kernels is the runtime's conformance suite
(packages/runtime-hcq/tests/test_conformance.py, pair WEBGPU-WGSL).
"""

from __future__ import annotations

import sys

import pytest
from gpu_kernels import coverage_sinks, gated_kernel, group_reduce_kernel, symbolic_kernel

from kiln.codegen import KernelInfo, Program, get_program
from kiln.renderers.device_table import dtypes_for
from kiln.renderers.webgpu_library import WebGPUNotFoundError, load_wgpu, webgpu_available, webgpu_target
from kiln.renderers.wgsl import WGSLCompileError, WGSLCompiler, WGSLRenderer
from kiln.uops import AxisKind, Ops, UOp, dtypes

needs_webgpu = pytest.mark.skipif(
    not webgpu_available(), reason="no WebGPU adapter: pip install wgpu, apt install mesa-vulkan-drivers"
)


class SourceOnlyRenderer(WGSLRenderer):
    """The WGSL renderer without its compiler: get_program stops at the source."""

    compiler = None  # type: ignore[assignment]


GATED_SOURCE = """\
// kiln SourceOnlyRenderer kernel gated
@group(0) @binding(0) var<storage, read_write> data0: array<i32>;
@group(0) @binding(1) var<storage, read_write> data1: array<i32>;
@compute @workgroup_size(4, 1, 1)
fn kiln_kernel(@builtin(workgroup_id) kiln_group: vec3<u32>, @builtin(local_invocation_id) kiln_local: vec3<u32>) {
  let alu0: i32 = (i32(kiln_group.x) * 4i);
  let alu1: i32 = (alu0 + i32(kiln_local.x));
  let alu2: i32 = (alu1 - 2i);
  let alu3: bool = (alu1 < 18i);
  let alu4: bool = (alu1 < 2i);
  let alu5: bool = (alu4 != true);
  let alu6: bool = (alu3 & alu5);
  var val0: i32 = 0i;
  if (alu6) { val0 = data1[alu2]; }
  data0[alu1] = val0;
}
"""


def test_a_gated_load_reads_only_under_its_gate() -> None:
    assert Program(get_program(gated_kernel(), SourceOnlyRenderer())).source == GATED_SOURCE


def test_variables_are_a_read_only_array_after_the_buffers() -> None:
    source = Program(get_program(symbolic_kernel(), SourceOnlyRenderer())).source
    assert "@group(0) @binding(2) var<storage, read> kiln_vars: array<i32>;" in source.splitlines()


def test_group_reduce_uses_workgroup_memory_and_a_barrier() -> None:
    sink, opts = group_reduce_kernel()
    lines = [line.strip() for line in Program(get_program(sink, SourceOnlyRenderer(), opts)).source.splitlines()]
    assert "var<workgroup> smem0: array<f32, 16>;" in lines and "@compute @workgroup_size(16, 1, 1)" in lines
    assert lines.index("smem0[i32(kiln_local.x)] = val2;") < lines.index("workgroupBarrier();")
    assert "acc0[0i] = kiln_f32_bits(0xff800000u);" in lines  # -inf, the identity of MAX: a run-time value
    assert "fn kiln_f32_bits(bits: u32) -> f32 { return bitcast<f32>(bits); }" in lines
    # no bit cast of a literal to f32: a constant expression Chromium's Tint evaluates, and rejects for NaN / inf
    assert not any("bitcast<f32>(0x" in line for line in lines)


def _bool_copy_sink() -> UOp:
    loop = UOp.range(10, 0, AxisKind.LOOP)
    source = UOp(Ops.DEFINE_GLOBAL, dtypes.bool.ptr(10), arg=1).index(loop).load()
    store = UOp(Ops.DEFINE_GLOBAL, dtypes.bool.ptr(10), arg=0).index(loop).store(source.logical_not()).end(loop)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo("bool_not"))


def test_bool_buffers_are_bytes_packed_in_u32_words() -> None:
    lines = [
        line.strip() for line in Program(get_program(_bool_copy_sink(), SourceOnlyRenderer(), [])).source.splitlines()
    ]
    assert "@group(0) @binding(0) var<storage, read_write> data0: array<atomic<u32>>;" in lines  # stored
    assert "@group(0) @binding(1) var<storage, read_write> data1: array<u32>;" in lines  # only read
    load = next(line for line in lines if line.startswith("let val0: bool"))
    assert "(data1[u32(" in load and "& 3u) * 8u)) & 0xffu) != 0u)" in load
    store = next(line for line in lines if "atomicOr" in line)
    assert "atomicAnd(&data0[kiln_i >> 2u], ~(0xffu << kiln_shift));" in store


def test_constants_wgsl_has_no_literal_for_are_bit_casts() -> None:
    renderer = SourceOnlyRenderer()
    with pytest.raises(ValueError, match="run-time value"):  # NaN / inf need the kernel that declares the helper
        renderer.constant(float("nan"), dtypes.float32)
    assert renderer.constant(-(2**31), dtypes.int32) == "bitcast<i32>(0x80000000u)"
    assert renderer.constant(-3, dtypes.int32) == "(-3i)" and renderer.constant(7, dtypes.uint32) == "7u"
    assert renderer.constant(0.1, dtypes.float32) == "0.1f" and renderer.constant(True, dtypes.bool) == "true"


def test_capabilities_and_the_device_table_agree() -> None:
    renderer = WGSLRenderer()
    assert renderer.device == "WEBGPU" and renderer.has_local and renderer.has_shared
    assert dtypes_for("WEBGPU") == {dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32}
    assert renderer.native_dtypes == dtypes_for("WEBGPU") | {dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16}
    with pytest.raises(ValueError, match="cannot compute in \\['float64'\\]"):
        get_program(next(s for n, s, _ in coverage_sinks() if n == "elementwise_float64"), renderer)
    with pytest.raises(ValueError, match=r"WEBGPU stores no dtypes\.int8 buffers"):
        get_program(next(s for n, s, _ in coverage_sinks() if n == "elementwise_int8"), renderer)


def test_too_many_buffers_for_the_adapter_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"kernel gated needs 2 storage buffers .* allows 1 per shader stage"):
        get_program(gated_kernel(), SourceOnlyRenderer(max_storage_buffers=1))


WGSL_DTYPE_NAMES = ("bool", "int32", "uint32", "float32")


@needs_webgpu
def test_every_kind_of_kernel_of_wgsl_dtypes_validates() -> None:
    renderer = WGSLRenderer(max_storage_buffers=webgpu_target().max_storage_buffers)
    kernels = [
        (name, sink, opts)
        for name, sink, opts in coverage_sinks()
        if (name.startswith("alu_") and name[4:] in WGSL_DTYPE_NAMES) or name in ("gated", "symbolic", "group_max")
    ]
    assert len(kernels) == 7
    for name, sink, opts in kernels:
        binary = Program(get_program(sink, renderer, opts)).binary
        assert binary is not None and b"fn kiln_kernel" in binary, name


@needs_webgpu
def test_cache_key_names_the_adapter() -> None:
    assert webgpu_target().adapter_name in WGSLCompiler().cache_key("source")


@needs_webgpu
def test_compile_error_carries_the_diagnostic_and_the_source() -> None:
    bad = "@compute @workgroup_size(1) fn kiln_kernel() { let x: i32 = undefined_thing; }"
    with pytest.raises(WGSLCompileError, match=r"(?s)undefined_thing.*--- source ---"):
        WGSLCompiler().compile(bad)


def test_missing_wgpu_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wgpu", None)  # import wgpu now raises ImportError
    load_wgpu.cache_clear()
    try:
        with pytest.raises(WebGPUNotFoundError, match=r"wgpu package is not installed.*kiln-runtime-hcq\[webgpu\]"):
            load_wgpu()
    finally:
        load_wgpu.cache_clear()
