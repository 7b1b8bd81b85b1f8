"""Devices, buffers, allocators, HCQ queues/signals, CPU/PYTHON/CUDA devices, generic memory managers."""

from kiln.runtime.allocator import Allocator, BufferSpec, LRUAllocator, OutOfMemoryError
from kiln.runtime.buffer import Buffer, copy_between, numpy_dtype
from kiln.runtime.command_queue import (
    CopyCommand,
    ExecCommand,
    HCQCommand,
    HCQQueue,
    MemoryBarrierCommand,
    QueueTarget,
    SignalCommand,
    TimestampCommand,
    WaitCommand,
)
from kiln.runtime.core_pool import CorePool
from kiln.runtime.cpu_device import CPUDevice, CPUProgramRunner
from kiln.runtime.device import (
    BUILTIN_DEVICES,
    ENTRY_POINT_GROUP,
    Device,
    DeviceBase,
    DeviceKind,
    DeviceRegistry,
    DeviceUnavailable,
    find_dtypes,
    find_renderers,
)
from kiln.runtime.hcq import HCQCompiled
from kiln.runtime.hcq_runner import HCQProgramRunner
from kiln.runtime.host_allocator import HostAllocator, HostMemory
from kiln.runtime.kernel_args import ArgKind, HCQArgsState, KernelArgLayout
from kiln.runtime.memory import (
    AddrSpace,
    DecodedEntry,
    MappingError,
    MemoryManager,
    PageTableFormat,
    PhysicalMemory,
    ReferencePageTableFormat,
    SparseMemory,
    TLSFAllocator,
    VirtMapping,
)
from kiln.runtime.native_kernel import NativeKernel
from kiln.runtime.profile import ProfileEvent, Profiler, profiler
from kiln.runtime.program_runner import ProgramRunner, VariableSpec
from kiln.runtime.python_device import InterpretedRunner, PythonDevice
from kiln.runtime.signal import TimelineSignal
from kiln.runtime.thread_engine import EngineClosed, SoftwareKernel, ThreadQueueEngine

__all__ = [
    "BUILTIN_DEVICES",
    "ENTRY_POINT_GROUP",
    "AddrSpace",
    "Allocator",
    "ArgKind",
    "Buffer",
    "BufferSpec",
    "CPUDevice",
    "CPUProgramRunner",
    "CopyCommand",
    "CorePool",
    "DecodedEntry",
    "Device",
    "DeviceBase",
    "DeviceKind",
    "DeviceRegistry",
    "DeviceUnavailable",
    "EngineClosed",
    "ExecCommand",
    "HCQArgsState",
    "HCQCommand",
    "HCQCompiled",
    "HCQProgramRunner",
    "HCQQueue",
    "HostAllocator",
    "HostMemory",
    "InterpretedRunner",
    "KernelArgLayout",
    "LRUAllocator",
    "MappingError",
    "MemoryBarrierCommand",
    "MemoryManager",
    "NativeKernel",
    "OutOfMemoryError",
    "PageTableFormat",
    "PhysicalMemory",
    "ProfileEvent",
    "Profiler",
    "ProgramRunner",
    "PythonDevice",
    "QueueTarget",
    "ReferencePageTableFormat",
    "SignalCommand",
    "SoftwareKernel",
    "SparseMemory",
    "TLSFAllocator",
    "ThreadQueueEngine",
    "TimelineSignal",
    "TimestampCommand",
    "VariableSpec",
    "VirtMapping",
    "WaitCommand",
    "copy_between",
    "find_dtypes",
    "find_renderers",
    "numpy_dtype",
    "profiler",
]
