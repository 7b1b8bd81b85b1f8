"""The PYTHON device: an emulator that runs linear programs with codegen's reference interpreter.

Its memory is host memory; its queue is a software engine (one worker thread), exactly like the CPU device, but an
exec command interprets the program's uops (`kiln.codegen.Interpreter`) on numpy views of the buffers instead of
calling compiled code. Its renderer is kiln.renderers' `PythonRenderer` (GPU-shaped limits: blocks of threads,
shared memory, every ALU op native). The device runs the LINEAR the Program carries (`Program.linear`) directly;
the renderer's text "binary" is for people and the compile cache, never parsed back here.
Everything the linear IR can express runs: GPU launch dimensions (gidx/lidx), local memory
and barriers, CPU cores (core_id), every dtype (bfloat16 and fp8 emulated bit-exactly). The interpreter also checks
what real hardware would leave undefined (out-of-bounds accesses, data races, divergent barriers).

A program that fails does not wedge the device: the error is kept and raised (as RuntimeError naming the program)
by the next `synchronize()`, i.e. by the launch itself with `wait=True` or by the next host access to memory.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.codegen import Program
from kiln.codegen.interpreter import Interpreter
from kiln.runtime.buffer import Buffer
from kiln.runtime.device import find_renderers
from kiln.runtime.hcq import HCQCompiled
from kiln.runtime.hcq_runner import HCQProgramRunner
from kiln.runtime.host_allocator import HostAllocator
from kiln.runtime.kernel_args import HCQArgsState
from kiln.runtime.program_runner import ProgramRunner
from kiln.runtime.thread_engine import ThreadQueueEngine

__all__ = ["InterpretedRunner", "PythonDevice"]

LaunchSize = tuple[int, int, int]


def _host_array(address: int, size: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A writable uint8 numpy view of `size` bytes of host memory at `address`."""
    if size == 0:
        return np.zeros(0, np.uint8)
    return np.frombuffer(memoryview((ctypes.c_uint8 * size).from_address(address)).cast("B"), dtype=np.uint8)


class InterpretedRunner(HCQProgramRunner):
    """A program prepared for the interpreter once (`Interpreter(uops)`), run by the device's engine."""

    device: PythonDevice

    def __init__(self, device: PythonDevice, program: Program) -> None:
        self.interpreter = Interpreter(list(program.linear))  # the LINEAR itself: no text round trip
        super().__init__(device, program, self.interpreter)
        self.variable_names = tuple(variable.name for variable in self.variables)

    def kernel_for(self, buffers: Sequence[Buffer]) -> object:
        """The exec command's callable, bound to the byte sizes of this launch's buffers."""
        return functools.partial(self._interpret, tuple(buffers[slot].nbytes for slot in self.slots))

    def _interpret(
        self, sizes: tuple[int, ...], args: HCQArgsState, global_size: LaunchSize, local: LaunchSize
    ) -> None:
        try:
            # the interpreter takes one array per slot number; slots the program does not use get an empty one
            arrays = [np.zeros(0, np.uint8)] * self.buffer_count
            for slot, address, size in zip(self.slots, args.buffer_addresses, sizes):
                arrays[slot] = _host_array(address, size)
            var_vals = dict(zip(self.variable_names, args.variable_values))
            self.interpreter.run(arrays, var_vals, global_size, local)
        except Exception as error:  # kept for the host: a failing program must not stop the device's queue
            self.device.record_failure(self.name, error)


class PythonDevice(HCQCompiled):
    """The emulator device "PYTHON": host memory, one software queue, programs run by the reference interpreter."""

    def __init__(self, name: str) -> None:
        self.engine = ThreadQueueEngine(name)
        super().__init__(name, HostAllocator(name, synchronize=self.synchronize), self.engine)
        self.renderers = find_renderers("PYTHON")
        self._failures: list[tuple[str, Exception]] = []
        self._failures_lock = threading.Lock()

    def after_fork_in_child(self) -> None:
        """Also renews the failures lock (the engine's thread of the parent may have held it at the fork)."""
        super().after_fork_in_child()
        self._failures_lock = threading.Lock()

    def record_failure(self, program_name: str, error: Exception) -> None:
        """Keeps the error of a failed program for the next `synchronize()` (called on the engine's thread)."""
        with self._failures_lock:
            self._failures.append((program_name, error))

    def synchronize(self, timeout: float | None = None) -> None:
        """Waits for queued work; raises RuntimeError for the first program that failed since the last call."""
        super().synchronize(timeout)
        if not self._failures:
            return
        with self._failures_lock:
            failures, self._failures = self._failures, []
        name, error = failures[0]
        more = f" (and {len(failures) - 1} later failure(s))" if len(failures) > 1 else ""
        raise RuntimeError(f"{self.name}: program {name!r} failed: {type(error).__name__}: {error}{more}") from error

    def load_program(self, program: Program) -> ProgramRunner:
        """Prepares the program's uops for the interpreter."""
        return InterpretedRunner(self, program)
