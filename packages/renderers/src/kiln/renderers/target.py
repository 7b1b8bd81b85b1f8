"""`Target`: what a device offers a kernel, as one frozen record per device (and architecture).

A renderer is a `Target` (this module: limits, dtypes, tensor cores) plus the way it prints a program (for the C
family a `CDialect` and its string rules, `kiln.renderers.c_style`). The Target says what the hardware has; the
renderer says what its language can spell (`native_ops`, `vector_widths`). CUDA C and PTX print for the same
`nvidia_target`; the device table (`kiln.renderers.device_table`) names each device kind's Target.

A renderer class gets the attributes codegen's lowering reads from its Target by naming it in its class statement,
`class CUDARenderer(CStyleRenderer[CUDACompiler], target=NVIDIA)`; a renderer made for one architecture sets its
own instance's (`TargetRenderer.use_target`). Every renderer owns its compiler the same way: `make_compiler()`,
called by the `compiler` property on first use.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from abc import abstractmethod
from dataclasses import dataclass
from typing import Generic, TypeVar

from kiln.codegen import Compiler, Renderer, TensorCore, WmmaArg
from kiln.renderers.tensor_cores import TENSOR_CORES_GFX942, TENSOR_CORES_GFX1100, TENSOR_CORES_METAL, TENSOR_CORES_SM80
from kiln.uops import DType, GroupOp, Ops, UOp, dtypes

__all__ = [
    "AMD",
    "AMD_TARGETS",
    "BlockLimits",
    "CPU",
    "METAL",
    "NVIDIA",
    "OPENCL",
    "PYTHON",
    "SUPPORTED_ARCHITECTURES",
    "WEBGPU",
    "Target",
    "TargetRenderer",
    "amd_target",
    "gpu_target",
    "architecture_number",
    "metal_language_version",
    "metal_target",
    "nvidia_target",
    "tensor_core_of",
]

ALL_DTYPES: frozenset[DType] = frozenset(dtypes.all)
LOW_PRECISION_FLOATS: frozenset[DType] = frozenset({dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2})
"""bfloat16 and the fp8 formats: no target here computes in them; codegen emulates them in float32."""

GPU_GLOBAL_MAX = (2**31 - 1, 65535, 65535)
"""Grid size of each dimension on CUDA (x up to 2**31 - 1, y and z 65535), which the other GPUs here accept too."""


@dataclass(frozen=True)
class Target:
    """One device (of one architecture): its limits, the dtypes it computes in and stores, its tensor cores.

    Attributes:
        name: what the record describes, e.g. "CUDA sm_80".
        device: the device kind its programs run on ("CUDA").
        architecture: the architecture compiled for ("sm_80", "gfx1100"; "" where there is one).
        global_max: largest size of each grid dimension (None: no blocks of threads).
        local_max: largest size of each block dimension (None: no blocks of threads).
        local_size_max: most threads per block.
        shared_max: bytes of block-shared memory (0: none, hence no barriers).
        has_threads: kernels may spread a loop over CPU cores (THREAD axes), at most `thread_max` of them.
        thread_max: most cores one kernel may use.
        native_dtypes: the dtypes it computes in (None: every dtype).
        emulated_dtypes: the dtypes codegen computes through float32 for it.
        storage_dtypes: the dtypes a buffer of the device may hold.
        tensor_cores: its matrix units.
    """

    name: str
    device: str
    architecture: str = ""
    global_max: tuple[int, ...] | None = None
    local_max: tuple[int, ...] | None = None
    local_size_max: int = 1
    shared_max: int = 0
    has_threads: bool = False
    thread_max: int = 1
    native_dtypes: frozenset[DType] | None = None
    emulated_dtypes: frozenset[DType] = frozenset()
    storage_dtypes: frozenset[DType] = ALL_DTYPES
    tensor_cores: tuple[TensorCore, ...] = ()

    @property
    def has_local(self) -> bool:
        """Threads come in blocks (gidx / lidx)."""
        return self.local_max is not None

    @property
    def has_shared(self) -> bool:
        """Blocks share memory and synchronize at barriers."""
        return self.shared_max > 0

    def for_architecture(self, architecture: str, tensor_cores: tuple[TensorCore, ...]) -> Target:
        """This device's record for one `architecture`, which has `tensor_cores`."""
        name = f"{self.device} {architecture}"
        return dataclasses.replace(self, name=name, architecture=architecture, tensor_cores=tensor_cores)

    def renderer_attributes(self) -> dict[str, object]:
        """The `Renderer` attributes (codegen's lowering reads them) this record gives a renderer, by name."""
        return {
            "has_local": self.has_local,
            "has_shared": self.has_shared,
            "has_threads": self.has_threads,
            "global_max": self.global_max,
            "local_max": self.local_max,
            "local_size_max": self.local_size_max,
            "shared_max": self.shared_max,
            "thread_max": self.thread_max,
            "native_dtypes": self.native_dtypes,
            "emulated_dtypes": self.emulated_dtypes,
            "tensor_cores": self.tensor_cores,
        }


