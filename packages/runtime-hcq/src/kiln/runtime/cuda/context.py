"""`CUDAContext`: what the CUDA allocator, runner and launch timer need of their device.

`CUDADevice` builds its allocator and runners, so they cannot import it back; they are typed against this protocol
(which `CUDADevice` satisfies) and the package's import graph stays a DAG.
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

from kiln.runtime.cuda.driver_api import DriverAPI
from kiln.runtime.program_runner import RunnerDevice

__all__ = ["CUDAContext", "LaunchTimer"]


class CUDAContext(RunnerDevice, Protocol):
    """One CUDA device's context as seen by its allocator and runners."""

    @property
    def api(self) -> DriverAPI: ...

    @property
    def context(self) -> Any: ...

    def make_current(self) -> None: ...

    def launch_timer(self) -> LaunchTimer: ...


class LaunchTimer:
    """Two CUDA events around a launch: `start()` before, `stop()` after returns the launch's seconds (GPU clock)."""

    def __init__(self, device: CUDAContext) -> None:
        self.device = device
        self.events = tuple(device.api.get_handle("cuEventCreate", 0) for _ in range(2))

    def start(self) -> None:
        """Records the start event on the default stream."""
        self.device.api.call("cuEventRecord", self.events[0], None)

    def stop(self) -> float:
        """Records the end event, waits for it and returns the time between the two events in seconds."""
        api = self.device.api
        api.call("cuEventRecord", self.events[1], None)
        api.call("cuEventSynchronize", self.events[1], context=f"waiting for a kernel on {self.device.name}")
        milliseconds = ctypes.c_float()
        api.call("cuEventElapsedTime", ctypes.byref(milliseconds), self.events[0], self.events[1])
        return milliseconds.value / 1e3
