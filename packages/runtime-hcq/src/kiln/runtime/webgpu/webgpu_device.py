"""`WebGPUDevice`: WebGPU through the `wgpu` package (wgpu-native: Vulkan, Metal or D3D12 underneath), kind "WEBGPU".

There is one WEBGPU device, on the adapter wgpu prefers (high performance); on a machine without a GPU, Mesa's
lavapipe (a Vulkan driver running on the CPU) serves. `wgpu` is an optional dependency
(`pip install 'kiln-runtime-hcq[webgpu]'`), imported when the device opens; without it, or without an adapter,
opening raises `DeviceUnavailable("WEBGPU unavailable: <reason>")`. Programs come from kiln.renderers'
`WGSLRenderer`, whose compiler validates the WGSL on the same wgpu device this one runs it on.
"""

from __future__ import annotations

from kiln.codegen import Program, Renderer
from kiln.renderers.toolchain import ToolchainNotFoundError
from kiln.renderers.webgpu_library import WebGPUTarget, load_wgpu, webgpu_target
from kiln.runtime.device import DeviceUnavailable, QueuedDevice, find_dtypes, find_renderers
from kiln.runtime.program_runner import ProgramRunner
from kiln.runtime.webgpu.webgpu_allocator import WebGPUAllocator
from kiln.runtime.webgpu.webgpu_runner import WebGPUProgramRunner
from kiln.runtime.webgpu.webgpu_timeline import WebGPUTimeline

__all__ = ["WebGPUDevice"]


class WebGPUDevice(QueuedDevice):
    """The WebGPU device: storage buffers, a queue whose submissions form a timeline, pipelines, dispatches.

    Args:
        name: "WEBGPU" (wgpu exposes one adapter to kiln).

    Attributes:
        target: the adapter, the device requested from it and their limits; timeline: the queue's submissions.
    """

    timeline: WebGPUTimeline
    renderer_family = "WEBGPU"

    def __init__(self, name: str) -> None:
        if name.partition(":")[2]:
            raise DeviceUnavailable(f"{name!r}: there is one WEBGPU device, named 'WEBGPU'")
        try:
            self.target: WebGPUTarget = webgpu_target()
        except ToolchainNotFoundError as error:
            raise DeviceUnavailable(f"WEBGPU unavailable: {error}") from error
        except Exception as error:  # a driver failing while the device is requested
            raise DeviceUnavailable(f"WEBGPU unavailable: {type(error).__name__}: {error}") from error
        wgpu = load_wgpu()
        gpu = self.target.device
        fence = gpu.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
        self.timeline = WebGPUTimeline(gpu.queue, fence, name)
        super().__init__(name, WebGPUAllocator(self, name))
        self.renderers = find_renderers("WEBGPU")
        self.supported_dtypes = find_dtypes("WEBGPU")

    @property
    def description(self) -> str:
        """ "<adapter> (<backend>, <adapter type>)", shown by `python -m kiln.runtime`."""
        return f"{self.target.adapter_name} ({self.target.backend}, {self.target.adapter_type})"

    def create_renderer(self, renderer_class: type[Renderer]) -> Renderer:
        """A WGSL renderer allowed as many storage buffers per kernel as the adapter binds."""
        return renderer_class(device=self.name, max_storage_buffers=self.target.max_storage_buffers)  # type: ignore[call-arg]

    def load_program(self, program: Program) -> ProgramRunner:
        """Builds the program's WGSL into a compute pipeline on this device."""
        return WebGPUProgramRunner(self, program)