# ---- the devices --------------------------------------------------------------------------------------------------

CPU = Target(
    "CPU",
    "CPU",
    has_threads=True,
    thread_max=os.cpu_count() or 1,
    native_dtypes=ALL_DTYPES - LOW_PRECISION_FLOATS,
    emulated_dtypes=LOW_PRECISION_FLOATS,
)
"""The host: no blocks of threads, a kernel's THREAD axes over its cores; every dtype but bfloat16 and fp8 (float16
too where the C compiler lacks _Float16: `CRenderer.emulated_dtypes`)."""

PYTHON = Target(
    "PYTHON",
    "PYTHON",
    global_max=GPU_GLOBAL_MAX,
    local_max=(1024, 1024, 64),
    local_size_max=1024,
    shared_max=49152,
)
"""The reference interpreter, shaped like a CUDA GPU (blocks, shared memory, barriers), computing in every dtype."""


@dataclass(frozen=True)
class BlockLimits:
    """What one block of GPU threads may have: a size of each dimension up to `local_max`, `local_size_max` threads
    in all, `shared_max` bytes of shared memory."""

    local_max: tuple[int, int, int]
    local_size_max: int
    shared_max: int


def gpu_target(
    device: str,
    block: BlockLimits,
    emulated: frozenset[DType],
    missing: frozenset[DType] = frozenset(),
    tensor_cores: tuple[TensorCore, ...] = (),
) -> Target:
    """A GPU with CUDA's grid (`GPU_GLOBAL_MAX`) and `block` limits, computing in every dtype but the `emulated` ones
    (codegen computes them through float32) and the `missing` ones (neither computed nor stored: codegen refuses
    them)."""
    return Target(
        device,
        device,
        global_max=GPU_GLOBAL_MAX,
        local_max=block.local_max,
        local_size_max=block.local_size_max,
        shared_max=block.shared_max,
        native_dtypes=ALL_DTYPES - emulated - missing,
        emulated_dtypes=emulated,
        storage_dtypes=ALL_DTYPES - missing,
        tensor_cores=tensor_cores,
    )


_FLOAT16_EMULATED = LOW_PRECISION_FLOATS | {dtypes.float16}
_SHARED_PER_BLOCK = 49152  # static __shared__ memory per block (CUDA guide, "Compute Capabilities")

NVIDIA = gpu_target("CUDA", BlockLimits((1024, 1024, 64), 1024, _SHARED_PER_BLOCK), _FLOAT16_EMULATED)
"""NVIDIA GPUs (CUDA C and PTX alike): float16, bfloat16 and fp8 emulated (no header provides `half` to NVRTC)."""

_MINIMUM_LOCAL_MEMORY = 32768  # the OpenCL 1.2 full profile's minimum CL_DEVICE_LOCAL_MEM_SIZE

OPENCL = gpu_target("CL", BlockLimits((256, 256, 64), 256, _MINIMUM_LOCAL_MEMORY), _FLOAT16_EMULATED)
"""An OpenCL device: float16 emulated (no cl_khr_fp16 on PoCL's CPU device), bfloat16 and fp8 too."""

