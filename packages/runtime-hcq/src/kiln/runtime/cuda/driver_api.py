"""The CUDA driver API (`libcuda.so`) through ctypes: the functions the CUDA device uses, with checked results.

Only the driver library is needed (it ships with the NVIDIA driver); no toolkit, no runtime library. Function
signatures follow `cuda.h` of the CUDA driver API; versioned symbols (`cuMemAlloc_v2` ...) are the 64-bit ones every
driver since CUDA 3.2 exports. Each call returns a `CUresult`; a non-zero one raises `CUDAError` naming the function,
the error's name (`CUDA_ERROR_OUT_OF_MEMORY`) and the driver's description.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "CUDAError",
    "DeviceAttribute",
    "DriverAPI",
    "JitOption",
    "kernel_parameters",
    "load_driver_library",
]

# cuda.h CUresult values the device treats specially.
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_NOT_FOUND = 500


class DeviceAttribute(enum.IntEnum):
    """`CUdevice_attribute` values (cuda.h) the device reads."""

    MAX_THREADS_PER_BLOCK = 1
    MAX_BLOCK_DIM_X = 2
    MAX_BLOCK_DIM_Y = 3
    MAX_BLOCK_DIM_Z = 4
    MAX_GRID_DIM_X = 5
    MAX_GRID_DIM_Y = 6
    MAX_GRID_DIM_Z = 7
    MAX_SHARED_MEMORY_PER_BLOCK = 8
    MULTIPROCESSOR_COUNT = 16
    COMPUTE_CAPABILITY_MAJOR = 75
    COMPUTE_CAPABILITY_MINOR = 76


class JitOption(enum.IntEnum):
    """`CUjit_option` values (cuda.h) used to collect the PTX JIT's logs in `cuModuleLoadDataEx`."""

    INFO_LOG_BUFFER = 3
    INFO_LOG_BUFFER_SIZE_BYTES = 4
    ERROR_LOG_BUFFER = 5
    ERROR_LOG_BUFFER_SIZE_BYTES = 6


class CUDAError(RuntimeError):
    """A CUDA driver call failed.

    Attributes:
        function: the driver function ("cuMemAlloc_v2").
        code: the CUresult value.
        error_name: its name ("CUDA_ERROR_OUT_OF_MEMORY"), or "CUresult <code>" if the driver does not know it.
    """

    def __init__(self, function: str, code: int, error_name: str, description: str, context: str = "") -> None:
        self.function = function
        self.code = code
        self.error_name = error_name
        where = f" ({context})" if context else ""
        super().__init__(f"{function} failed{where}: {error_name} ({code}): {description}")


_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_void_pp = ctypes.POINTER(ctypes.c_void_p)

# Name -> argument types, from cuda.h. CUdevice is an int, CUdeviceptr a 64-bit unsigned int, handles are pointers.
_PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "cuInit": (ctypes.c_uint,),
    "cuDriverGetVersion": (_c_int_p,),
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuGetErrorString": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuDeviceGetCount": (_c_int_p,),
    "cuDeviceGet": (_c_int_p, ctypes.c_int),
    "cuDeviceGetName": (ctypes.c_char_p, ctypes.c_int, ctypes.c_int),
    "cuDeviceGetAttribute": (_c_int_p, ctypes.c_int, ctypes.c_int),
    "cuDeviceTotalMem_v2": (ctypes.POINTER(ctypes.c_size_t), ctypes.c_int),
    "cuDevicePrimaryCtxRetain": (_c_void_pp, ctypes.c_int),
    "cuDevicePrimaryCtxRelease_v2": (ctypes.c_int,),
    "cuCtxSetCurrent": (ctypes.c_void_p,),
    "cuCtxSynchronize": (),
    "cuCtxEnablePeerAccess": (ctypes.c_void_p, ctypes.c_uint),
    "cuMemAlloc_v2": (ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t),
    "cuMemFree_v2": (ctypes.c_uint64,),
    "cuMemcpyHtoD_v2": (ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t),
    "cuMemcpyDtoH_v2": (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t),
    "cuMemcpyDtoD_v2": (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t),
    "cuMemcpyPeer": (ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t),
    "cuModuleLoadDataEx": (_c_void_pp, ctypes.c_void_p, ctypes.c_uint, _c_int_p, _c_void_pp),
    "cuModuleUnload": (ctypes.c_void_p,),
    "cuModuleGetFunction": (_c_void_pp, ctypes.c_void_p, ctypes.c_char_p),
    "cuLaunchKernel": (
        ctypes.c_void_p,
        *(ctypes.c_uint,) * 6,
        ctypes.c_uint,
        ctypes.c_void_p,
        _c_void_pp,
        _c_void_pp,
    ),
    "cuEventCreate": (_c_void_pp, ctypes.c_uint),
    "cuEventRecord": (ctypes.c_void_p, ctypes.c_void_p),
    "cuEventSynchronize": (ctypes.c_void_p,),
    "cuEventElapsedTime": (ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p),
    "cuEventDestroy_v2": (ctypes.c_void_p,),
}

