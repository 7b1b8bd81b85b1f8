"""A ctypes binding of the OpenCL C API (the ICD loader `libOpenCL.so.1`): platforms, devices, contexts, programs.

Shared by the OpenCL renderer's compiler (program builds) and the runtime's CL device (queues, buffers, kernels), so
both use one context per OpenCL device and a binary built by the compiler loads on the device that runs it. The
library is loaded on first use, never at import; a machine without it, or without any OpenCL platform, raises
`OpenCLNotFoundError` naming what to install. Constants and signatures follow Khronos' `CL/cl.h` (OpenCL 1.2).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

from kiln.renderers.process_once import ProcessOnce
from kiln.renderers.toolchain import ToolchainNotFoundError

LIBRARY_NAMES = ("libOpenCL.so.1", "libOpenCL.so", "OpenCL.dll", "/System/Library/Frameworks/OpenCL.framework/OpenCL")
INSTALL_HINT = "install an OpenCL platform, e.g. `apt install ocl-icd-libopencl1 pocl-opencl-icd` (PoCL, CPU)"

# cl.h values (OpenCL 1.2)
CL_SUCCESS = 0
CL_DEVICE_NOT_FOUND = -1
CL_BUILD_PROGRAM_FAILURE = -11
CL_PLATFORM_NOT_FOUND_KHR = -1001
CL_PLATFORM_NAME = 0x0902
CL_PLATFORM_VERSION = 0x0901
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002
CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1005
CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004
CL_DEVICE_LOCAL_MEM_SIZE = 0x1023
CL_DEVICE_NAME = 0x102B
CL_DEVICE_VERSION = 0x102F
CL_DRIVER_VERSION = 0x102D
CL_DEVICE_EXTENSIONS = 0x1030
CL_DEVICE_MEM_BASE_ADDR_ALIGN = 0x1019
CL_PROGRAM_BUILD_LOG = 0x1183
CL_PROGRAM_BINARY_SIZES = 0x1165
CL_PROGRAM_BINARIES = 0x1166
CL_QUEUE_PROFILING_ENABLE = 1 << 1
CL_MEM_READ_WRITE = 1 << 0
CL_BUFFER_CREATE_TYPE_REGION = 0x1220
CL_PROFILING_COMMAND_START = 0x1282
CL_PROFILING_COMMAND_END = 0x1283
CL_EVENT_COMMAND_EXECUTION_STATUS = 0x11D3
CL_COMPLETE = 0
CL_MEM_OBJECT_ALLOCATION_FAILURE = -4
CL_OUT_OF_RESOURCES = -5
CL_OUT_OF_HOST_MEMORY = -6

_ERROR_NAMES = {
    -1: "CL_DEVICE_NOT_FOUND",
    -2: "CL_DEVICE_NOT_AVAILABLE",
    -3: "CL_COMPILER_NOT_AVAILABLE",
    -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE",
    -5: "CL_OUT_OF_RESOURCES",
    -6: "CL_OUT_OF_HOST_MEMORY",
    -11: "CL_BUILD_PROGRAM_FAILURE",
    -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET",
    -30: "CL_INVALID_VALUE",
    -33: "CL_INVALID_DEVICE",
    -34: "CL_INVALID_CONTEXT",
    -36: "CL_INVALID_COMMAND_QUEUE",
    -38: "CL_INVALID_MEM_OBJECT",
    -42: "CL_INVALID_BINARY",
    -43: "CL_INVALID_BUILD_OPTIONS",
    -44: "CL_INVALID_PROGRAM",
    -46: "CL_INVALID_KERNEL_NAME",
    -48: "CL_INVALID_KERNEL",
    -49: "CL_INVALID_ARG_INDEX",
    -50: "CL_INVALID_ARG_VALUE",
    -51: "CL_INVALID_ARG_SIZE",
    -52: "CL_INVALID_KERNEL_ARGS",
    -54: "CL_INVALID_WORK_GROUP_SIZE",
    -55: "CL_INVALID_WORK_ITEM_SIZE",
    -61: "CL_INVALID_BUFFER_SIZE",
    -1001: "CL_PLATFORM_NOT_FOUND_KHR",
}

_size = ctypes.c_size_t
_int = ctypes.c_int32
_uint = ctypes.c_uint32
_ulong = ctypes.c_uint64
_pointer = ctypes.c_void_p  # also every handle (cl_platform_id, cl_context, cl_mem ...): an opaque pointer
_int_pointer = ctypes.POINTER(ctypes.c_int32)

# name -> (result type, argument types), as in cl.h
_SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "clGetPlatformIDs": (_int, (_uint, _pointer, ctypes.POINTER(_uint))),
    "clGetPlatformInfo": (_int, (_pointer, _uint, _size, _pointer, ctypes.POINTER(_size))),
    "clGetDeviceIDs": (_int, (_pointer, _ulong, _uint, _pointer, ctypes.POINTER(_uint))),
    "clGetDeviceInfo": (_int, (_pointer, _uint, _size, _pointer, ctypes.POINTER(_size))),
    "clCreateContext": (_pointer, (_pointer, _uint, _pointer, _pointer, _pointer, _int_pointer)),
    "clCreateCommandQueue": (_pointer, (_pointer, _pointer, _ulong, _int_pointer)),
    "clCreateProgramWithSource": (_pointer, (_pointer, _uint, _pointer, _pointer, _int_pointer)),
    "clCreateProgramWithBinary": (
        _pointer,
        (_pointer, _uint, _pointer, _pointer, _pointer, _int_pointer, _int_pointer),
    ),
    "clBuildProgram": (_int, (_pointer, _uint, _pointer, ctypes.c_char_p, _pointer, _pointer)),
    "clGetProgramBuildInfo": (_int, (_pointer, _pointer, _uint, _size, _pointer, ctypes.POINTER(_size))),
    "clGetProgramInfo": (_int, (_pointer, _uint, _size, _pointer, ctypes.POINTER(_size))),
    "clReleaseProgram": (_int, (_pointer,)),
    "clCreateKernel": (_pointer, (_pointer, ctypes.c_char_p, _int_pointer)),
    "clSetKernelArg": (_int, (_pointer, _uint, _size, _pointer)),
    "clReleaseKernel": (_int, (_pointer,)),
    "clEnqueueNDRangeKernel": (
        _int,
        (_pointer, _pointer, _uint, _pointer, _pointer, _pointer, _uint, _pointer, _pointer),
    ),
    "clCreateBuffer": (_pointer, (_pointer, _ulong, _size, _pointer, _int_pointer)),
    "clCreateSubBuffer": (_pointer, (_pointer, _ulong, _uint, _pointer, _int_pointer)),
    "clReleaseMemObject": (_int, (_pointer,)),
    "clEnqueueWriteBuffer": (_int, (_pointer, _pointer, _uint, _size, _size, _pointer, _uint, _pointer, _pointer)),
    "clEnqueueReadBuffer": (_int, (_pointer, _pointer, _uint, _size, _size, _pointer, _uint, _pointer, _pointer)),
    "clEnqueueCopyBuffer": (_int, (_pointer, _pointer, _pointer, _size, _size, _size, _uint, _pointer, _pointer)),
    "clEnqueueMarkerWithWaitList": (_int, (_pointer, _uint, _pointer, _pointer)),
    "clWaitForEvents": (_int, (_uint, _pointer)),
    "clGetEventInfo": (_int, (_pointer, _uint, _size, _pointer, ctypes.POINTER(_size))),
    "clGetEventProfilingInfo": (_int, (_pointer, _uint, _size, _pointer, ctypes.POINTER(_size))),
    "clReleaseEvent": (_int, (_pointer,)),
    "clFlush": (_int, (_pointer,)),
    "clFinish": (_int, (_pointer,)),
    "clReleaseCommandQueue": (_int, (_pointer,)),
}


class OpenCLNotFoundError(ToolchainNotFoundError):
    """No OpenCL ICD loader, or no platform / device behind it; the message says what to install."""


class OpenCLError(RuntimeError):
    """An OpenCL call failed; `code` is its cl.h error code (the message names it)."""

    def __init__(self, code: int, what: str, log: str = "") -> None:
        self.code = code
        name = _ERROR_NAMES.get(code, "unknown error")
        super().__init__(f"{what}: {name} ({code})" + (f"\n{log}" if log else ""))


class OpenCLLibrary:
    """The loaded ICD loader: every function of `_SIGNATURES` typed, plus checked helpers."""

    def __init__(self, library: ctypes.CDLL, path: str) -> None:
        self.path = path
        self.functions: dict[str, Any] = {}
        for name, (result, arguments) in _SIGNATURES.items():
            function = getattr(library, name)
            function.restype, function.argtypes = result, list(arguments)
            self.functions[name] = function

    def call(self, name: str, *arguments: Any, what: str = "") -> None:
        """Calls a function returning a cl_int status; OpenCLError naming `what` unless it is CL_SUCCESS."""
        status = self.functions[name](*arguments)
        if status != CL_SUCCESS:
            raise OpenCLError(status, f"{name}" + (f" ({what})" if what else ""))

    def create(self, name: str, *arguments: Any, what: str = "") -> int:
        """Calls a clCreate* function (its last argument the status out-parameter); returns the new handle."""
        status = ctypes.c_int32(0)
        handle = self.functions[name](*arguments, ctypes.byref(status))
        if status.value != CL_SUCCESS or not handle:
            raise OpenCLError(status.value or -30, f"{name}" + (f" ({what})" if what else ""))
        return int(handle)

    def info_bytes(self, getter: str, handle: int, parameter: int) -> bytes:
        """The raw value of one clGet*Info query."""
        size = ctypes.c_size_t(0)
        self.call(getter, handle, parameter, 0, None, ctypes.byref(size), what=f"size of info {parameter:#x}")
        value = ctypes.create_string_buffer(size.value)
        self.call(getter, handle, parameter, size.value, value, None, what=f"info {parameter:#x}")
        return value.raw

    def info_text(self, getter: str, handle: int, parameter: int) -> str:
        """A string-valued clGet*Info query."""
        return self.info_bytes(getter, handle, parameter).rstrip(b"\0").decode(errors="replace").strip()

    def info_int(self, getter: str, handle: int, parameter: int) -> int:
        """An integer-valued clGet*Info query (cl_uint, cl_ulong or size_t, little-endian)."""
        return int.from_bytes(self.info_bytes(getter, handle, parameter), "little")

    def build_log(self, program: int, device: int) -> str:
        """The build log of `program` for `device` (clGetProgramBuildInfo)."""
        size = ctypes.c_size_t(0)
        self.call("clGetProgramBuildInfo", program, device, CL_PROGRAM_BUILD_LOG, 0, None, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        self.call("clGetProgramBuildInfo", program, device, CL_PROGRAM_BUILD_LOG, size.value, log, None)
        return log.value.decode(errors="replace").strip()

    def handles(self, getter: str, *arguments: Any) -> list[int]:
        """The handles a clGet*IDs call returns (an empty list for CL_DEVICE_NOT_FOUND / no platform)."""
        count = ctypes.c_uint32(0)
        status = self.functions[getter](*arguments, 0, None, ctypes.byref(count))
        if status in (CL_DEVICE_NOT_FOUND, CL_PLATFORM_NOT_FOUND_KHR) or count.value == 0:
            return []
        if status != CL_SUCCESS:
            raise OpenCLError(status, getter)
        found = (ctypes.c_void_p * count.value)()
        self.call(getter, *arguments, count.value, found, None)
        return [int(handle or 0) for handle in found]


@functools.cache
def load_opencl() -> OpenCLLibrary:
    """The process's OpenCL ICD loader (OpenCLNotFoundError naming what to install when there is none)."""
    errors = []
    for name in LIBRARY_NAMES:
        try:
            return OpenCLLibrary(ctypes.CDLL(name), name)
        except (OSError, AttributeError) as error:
            errors.append(f"{name}: {error}")
    raise OpenCLNotFoundError(f"no OpenCL library could be loaded ({'; '.join(errors)}); {INSTALL_HINT}")