_FLAT_WORK_GROUP_SIZE = 1024  # the default amdgpu-flat-work-group-size bound of a kernel (AMDGPUUsage)
_LDS_PER_WORKGROUP = 65536  # on gfx1100 and gfx942

AMD = gpu_target(
    "AMD", BlockLimits((1024, 1024, 1024), _FLAT_WORK_GROUP_SIZE, _LDS_PER_WORKGROUP), LOW_PRECISION_FLOATS
)
"""AMD GPUs: float16 native, bfloat16 and fp8 emulated."""

_THREADS_PER_THREADGROUP = 1024  # maxTotalThreadsPerThreadgroup of Apple GPUs
_THREADGROUP_MEMORY = 32768  # of every Apple GPU family (Metal feature set tables)

METAL = gpu_target(
    "METAL",
    BlockLimits((1024, 1024, 1024), _THREADS_PER_THREADGROUP, _THREADGROUP_MEMORY),
    LOW_PRECISION_FLOATS,
    missing=frozenset({dtypes.float64}),
    tensor_cores=TENSOR_CORES_METAL,
)
"""Apple GPUs with MSL before 3.1: no float64 at all (neither native nor emulated: codegen refuses it), bfloat16
and fp8 emulated (`metal_target` for newer MSL)."""

WEBGPU_NATIVE: frozenset[DType] = frozenset(
    {dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.float32}
)
"""What WGSL computes in: its 32-bit scalars, and 8/16-bit integers held in 32-bit registers."""

WEBGPU = Target(
    "WEBGPU",
    "WEBGPU",
    global_max=(65535, 65535, 65535),  # maxComputeWorkgroupsPerDimension
    local_max=(256, 256, 64),  # maxComputeWorkgroupSizeX/Y/Z
    local_size_max=256,  # maxComputeInvocationsPerWorkgroup
    shared_max=16384,  # maxComputeWorkgroupStorageSize
    native_dtypes=WEBGPU_NATIVE,
    storage_dtypes=frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32}),
)
"""WebGPU's guaranteed limits; buffers hold WGSL's 32-bit scalars only (bool packed four bytes to a word): no 64-bit
types, no 8/16-bit storage without extensions."""


# ---- architectures ------------------------------------------------------------------------------------------------

SUPPORTED_ARCHITECTURES = (75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121)
"""sm numbers the CUDA and PTX renderers target: Turing (sm_75, the oldest NVRTC 13 compiles for) and newer."""


def architecture_number(arch: str) -> int:
    """75 for "sm_75"; ValueError for a name outside SUPPORTED_ARCHITECTURES."""
    digits = arch.removeprefix("sm_").removeprefix("compute_").rstrip("a")
    if not digits.isdigit() or int(digits) not in SUPPORTED_ARCHITECTURES:
        supported = ", ".join(f"sm_{n}" for n in SUPPORTED_ARCHITECTURES)
        raise ValueError(f"unsupported CUDA architecture {arch!r}; expected one of {supported}")
    return int(digits)


@functools.cache
def nvidia_target(arch: str) -> Target:
    """The NVIDIA GPU `arch` ("sm_80"): mma.sync tensor cores from sm_80 on; ValueError for an unsupported arch."""
    number = architecture_number(arch)
    return NVIDIA.for_architecture(f"sm_{number}", tensor_cores=TENSOR_CORES_SM80 if number >= 80 else ())


AMD_TARGETS: dict[str, Target] = {
    "gfx1100": AMD.for_architecture("gfx1100", tensor_cores=TENSOR_CORES_GFX1100),
    "gfx942": AMD.for_architecture("gfx942", tensor_cores=TENSOR_CORES_GFX942),
}
"""The AMD architectures: RDNA3 (gfx1100, WMMA in wave32) and CDNA3 (gfx942, MFMA in wave64)."""


