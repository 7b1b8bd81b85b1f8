"""`CLTimeline`: an in-order OpenCL queue's events read as a timeline signal.

Every command the device enqueues (a launch, a copy) returns a `cl_event`; the timeline numbers them 1, 2, 3 ... in
enqueue order. Because the queue is in order, command n completing means every command up to n completed, which is
exactly the contract of a timeline signal (`kiln.runtime.TimelineSignal`): "wait for value n" = wait for the event of
the first command numbered n or later. Only the most recent events are kept (older ones are released); waiting for
a forgotten value waits for the oldest kept one, which comes later in the queue.
"""

from __future__ import annotations

import ctypes
import threading
from collections import deque

from kiln.renderers.opencl_library import (
    CL_COMPLETE,
    CL_EVENT_COMMAND_EXECUTION_STATUS,
    CL_PROFILING_COMMAND_END,
    CL_PROFILING_COMMAND_START,
    OpenCLLibrary,
)

__all__ = ["CLTimeline"]


class CLTimeline:
    """The events of one in-order queue as a monotonically increasing value.

    Args:
        library: the OpenCL library.
        queue: the cl_command_queue (in order, with profiling enabled).
        name: used in error messages.
        kept: how many recent events are held (each holds a reference in the OpenCL platform).
    """

    def __init__(self, library: OpenCLLibrary, queue: int, name: str, kept: int = 64) -> None:
        self.library = library
        self.queue = queue
        self.name = name
        self.kept = kept
        self.value_enqueued = 0
        self._events: deque[tuple[int, int]] = deque()  # (value, cl_event), oldest first
        self._lock = threading.Lock()

    def record(self, event: ctypes.c_void_p) -> int:
        """Takes ownership of `event`, the one of the command just enqueued; returns its timeline value."""
        with self._lock:
            self.value_enqueued += 1
            self._events.append((self.value_enqueued, int(event.value or 0)))
            while len(self._events) > self.kept:
                _, old = self._events.popleft()
                self.library.call("clReleaseEvent", old)
            return self.value_enqueued

    def _event_for(self, value: int) -> int | None:
        with self._lock:
            if value > self.value_enqueued:
                raise ValueError(f"{self.name}: waiting for value {value}, only {self.value_enqueued} enqueued")
            for recorded, event in self._events:
                if recorded >= value:
                    return event
            return None

    def wait(self, value: int | None = None) -> None:
        """Blocks until the command numbered `value` (default: the last one enqueued) completed."""
        event = self._event_for(self.value_enqueued if value is None else value)
        if event is None:
            return
        handle = ctypes.c_void_p(event)
        self.library.call("clWaitForEvents", 1, ctypes.byref(handle), what=f"waiting on {self.name}")

    def reached(self, value: int) -> bool:
        """Whether the command numbered `value` has completed (without blocking)."""
        event = self._event_for(value)
        if event is None:
            return True
        status = ctypes.c_int32(1)
        self.library.call(
            "clGetEventInfo", event, CL_EVENT_COMMAND_EXECUTION_STATUS, 4, ctypes.byref(status), None, what=self.name
        )
        return status.value == CL_COMPLETE

    def seconds(self, value: int) -> float:
        """The run time of command `value` from the queue's profiling counters (after it completed)."""
        event = self._event_for(value)
        if event is None:
            raise ValueError(f"{self.name}: the event of command {value} was already released")
        start, end = ctypes.c_uint64(0), ctypes.c_uint64(0)
        self.library.call("clGetEventProfilingInfo", event, CL_PROFILING_COMMAND_START, 8, ctypes.byref(start), None)
        self.library.call("clGetEventProfilingInfo", event, CL_PROFILING_COMMAND_END, 8, ctypes.byref(end), None)
        return max(end.value - start.value, 0) * 1e-9

    def release(self) -> None:
        """Releases every held event (after `wait()`, when the queue is closed)."""
        with self._lock:
            while self._events:
                _, event = self._events.popleft()
                self.library.call("clReleaseEvent", event)