@dataclass(frozen=True)
class OpenCLTarget:
    """One OpenCL device with its context: what the compiler builds for and the runtime runs on.

    Attributes:
        index: position in `opencl_targets()` (the device "CL:<index>").
        platform_name, device_name, device_version, driver_version: as the platform reports them.
        platform, device, context: the cl_platform_id, cl_device_id and cl_context handles.
    """

    index: int
    platform_name: str
    device_name: str
    device_version: str
    driver_version: str
    extensions: frozenset[str]
    platform: int
    device: int
    context: int

    @property
    def identity(self) -> str:
        """Platform, device and driver: what a binary is specific to (part of the compile-cache key)."""
        return f"{self.platform_name} / {self.device_name} / {self.device_version} / driver {self.driver_version}"

    def info_int(self, parameter: int) -> int:
        """An integer property of the device (clGetDeviceInfo)."""
        return load_opencl().info_int("clGetDeviceInfo", self.device, parameter)


@ProcessOnce
def opencl_targets() -> list[OpenCLTarget]:
    """Every device of every OpenCL platform, each with one context (created once per process); [] if none."""
    library = load_opencl()
    targets: list[OpenCLTarget] = []
    for platform in library.handles("clGetPlatformIDs"):
        platform_name = library.info_text("clGetPlatformInfo", platform, CL_PLATFORM_NAME)
        for device in library.handles("clGetDeviceIDs", platform, CL_DEVICE_TYPE_ALL):
            handle = ctypes.c_void_p(device)
            context = library.create("clCreateContext", None, 1, ctypes.byref(handle), None, None, what="context")

            def text(parameter: int, device: int = device) -> str:
                return library.info_text("clGetDeviceInfo", device, parameter)

            extensions = frozenset(text(CL_DEVICE_EXTENSIONS).split())
            targets.append(
                OpenCLTarget(
                    len(targets),
                    platform_name,
                    text(CL_DEVICE_NAME),
                    text(CL_DEVICE_VERSION),
                    text(CL_DRIVER_VERSION),
                    extensions,
                    platform,
                    device,
                    context,
                )
            )
    return targets


def opencl_target(index: int = 0) -> OpenCLTarget:
    """OpenCL device number `index` (over all platforms); OpenCLNotFoundError when there is no such device."""
    targets = opencl_targets()
    if not targets:
        raise OpenCLNotFoundError(f"the OpenCL library loads but reports no platform with a device; {INSTALL_HINT}")
    if not 0 <= index < len(targets):
        names = ", ".join(f"{t.index}: {t.device_name}" for t in targets)
        raise OpenCLNotFoundError(f"there is no OpenCL device {index}; the devices are {names}")
    return targets[index]


def opencl_available() -> bool:
    """Whether an OpenCL library with at least one device loads here (never raises)."""
    try:
        return bool(opencl_targets())
    except (ToolchainNotFoundError, OpenCLError):
        return False
