"""`CLDevice`: an OpenCL device through the OpenCL C API (ctypes over the ICD loader `libOpenCL.so.1`), kind "CL".

"CL" is the first device of the first OpenCL platform, "CL:1" the next one (counting over all platforms, in the
order `clinfo -l` lists them). The device keeps one in-order command queue with profiling on; every command's
event is recorded in a `CLTimeline`, the device's timeline signal. Opening one where no OpenCL library or platform
exists raises `DeviceUnavailable` saying what to install. Programs come from kiln.renderers' `OpenCLRenderer`,
whose compiler (the platform's own program build) produces the binary this device reloads.

Why ctypes and not pyopencl: the runtime needs a dozen entry points (buffers, one queue, programs from binaries,
kernel arguments, events); binding them directly keeps kiln free of a compiled extension (pyopencl builds against
the OpenCL headers and pins numpy ABI versions), gives the same ICD loader the CUDA device's style of driver-API
binding, and lets the renderer's compiler and the device share one context per OpenCL device.
"""

from __future__ import annotations

from kiln.codegen import Program, Renderer
from kiln.renderers.opencl_library import (
    CL_QUEUE_PROFILING_ENABLE,
    OpenCLError,
    OpenCLLibrary,
    OpenCLTarget,
    load_opencl,
    opencl_target,
)
from kiln.renderers.toolchain import ToolchainNotFoundError
from kiln.runtime.device import DeviceUnavailable, QueuedDevice, find_dtypes, find_renderers
from kiln.runtime.opencl.cl_allocator import CLAllocator
from kiln.runtime.opencl.cl_runner import CLProgramRunner
from kiln.runtime.opencl.cl_timeline import CLTimeline
from kiln.runtime.program_runner import ProgramRunner
from kiln.uops import dtypes

__all__ = ["CLDevice"]


class CLDevice(QueuedDevice):
    """One OpenCL device: buffers, an in-order queue whose events form a timeline, program loading, launches.

    Args:
        name: "CL" (device 0) or "CL:<index>".

    Attributes:
        index: the device's number over all platforms; target: its platform/device names, handles and context;
        queue: the cl_command_queue; timeline: the queue's events as a timeline signal.
    """

    timeline: CLTimeline
    renderer_family = "CL"

    def __init__(self, name: str) -> None:
        _, _, suffix = name.partition(":")
        if suffix and not suffix.isdigit():
            raise DeviceUnavailable(f"{name!r}: CL devices are numbered (CL, CL:1, ...), got suffix {suffix!r}")
        self.index = int(suffix or 0)
        try:
            self.library: OpenCLLibrary = load_opencl()
            self.target: OpenCLTarget = opencl_target(self.index)
        except (ToolchainNotFoundError, OpenCLError) as error:
            raise DeviceUnavailable(f"CL: {error}") from error
        self.queue = self.library.create(
            "clCreateCommandQueue", self.target.context, self.target.device, CL_QUEUE_PROFILING_ENABLE, what=name
        )
        self.timeline = CLTimeline(self.library, self.queue, name)
        super().__init__(name, CLAllocator(self, name))
        self.renderers = find_renderers("CL")
        stored = find_dtypes("CL")
        if "cl_khr_fp64" not in self.target.extensions:
            stored = stored - {dtypes.float64}
        self.supported_dtypes = stored

    @property
    def description(self) -> str:
        """ "<platform> / <device> (<OpenCL version>)", shown by `python -m kiln.runtime`."""
        return f"{self.target.platform_name} / {self.target.device_name} ({self.target.device_version})"

    def create_renderer(self, renderer_class: type[Renderer]) -> Renderer:
        """An OpenCL renderer building for this device (its index over all platforms)."""
        return renderer_class(device_index=self.index, device=self.name)  # type: ignore[call-arg]

    def load_program(self, program: Program) -> ProgramRunner:
        """Reloads the program's binary on this device."""
        return CLProgramRunner(self, program)

    def __del__(self) -> None:
        queue = getattr(self, "queue", None)
        if queue:
            try:
                self.timeline.wait()
                self.timeline.release()
                self.library.call("clReleaseCommandQueue", queue)
            except Exception:  # at interpreter exit the platform may already be gone
                return
