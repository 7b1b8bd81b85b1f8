"""Targets: one record per device, read by the renderers and by the device table (kiln/renderers/target.py)."""

from __future__ import annotations

import pytest

from kiln.codegen import Renderer, WmmaArg
from kiln.renderers import (
    DEVICE_TABLE,
    TENSOR_CORES_GFX942,
    TENSOR_CORES_METAL,
    TENSOR_CORES_SM80,
    AMDRenderer,
    CCompiler,
    CRenderer,
    CStyleRenderer,
    CUDARenderer,
    MetalRenderer,
    PTXRenderer,
    PythonCompiler,
    PythonRenderer,
    Target,
    dtypes_for,
    nvidia_target,
    tensor_core_of,
)
from kiln.renderers.device_table import table_renderers
from kiln.renderers.target import (
    CPU,
    METAL,
    NVIDIA,
    BlockLimits,
    amd_target,
    architecture_number,
    gpu_target,
    metal_target,
)
from kiln.uops import Ops, UOp, dtypes


def test_the_neutral_target_is_codegens_renderer_defaults() -> None:
    # a TargetRenderer that names no Target must render like a codegen Renderer that sets nothing
    for attribute, value in Target("NONE", "NONE").renderer_attributes().items():
        assert getattr(Renderer, attribute) == value, attribute


@pytest.mark.parametrize("kind", sorted(DEVICE_TABLE))
def test_a_device_kind_stores_the_dtypes_of_its_target_and_its_renderers_use_it(kind: str) -> None:
    row = DEVICE_TABLE[kind]
    assert dtypes_for(kind) == row.target.storage_dtypes and row.target.device == kind
    for renderer in table_renderers(kind):
        assert renderer.device == kind
        for attribute, value in row.target.renderer_attributes().items():
            if attribute in ("tensor_cores", "native_dtypes", "emulated_dtypes"):
                continue  # an architecture (CUDA's sm_80, MSL 3.1) or the compiler (C's float16) may refine these
            assert getattr(renderer, attribute) == value, (renderer, attribute)


def test_cuda_c_and_ptx_render_for_one_target() -> None:
    for arch in ("sm_75", "sm_80", "sm_90"):
        cuda, ptx = CUDARenderer(arch), PTXRenderer(arch)
        assert cuda.target is ptx.target is nvidia_target(arch)
        assert (cuda.local_size_max, cuda.shared_max, cuda.local_max) == (1024, 49152, (1024, 1024, 64))
        assert ptx.local_size_max == cuda.local_size_max and ptx.emulated_dtypes == cuda.emulated_dtypes
    assert CUDARenderer("sm_75").tensor_cores == () and PTXRenderer("sm_90").tensor_cores == TENSOR_CORES_SM80
    assert nvidia_target("sm_86").architecture == "sm_86" and NVIDIA.tensor_cores == ()
    with pytest.raises(ValueError, match="sm_70"):
        nvidia_target("sm_70")
    with pytest.raises(ValueError, match="unsupported CUDA architecture 'gfx1100'"):
        architecture_number("gfx1100")


def test_an_architecture_changes_only_its_own_attributes() -> None:
    assert AMDRenderer("gfx942").tensor_cores == TENSOR_CORES_GFX942 and AMDRenderer("gfx942").shared_max == 65536
    with pytest.raises(ValueError, match="'gfx90a'; expected one of gfx1100, gfx942"):
        amd_target("gfx90a")
    old, new = MetalRenderer("3.0"), MetalRenderer("3.1")
    assert dtypes.bfloat16 in old.emulated_dtypes and dtypes.bfloat16 in (new.native_dtypes or ())
    assert dtypes.float64 not in (new.native_dtypes or ()) | new.emulated_dtypes
    assert new.target is metal_target("3.1") and old.tensor_cores == new.tensor_cores == TENSOR_CORES_METAL


def test_a_class_body_keeps_what_it_defines_itself() -> None:
    class EveryCoreOnce(CRenderer):
        thread_max = CPU.thread_max + 3
        emulated_dtypes = frozenset({dtypes.bfloat16})

    renderer = EveryCoreOnce()
    assert renderer.thread_max == CPU.thread_max + 3 and renderer.emulated_dtypes == {dtypes.bfloat16}
    assert CRenderer.thread_max == CPU.thread_max and renderer.has_threads

    class MoreCores(CStyleRenderer[CCompiler], target=CPU):  # names its Target and overrides one of its limits
        thread_max = CPU.thread_max + 3

        def make_compiler(self) -> CCompiler:
            return CCompiler("gcc")

    assert MoreCores.thread_max == CPU.thread_max + 3
    assert MoreCores.has_threads and MoreCores.native_dtypes == CPU.native_dtypes


def test_the_compiler_is_made_once_on_first_use_and_may_be_swapped() -> None:
    renderer = PythonRenderer()
    compiler = renderer.compiler
    assert isinstance(compiler, PythonCompiler) and renderer.compiler is compiler
    swapped = PythonCompiler()
    renderer.compiler = swapped
    assert renderer.compiler is swapped
    source_only = CRenderer("gcc")
    source_only.compiler = None  # type: ignore[assignment]  # get_program then stops at the source
    assert source_only.compiler is None
    assert isinstance(CRenderer("gcc").make_compiler(), CCompiler)


def test_a_wmma_names_one_tensor_core_of_its_renderer() -> None:
    core = TENSOR_CORES_SM80[1]
    wmma = UOp(Ops.WMMA, dtypes.float32.vec(4), (), core.wmma_arg())
    assert tensor_core_of(CUDARenderer("sm_80"), wmma) is core
    with pytest.raises(ValueError, match="has no tensor core"):
        tensor_core_of(CUDARenderer("sm_75"), wmma)
    assert isinstance(wmma.arg, WmmaArg)


def test_gpu_target_computes_in_all_but_the_emulated_and_missing_dtypes() -> None:
    target = gpu_target(
        "X", BlockLimits((64, 32, 16), 128, 4096), frozenset({dtypes.bfloat16}), frozenset({dtypes.int64})
    )
    stored = {dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32}
    stored |= {dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64}
    stored |= {dtypes.fp8e4m3, dtypes.fp8e5m2}
    assert target.storage_dtypes == stored
    assert target.native_dtypes == stored - {dtypes.bfloat16}
    assert target.emulated_dtypes == {dtypes.bfloat16}
    assert (target.name, target.device, target.global_max) == ("X", "X", (2**31 - 1, 65535, 65535))
    assert (target.local_max, target.local_size_max, target.shared_max) == ((64, 32, 16), 128, 4096)
    assert dtypes.float64 not in METAL.storage_dtypes and dtypes.float64 not in METAL.native_dtypes
