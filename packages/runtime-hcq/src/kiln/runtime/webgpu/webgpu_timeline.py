"""`WebGPUTimeline`: the submissions of a WebGPU queue read as a timeline signal.

Every command buffer the device submits (a launch, a device-side copy) is numbered 1, 2, 3 ... in submission order.
A WebGPU queue runs its submissions in order, so "wait for value n" is "wait until the queue drained what was
submitted up to now". The wait is a 4-byte read back of a fence buffer: a read back completes only after every
earlier submission (wgpu 0.32's `on_submitted_work_done` does not bind against its own wgpu-native). A value is
known reached once a wait covering it returned, or once any other read back from the queue did.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["WebGPUTimeline"]


class WebGPUTimeline:
    """The submissions of one queue as a monotonically increasing value.

    Args:
        queue: the wgpu GPUQueue.
        fence: a small buffer (usage COPY_SRC) of the same device, read back to wait.
        name: used in error messages.
    """

    def __init__(self, queue: Any, fence: Any, name: str) -> None:
        self.queue = queue
        self.fence = fence
        self.name = name
        self.value_enqueued = 0
        self.value_reached = 0
        self._submitted_at: dict[int, float] = {}
        self._finished_at: dict[int, float] = {}
        self._lock = threading.Lock()

    def submit(self, command_buffers: list[Any]) -> int:
        """Submits `command_buffers` to the queue; returns the timeline value of this submission."""
        with self._lock:
            self.queue.submit(command_buffers)
            self.value_enqueued += 1
            self._submitted_at = {self.value_enqueued: time.perf_counter()}  # only the last one is timed
            self._finished_at = {}
            return self.value_enqueued

    def wait(self, value: int | None = None) -> None:
        """Blocks until submission `value` (default: the last one) completed."""
        target = self.value_enqueued if value is None else value
        if target > self.value_enqueued:
            raise ValueError(f"{self.name}: waiting for value {target}, only {self.value_enqueued} submitted")
        if target <= self.value_reached:
            return
        covered = self.value_enqueued
        self.queue.read_buffer(self.fence, 0, 4)
        self.mark_reached(covered)

    def mark_reached(self, value: int) -> None:
        """Records that every submission up to `value` completed (a blocking read back from the queue returned)."""
        with self._lock:
            if value > self.value_reached:
                self.value_reached = value
                if value in self._submitted_at:
                    self._finished_at[value] = time.perf_counter()

    def reached(self, value: int) -> bool:
        """Whether submission `value` is known to have completed (never blocks)."""
        return value <= self.value_reached

    def seconds(self, value: int) -> float:
        """Wall-clock seconds from submitting `value` to the wait that saw it complete (WebGPU timestamp queries
        are an optional feature, so the host clock is the portable measure)."""
        started, finished = self._submitted_at.get(value), self._finished_at.get(value)
        if started is None or finished is None:
            raise ValueError(f"{self.name}: submission {value} was not the last one waited for; it has no timing")
        return max(finished - started, 0.0)