def amd_target(arch: str) -> Target:
    """The AMD GPU `arch`; ValueError naming the supported ones otherwise."""
    target = AMD_TARGETS.get(arch)
    if target is None:
        raise ValueError(f"unsupported AMD architecture {arch!r}; expected one of {', '.join(AMD_TARGETS)}")
    return target


def metal_language_version(version: str) -> tuple[int, int]:
    """(3, 1) for "3.1"; ValueError for anything but a MSL version from 2.0 on."""
    parts = version.split(".")
    if len(parts) != 2 or not all(part.isdigit() for part in parts) or int(parts[0]) < 2:
        raise ValueError(f"Metal language version must look like '3.1' (2.0 or newer), got {version!r}")
    return int(parts[0]), int(parts[1])


@functools.cache
def metal_target(language_version: str) -> Target:
    """Apple GPUs programmed in MSL `language_version`: `bfloat` is native from MSL 3.1."""
    if metal_language_version(language_version) < (3, 1):
        return METAL
    emulated = LOW_PRECISION_FLOATS - {dtypes.bfloat16}
    return dataclasses.replace(
        METAL,
        name=f"METAL (MSL {language_version})",
        native_dtypes=ALL_DTYPES - emulated - {dtypes.float64},
        emulated_dtypes=emulated,
    )


# ---- renderers on a target ----------------------------------------------------------------------------------------


CompilerT = TypeVar("CompilerT", bound=Compiler)

WITHOUT_MATH_LIBRARY = GroupOp.ALU - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW}
"""The `native_ops` of a language that calls no math library: codegen decomposes EXP2, LOG2, SIN and POW."""


class TargetRenderer(Renderer, Generic[CompilerT]):
    """A renderer whose limits, dtypes and tensor cores are those of its `target`, and which owns a compiler of type
    `CompilerT`, made on first use (finding a toolchain may be slow, or fail: not at import, not before it is needed).

    A class names its Target in its class statement (`class R(TargetRenderer[RCompiler], target=CPU)`): the Renderer
    attributes come from it, except those the class body defines itself (a property that asks the compiler, say). An
    instance made for one architecture calls `use_target`.
    """

    target: Target = Target("NONE", "NONE")
    """The device rendered for; until a class names one, a record of codegen's `Renderer` defaults."""
    _compiler: CompilerT
    _compiler_made: bool = False

    @abstractmethod
    def make_compiler(self) -> CompilerT:
        """A new compiler for this renderer's programs (`compiler` makes it on first use)."""

    @property
    def compiler(self) -> CompilerT:
        """This renderer's compiler, made by `make_compiler` on first use (assignable: a test may swap it)."""
        if not self._compiler_made:
            self.compiler = self.make_compiler()
        return self._compiler

    @compiler.setter
    def compiler(self, compiler: CompilerT) -> None:
        self._compiler, self._compiler_made = compiler, True

    def __init_subclass__(cls, target: Target | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if target is None:
            return
        cls.target = target
        for attribute, value in {"device": target.device, **target.renderer_attributes()}.items():
            if attribute not in cls.__dict__:
                setattr(cls, attribute, value)

    def use_architecture(self, target: Target, device: str) -> None:
        """Render for `target`, one architecture of the class's Target (`use_target`), named in `arch`, for the
        device named `device`."""
        self.use_target(target)
        self.arch = target.architecture
        self.device = device

    def use_target(self, target: Target) -> None:
        """Render for `target` (this instance's architecture): where it differs from the class's Target, its
        attributes replace the class's."""
        before = type(self).target.renderer_attributes()
        self.target = target
        for attribute, value in target.renderer_attributes().items():
            if value != before[attribute]:
                setattr(self, attribute, value)


def tensor_core_of(renderer: Renderer, uop: UOp) -> TensorCore:
    """The tensor core of `renderer` a WMMA `uop` runs on (its `WmmaArg` names one of `renderer.tensor_cores`)."""
    for core in renderer.tensor_cores:
        if isinstance(uop.arg, WmmaArg) and uop.arg == core.wmma_arg():
            return core
    raise ValueError(f"{renderer!r} has no tensor core {uop.arg!r}; it has {renderer.tensor_cores}")
