"""The CL device: OpenCL via the C API (ctypes over the ICD loader), programs from kiln.renderers' OpenCLRenderer."""

from kiln.runtime.opencl.cl_allocator import CLAllocator, CLMemory
from kiln.runtime.opencl.cl_device import CLDevice
from kiln.runtime.opencl.cl_runner import CLProgramRunner
from kiln.runtime.opencl.cl_timeline import CLTimeline

__all__ = ["CLAllocator", "CLDevice", "CLMemory", "CLProgramRunner", "CLTimeline"]
