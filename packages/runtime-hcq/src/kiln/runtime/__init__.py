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
from kiln.runtime.device import (
    BUILTIN_DEVICES,
    ENTRY_POINT_GROUP,
    Device,
    DeviceBase,
    DeviceKind,
    DeviceRegistry,
    DeviceUnavailable,
)
from kiln.runtime.hcq import HCQCompiled
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
from kiln.runtime.profile import ProfileEvent, Profiler, profiler
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
    "CopyCommand",
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
    "HCQQueue",
    "HostAllocator",
    "HostMemory",
    "KernelArgLayout",
    "LRUAllocator",
    "MappingError",
    "MemoryBarrierCommand",
    "MemoryManager",
    "OutOfMemoryError",
    "PageTableFormat",
    "PhysicalMemory",
    "ProfileEvent",
    "Profiler",
    "QueueTarget",
    "ReferencePageTableFormat",
    "SignalCommand",
    "SoftwareKernel",
    "SparseMemory",
    "TLSFAllocator",
    "ThreadQueueEngine",
    "TimelineSignal",
    "TimestampCommand",
    "VirtMapping",
    "WaitCommand",
    "copy_between",
    "numpy_dtype",
    "profiler",
]
