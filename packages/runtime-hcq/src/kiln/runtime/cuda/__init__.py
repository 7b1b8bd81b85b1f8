"""The CUDA device: NVIDIA GPUs through the CUDA driver API (libcuda.so via ctypes); no toolkit needed to run."""

from kiln.runtime.cuda.context import CUDAContext, LaunchTimer
from kiln.runtime.cuda.cuda_allocator import CUDAAllocator
from kiln.runtime.cuda.cuda_device import CUDADevice
from kiln.runtime.cuda.cuda_graph import CUDAGraphBatch, graph_device
from kiln.runtime.cuda.cuda_runner import CUDAProgramRunner
from kiln.runtime.cuda.driver_api import CUDAError, DeviceAttribute, DriverAPI, load_driver_library

__all__ = [
    "CUDAAllocator",
    "CUDADevice",
    "CUDAError",
    "CUDAGraphBatch",
    "CUDAProgramRunner",
    "DeviceAttribute",
    "DriverAPI",
    "CUDAContext",
    "LaunchTimer",
    "graph_device",
    "load_driver_library",
]