# CUDA 12.8 added cuEventElapsedTime_v2 (same signature, relaxed checks) and CUDA 13's cuda.h maps the plain name to
# it; older drivers only export the plain one.
_ALTERNATIVES = {"cuEventElapsedTime": ("cuEventElapsedTime_v2", "cuEventElapsedTime")}


def load_driver_library(path: str | None = None) -> ctypes.CDLL:
    """Opens libcuda; raises OSError naming what was tried when no NVIDIA driver library is installed."""
    candidates = [path] if path else [ctypes.util.find_library("cuda"), "libcuda.so.1", "libcuda.so"]
    errors = []
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return ctypes.CDLL(candidate)
        except OSError as error:
            errors.append(f"{candidate}: {error}")
    raise OSError("the NVIDIA driver library libcuda.so is not installed or not loadable (" + "; ".join(errors) + ")")


class DriverAPI:
    """The driver functions of one loaded `libcuda`, callable by name with checked results.

    `api.call("cuMemAlloc_v2", ctypes.byref(pointer), size)` calls the function and raises `CUDAError` on a
    non-zero CUresult. Args:
        library: the loaded library (`load_driver_library()`), or any object with the same functions as attributes
            (tests pass a fake driver written in Python).
    """

    def __init__(self, library: Any) -> None:
        self.library = library
        self._functions: dict[str, Callable[..., int]] = {}
        for name, argtypes in _PROTOTYPES.items():
            function = self._lookup(name)
            if isinstance(self.library, ctypes.CDLL):  # a real library: declare the C signature
                function.argtypes = list(argtypes)  # type: ignore[attr-defined]
                function.restype = ctypes.c_int  # type: ignore[attr-defined]
            self._functions[name] = function

    def bind(self, prototypes: Mapping[str, tuple[tuple[str, ...], tuple[Any, ...]]]) -> None:
        """Makes more driver functions callable by name, on first use (the graph API of `cuda_graph`): each
        `name: (symbols, argument types)` binds the first of `symbols` the library has; OSError when it has none."""
        for name, (symbols, argtypes) in prototypes.items():
            if name in self._functions:
                continue
            function = self._lookup(name, symbols)
            if isinstance(self.library, ctypes.CDLL):
                function.argtypes = list(argtypes)  # type: ignore[attr-defined]
                function.restype = ctypes.c_int  # type: ignore[attr-defined]
            self._functions[name] = function

    def _lookup(self, name: str, symbols: tuple[str, ...] | None = None) -> Callable[..., int]:
        candidates = symbols if symbols is not None else _ALTERNATIVES.get(name, (name,))
        for symbol in candidates:
            try:
                function: Callable[..., int] = getattr(self.library, symbol)
            except AttributeError:
                continue
            return function
        raise OSError(f"libcuda has no function {name!r}: the NVIDIA driver is too old for kiln (needs CUDA >= 11)")

    def call(self, name: str, *arguments: Any, context: str = "") -> None:
        """Calls driver function `name`; raises CUDAError (with `context` in the message) if it fails."""
        code = self._functions[name](*arguments)
        if code != CUDA_SUCCESS:
            raise self.error(name, int(code), context)

    def error(self, function: str, code: int, context: str = "") -> CUDAError:
        """The CUDAError for `code` returned by `function`, with the driver's name and description of the code."""
        return CUDAError(function, code, self.error_name(code), self.error_description(code), context)

    def error_name(self, code: int) -> str:
        """The driver's name of a CUresult ("CUDA_ERROR_INVALID_VALUE")."""
        return self._error_text("cuGetErrorName", code) or f"CUresult {code}"

    def error_description(self, code: int) -> str:
        """The driver's description of a CUresult."""
        return self._error_text("cuGetErrorString", code) or "unknown error"

    def _error_text(self, function: str, code: int) -> str | None:
        text = ctypes.c_char_p()
        if self._functions[function](code, ctypes.byref(text)) != CUDA_SUCCESS or text.value is None:
            return None
        return text.value.decode(errors="replace")

    # -- small typed helpers for the calls with an output parameter ----------------------------------------------------
    def get_int(self, name: str, *arguments: Any) -> int:
        """Calls `name(&out, *arguments)` for an int output and returns it."""
        value = ctypes.c_int()
        self.call(name, ctypes.byref(value), *arguments)
        return value.value

    def get_handle(self, name: str, *arguments: Any, context: str = "") -> int:
        """Calls `name(&out, *arguments)` for a handle (pointer) output and returns it as an int."""
        handle = ctypes.c_void_p()
        self.call(name, ctypes.byref(handle), *arguments, context=context)
        if handle.value is None:
            raise CUDAError(name, -1, "NULL handle", "the driver returned success but no handle", context)
        return handle.value

    def device_attribute(self, attribute: DeviceAttribute, device: int) -> int:
        """One attribute of a CUdevice."""
        return self.get_int("cuDeviceGetAttribute", int(attribute), device)

    def load_module(self, image: bytes, context: str = "") -> int:
        """Loads a cubin or PTX image (`cuModuleLoadDataEx`); a JIT failure's message includes the PTX JIT's log."""
        log_size = 8192
        error_log = ctypes.create_string_buffer(log_size)
        options = (ctypes.c_int * 2)(JitOption.ERROR_LOG_BUFFER, JitOption.ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (ctypes.c_void_p * 2)(ctypes.addressof(error_log), log_size)
        # PTX is text the JIT reads up to a NUL byte; a cubin is an ELF image and taken as is.
        data = image if image.startswith(b"\x7fELF") or image.endswith(b"\x00") else image + b"\x00"
        buffer = ctypes.create_string_buffer(data, len(data))
        module = ctypes.c_void_p()
        code = self._functions["cuModuleLoadDataEx"](ctypes.byref(module), buffer, 2, options, values)
        if code != CUDA_SUCCESS:
            log = error_log.value.decode(errors="replace").strip()
            detail = f"{context}; JIT log: {log}" if log else context
            raise self.error("cuModuleLoadDataEx", int(code), detail)
        assert module.value is not None
        return module.value


def kernel_parameters(
    block: ctypes.Array[ctypes.c_char], offsets: Sequence[int]
) -> ctypes.Array[ctypes.c_void_p] | None:
    """cuLaunchKernel's `kernelParams`: one pointer per kernel parameter, to its value at `offsets` in `block`.

    The block must outlive the launch call (the driver copies the values during the call). kiln does not use the
    packed form (`extra` with CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE): there the size must equal the kernel's
    parameter space exactly, without a struct's tail padding. Two pointers and one int32 are 20 bytes, not 24, and
    passing 24 made every launch of such a kernel fail with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES on an H200 (driver
    580). With one pointer per parameter the driver reads each value at the size the kernel declares.
    """
    if not offsets:
        return None
    base = ctypes.addressof(block)
    return (ctypes.c_void_p * len(offsets))(*(base + offset for offset in offsets))
