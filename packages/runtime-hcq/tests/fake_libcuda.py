"""A stand-in for libcuda written in Python, for testing the CUDA device on machines without a GPU.

It implements the driver functions `DriverAPI` uses with the same calling convention (output parameters arrive as
`ctypes.byref` objects, CUresult codes are returned): device memory is a set of bytearrays at fake device addresses,
and a launched kernel is executed by codegen's reference interpreter on that memory, after decoding the packed
parameter block independently of the runtime (from the program's own parameter list and C layout rules).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.codegen import Program, run_program

SUCCESS, INVALID_VALUE, OUT_OF_MEMORY, NO_DEVICE, INVALID_PTX, NOT_FOUND, LAUNCH_OUT_OF_RESOURCES = (
    0,
    1,
    2,
    100,
    218,
    500,
    701,
)
ERROR_NAMES = {
    INVALID_VALUE: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
    OUT_OF_MEMORY: ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
    NO_DEVICE: ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"),
    INVALID_PTX: ("CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"),
    NOT_FOUND: ("CUDA_ERROR_NOT_FOUND", "named symbol not found"),
    LAUNCH_OUT_OF_RESOURCES: ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"),
}


def out(argument: Any) -> Any:
    """The ctypes object behind a `ctypes.byref(...)` output parameter."""
    return argument._obj


@dataclass
class Launch:
    """One recorded cuLaunchKernel: the kernel, its grid and block, and the parameter values (buffer addresses, then
    variables)."""

    program: Program
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    parameters: tuple[int, ...]
    context: int


@dataclass
class FakeLibcuda:
    """A fake driver with `gpus` GPUs of `memory_per_gpu` bytes each, compute capability `capability`.

    Tests register the programs whose images it may load in `programs` (image bytes -> Program).
    """

    gpus: int = 1
    memory_per_gpu: int = 1 << 20
    capability: tuple[int, int] = (9, 0)
    init_result: int = SUCCESS
    launch_result: int = SUCCESS
    event_milliseconds: float = 1.5
    programs: dict[bytes, Program] = field(default_factory=dict)
    jit_log: str = "ptxas fatal: unresolved symbol"
    entry_name: bytes = b"kiln_kernel"
    current_context: int = 0
    blocks: dict[int, tuple[int, bytearray]] = field(default_factory=dict)  # address -> (gpu, memory)
    used: dict[int, int] = field(default_factory=dict)
    modules: dict[int, bytes] = field(default_factory=dict)
    functions: dict[int, Program] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    loaded_images: list[bytes] = field(default_factory=list)
    events: dict[int, bool] = field(default_factory=dict)
    next_handle: int = 0x1000
    next_address: int = 0x7F00_0000_0000

    def _handle(self) -> int:
        self.next_handle += 0x10
        return self.next_handle

    # -- init, errors, devices --------------------------------------------------------------------------------------
    def cuInit(self, flags: int) -> int:
        return self.init_result

    def cuDriverGetVersion(self, version: Any) -> int:
        out(version).value = 13000
        return SUCCESS

    def cuGetErrorName(self, code: int, text: Any) -> int:
        if code not in ERROR_NAMES:
            return INVALID_VALUE
        out(text).value = ERROR_NAMES[code][0].encode()
        return SUCCESS

    def cuGetErrorString(self, code: int, text: Any) -> int:
        if code not in ERROR_NAMES:
            return INVALID_VALUE
        out(text).value = ERROR_NAMES[code][1].encode()
        return SUCCESS

    def cuDeviceGetCount(self, count: Any) -> int:
        out(count).value = self.gpus
        return SUCCESS

    def cuDeviceGet(self, device: Any, ordinal: int) -> int:
        if not 0 <= ordinal < self.gpus:
            return INVALID_VALUE
        out(device).value = ordinal
        return SUCCESS

    def cuDeviceGetName(self, name: Any, length: int, device: int) -> int:
        name.value = f"Fake GPU {device}".encode()[: length - 1]
        return SUCCESS

    def cuDeviceGetAttribute(self, value: Any, attribute: int, device: int) -> int:
        attributes = {75: self.capability[0], 76: self.capability[1], 1: 1024}
        if attribute not in attributes:
            return INVALID_VALUE
        out(value).value = attributes[attribute]
        return SUCCESS

    def cuDeviceTotalMem_v2(self, total: Any, device: int) -> int:
        out(total).value = self.memory_per_gpu
        return SUCCESS

    def cuDevicePrimaryCtxRetain(self, context: Any, device: int) -> int:
        out(context).value = 0xC0000 + device
        return SUCCESS

    def cuDevicePrimaryCtxRelease_v2(self, device: int) -> int:
        return SUCCESS

    def cuCtxSetCurrent(self, context: int) -> int:
        self.current_context = context
        return SUCCESS

    def cuCtxSynchronize(self) -> int:
        return SUCCESS

    def cuCtxEnablePeerAccess(self, context: int, flags: int) -> int:
        return SUCCESS

    # -- memory -----------------------------------------------------------------------------------------------------
    @property
    def current_gpu(self) -> int:
        return self.current_context - 0xC0000

    def cuMemAlloc_v2(self, pointer: Any, size: int) -> int:
        gpu = self.current_gpu
        if self.used.get(gpu, 0) + size > self.memory_per_gpu:
            return OUT_OF_MEMORY
        self.used[gpu] = self.used.get(gpu, 0) + size
        address = self.next_address
        self.next_address += (size + 0xFFFF) & ~0xFFFF  # 64 KiB aligned, never adjacent
        self.blocks[address] = (gpu, bytearray(size))
        out(pointer).value = address
        return SUCCESS

    def cuMemFree_v2(self, address: int) -> int:
        if address not in self.blocks:
            return INVALID_VALUE
        gpu, memory = self.blocks.pop(address)
        self.used[gpu] -= len(memory)
        return SUCCESS

    def resolve(self, address: int, size: int) -> tuple[bytearray, int]:
        """(block memory, offset) of `size` bytes at device address `address`."""
        for base, (_, memory) in self.blocks.items():
            if base <= address and address + size <= base + len(memory):
                return memory, address - base
        raise AssertionError(f"fake GPU: no allocation holds {size} bytes at {address:#x}")

    def cuMemcpyHtoD_v2(self, dest: int, host: int, size: int) -> int:
        memory, offset = self.resolve(dest, size)
        memory[offset : offset + size] = ctypes.string_at(host, size)
        return SUCCESS

    def cuMemcpyDtoH_v2(self, host: int, src: int, size: int) -> int:
        memory, offset = self.resolve(src, size)
        ctypes.memmove(host, bytes(memory[offset : offset + size]), size)
        return SUCCESS

    def cuMemcpyDtoD_v2(self, dest: int, src: int, size: int) -> int:
        source, source_offset = self.resolve(src, size)
        target, target_offset = self.resolve(dest, size)
        target[target_offset : target_offset + size] = source[source_offset : source_offset + size]
        return SUCCESS

    def cuMemcpyPeer(self, dest: int, dest_context: int, src: int, src_context: int, size: int) -> int:
        assert self.blocks[self.base_of(dest)][0] == dest_context - 0xC0000, "destination not on dest_context's GPU"
        assert self.blocks[self.base_of(src)][0] == src_context - 0xC0000, "source not on src_context's GPU"
        return self.cuMemcpyDtoD_v2(dest, src, size)

    def base_of(self, address: int) -> int:
        return next(base for base, (_, memory) in self.blocks.items() if base <= address < base + len(memory))

    # -- modules and launches ---------------------------------------------------------------------------------------
    def cuModuleLoadDataEx(self, module: Any, image: Any, count: int, options: Any, values: Any) -> int:
        data = image.raw
        self.loaded_images.append(data)
        key = data.rstrip(b"\x00")
        if key not in self.programs:
            log = self.jit_log.encode()
            ctypes.memmove(values[0], log, len(log) + 1)  # option 0 is the error log buffer
            return INVALID_PTX
        handle = self._handle()
        self.modules[handle] = key
        out(module).value = handle
        return SUCCESS

    def cuModuleUnload(self, module: int) -> int:
        return SUCCESS if self.modules.pop(module, None) is not None else INVALID_VALUE

    def cuModuleGetFunction(self, function: Any, module: int, name: bytes) -> int:
        program = self.programs[self.modules[module]]
        if name != self.entry_name:
            return NOT_FOUND
        handle = self._handle()
        self.functions[handle] = program
        out(function).value = handle
        return SUCCESS

    def cuLaunchKernel(self, function: int, *arguments: Any) -> int:
        gx, gy, gz, bx, by, bz, shared, stream, params, extra = arguments
        if self.launch_result != SUCCESS:
            return self.launch_result
        assert shared == 0 and stream is None
        # kiln passes kernelParams, one pointer per parameter (the packed `extra` form needs the exact parameter
        # space size, which a padded struct is not: the real driver fails such launches)
        assert extra is None
        program = self.functions[function]
        values = self.read_parameters(program, params)
        self.launches.append(Launch(program, (gx, gy, gz), (bx, by, bz), values, self.current_context))
        self.execute(program, values, (gx, gy, gz), (bx, by, bz))
        return SUCCESS

    @staticmethod
    def read_parameters(program: Program, params: Any) -> tuple[int, ...]:
        """Every parameter's value, read through its pointer at the size the kernel declares: a 64-bit address per
        buffer (slot order), then each variable as int32 or int64 (a C compiler's parameter list)."""
        kinds = [ctypes.c_uint64] * len(program.globals)
        kinds += [ctypes.c_int64 if variable.dtype.itemsize == 8 else ctypes.c_int32 for variable in program.variables]
        if not kinds:
            return ()
        assert params is not None, "a kernel with parameters launched without kernelParams"
        return tuple(kind.from_address(params[index]).value for index, kind in enumerate(kinds))

    def execute(
        self, program: Program, values: tuple[int, ...], grid: tuple[int, ...], threads: tuple[int, ...]
    ) -> None:
        """Runs the kernel with the interpreter on the decoded parameters."""
        arrays = []
        for address in values[: len(program.globals)]:
            memory, offset = self.resolve(address, 0)
            arrays.append(np.frombuffer(memory, dtype=np.uint8)[offset:])
        variables = values[len(program.globals) :]
        var_vals = {variable.arg.name: value for variable, value in zip(program.variables, variables)}
        run_program(program, arrays, var_vals, grid, threads)

    # -- events -----------------------------------------------------------------------------------------------------
    def cuEventCreate(self, event: Any, flags: int) -> int:
        handle = self._handle()
        self.events[handle] = False
        out(event).value = handle
        return SUCCESS

    def cuEventRecord(self, event: int, stream: Any) -> int:
        self.events[event] = True
        return SUCCESS

    def cuEventSynchronize(self, event: int) -> int:
        return SUCCESS if self.events[event] else INVALID_VALUE

    def cuEventElapsedTime(self, milliseconds: Any, start: int, end: int) -> int:
        if not (self.events[start] and self.events[end]):
            return INVALID_VALUE
        out(milliseconds).value = self.event_milliseconds
        return SUCCESS

    def cuEventDestroy_v2(self, event: int) -> int:
        return SUCCESS if self.events.pop(event, None) is not None else INVALID_VALUE
