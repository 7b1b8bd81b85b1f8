"""The WEBGPU device: WebGPU through the `wgpu` package (an optional dependency), programs from kiln.renderers'
WGSLRenderer."""

from kiln.runtime.webgpu.webgpu_allocator import WebGPUAllocator, WebGPUMemory
from kiln.runtime.webgpu.webgpu_device import WebGPUDevice
from kiln.runtime.webgpu.webgpu_runner import WebGPUProgramRunner
from kiln.runtime.webgpu.webgpu_timeline import WebGPUTimeline

__all__ = ["WebGPUAllocator", "WebGPUDevice", "WebGPUMemory", "WebGPUProgramRunner", "WebGPUTimeline"]
