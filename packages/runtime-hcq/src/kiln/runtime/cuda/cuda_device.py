"""`CUDADevice`: an NVIDIA GPU reached through the CUDA driver API (`libcuda.so`), the device kind "CUDA".

"CUDA" is GPU 0, "CUDA:1" GPU 1 ... Each device uses its GPU's primary context. Opening one where there is no
NVIDIA driver or no GPU raises `DeviceUnavailable` saying which. Programs come from kiln.renderers' `CUDARenderer`
(CUDA C compiled by NVRTC) or `PTXRenderer`, looked up by name when the device opens; `CUDA_RENDERER=ptx` picks the
second.
"""

from __future__ import annotations

import ctypes
import inspect

from kiln.codegen import Program, Renderer
from kiln.renderers import ProcessOnce
from kiln.runtime.cuda.context import LaunchTimer
from kiln.runtime.cuda.cuda_allocator import CUDAAllocator
from kiln.runtime.cuda.cuda_runner import CUDAProgramRunner
from kiln.runtime.cuda.driver_api import (
    CUDA_ERROR_NO_DEVICE,
    CUDAError,
    DeviceAttribute,
    DriverAPI,
    load_driver_library,
)
from kiln.runtime.device import DeviceBase, DeviceUnavailable, find_renderers
from kiln.runtime.program_runner import ProgramRunner

__all__ = ["CUDADevice", "LaunchTimer", "shared_driver"]


@ProcessOnce
def shared_driver() -> DriverAPI:
    """The process's libcuda, loaded and initialized (`cuInit`) once; DeviceUnavailable when there is none."""
    try:
        api = DriverAPI(load_driver_library())
    except OSError as error:
        raise DeviceUnavailable(f"CUDA: {error}; CUDA devices need an NVIDIA GPU and its driver") from error
    initialize(api)
    return api


def initialize(api: DriverAPI) -> None:
    """`cuInit(0)`, turning "no GPU" and other failures into DeviceUnavailable."""
    try:
        api.call("cuInit", 0)
    except CUDAError as error:
        if error.code == CUDA_ERROR_NO_DEVICE:
            raise DeviceUnavailable(f"CUDA: the NVIDIA driver is installed but finds no GPU ({error})") from error
        raise DeviceUnavailable(f"CUDA: the driver failed to initialize: {error}") from error


class CUDADevice(DeviceBase):
    """One NVIDIA GPU through the CUDA driver API: device memory, copies, module loading, launches, event timing.

    Args:
        name: "CUDA" (GPU 0) or "CUDA:<ordinal>".
        api: the driver to use (tests pass one over a fake library); default: the process's libcuda.

    Attributes:
        ordinal: the GPU number; arch: "sm_<major><minor>"; gpu_name: the driver's name of the GPU.
    """

    renderer_family = "CUDA"

    def __init__(self, name: str, api: DriverAPI | None = None) -> None:
        _, _, suffix = name.partition(":")
        if suffix and not suffix.isdigit():
            raise DeviceUnavailable(f"{name!r}: CUDA devices are numbered (CUDA, CUDA:1, ...), got suffix {suffix!r}")
        self.ordinal = int(suffix or 0)
        self.api = api if api is not None else shared_driver()
        count = self.api.get_int("cuDeviceGetCount")
        if self.ordinal >= count:
            raise DeviceUnavailable(f"{name!r}: the driver sees {count} CUDA GPU(s), so there is no GPU {self.ordinal}")
        self.handle = self.api.get_int("cuDeviceGet", self.ordinal)
        self.context = self.api.get_handle("cuDevicePrimaryCtxRetain", self.handle, context=name)
        major = self.api.device_attribute(DeviceAttribute.COMPUTE_CAPABILITY_MAJOR, self.handle)
        minor = self.api.device_attribute(DeviceAttribute.COMPUTE_CAPABILITY_MINOR, self.handle)
        self.arch = f"sm_{major}{minor}"
        raw_name = ctypes.create_string_buffer(256)
        self.api.call("cuDeviceGetName", raw_name, len(raw_name), self.handle)
        self.gpu_name = raw_name.value.decode(errors="replace")
        super().__init__(name, CUDAAllocator(self, name))
        self.renderers = find_renderers("CUDA")
        self._timer: LaunchTimer | None = None

    def __repr__(self) -> str:
        return f"<CUDADevice {self.name} ({self.gpu_name}, {self.arch})>"

    def make_current(self) -> None:
        """Makes this GPU's context current on the calling thread (every driver call acts on the current one)."""
        self.api.call("cuCtxSetCurrent", self.context)

    def synchronize(self) -> None:
        """Waits for every kernel and copy queued on the GPU."""
        self.make_current()
        self.api.call("cuCtxSynchronize", context=f"synchronizing {self.name}")

    def launch_timer(self) -> LaunchTimer:
        """The device's pair of timing events (created on first use)."""
        if self._timer is None:
            self._timer = LaunchTimer(self)
        return self._timer

    def create_renderer(self, renderer_class: type[Renderer]) -> Renderer:
        """Builds a CUDA renderer for this GPU's architecture (passed as `arch` when the renderer takes one)."""
        parameters = inspect.signature(renderer_class).parameters
        if "arch" in parameters:
            return renderer_class(arch=self.arch)  # type: ignore[call-arg]
        return renderer_class()

    def load_program(self, program: Program) -> ProgramRunner:
        """Loads the program's cubin/PTX as a module of this GPU."""
        return CUDAProgramRunner(self, program)
