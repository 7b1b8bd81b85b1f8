"""Profiling: timed events of programs and copies on devices, recorded when the PROFILE knob is on.

Events are exported in the Chrome trace-event format (`{"traceEvents": [...]}`), which the viz profiler timeline
reads (and chrome://tracing or Perfetto open directly): one process per device, one thread per queue, numbered,
with "process_name" / "thread_name" metadata events naming them.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.uops.files import write_atomically

__all__ = ["ProfileEvent", "Profiler", "profiler"]


@dataclass(frozen=True)
class ProfileEvent:
    """One timed piece of work on a device.

    Attributes:
        device: the device name ("CPU", "CUDA:1").
        name: the program name, or a description of the copy.
        category: "program" or "copy".
        start_us: start time, in microseconds of the device's clock.
        end_us: end time, in microseconds.
        queue: the queue it ran on ("compute", "copy").
        args: more facts shown with the event (a program's "kernel" trace key, "flops", "bytes"), or None.
    """

    device: str
    name: str
    category: str
    start_us: float
    end_us: float
    queue: str = "compute"
    args: dict[str, Any] | None = None

    @property
    def duration_us(self) -> float:
        """How long the work took, in microseconds."""
        return self.end_us - self.start_us

    def to_trace_event(self) -> dict[str, Any]:
        """The event as a Chrome "complete" trace event."""
        event: dict[str, Any] = {
            "name": self.name,
            "cat": self.category,
            "ph": "X",
            "ts": self.start_us,
            "dur": self.duration_us,
            "pid": self.device,
            "tid": self.queue,
        }
        if self.args:
            event["args"] = self.args
        return event


class Profiler:
    """Collects profile events from every device of the process."""

    def __init__(self) -> None:
        self._events: list[ProfileEvent] = []
        self._lock = threading.Lock()

    @property
    def events(self) -> list[ProfileEvent]:
        """A copy of the recorded events, in recording order."""
        with self._lock:
            return list(self._events)

    def record(self, event: ProfileEvent) -> None:
        """Adds one event."""
        with self._lock:
            self._events.append(event)

    def clear(self) -> None:
        """Forgets every event."""
        with self._lock:
            self._events.clear()

    def to_chrome_trace(self) -> dict[str, Any]:
        """Every event in the Chrome trace-event format: devices as numbered processes, queues as numbered threads,
        named by metadata events (the form every trace viewer reads)."""
        processes: dict[str, int] = {}
        threads: dict[tuple[str, str], int] = {}
        metadata: list[dict[str, Any]] = []
        timed: list[dict[str, Any]] = []
        for event in self.events:
            if event.device not in processes:
                processes[event.device] = len(processes) + 1
                metadata.append(
                    {"name": "process_name", "ph": "M", "pid": processes[event.device], "args": {"name": event.device}}
                )
            pid = processes[event.device]
            if (event.device, event.queue) not in threads:
                threads[(event.device, event.queue)] = len(threads) + 1
                tid = threads[(event.device, event.queue)]
                named = {"name": event.queue}
                metadata.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": named})
            entry = event.to_trace_event()
            entry["pid"], entry["tid"] = pid, threads[(event.device, event.queue)]
            timed.append(entry)
        return {"traceEvents": metadata + timed, "displayTimeUnit": "ns"}

    def save(self, path: str | Path) -> Path:
        """Writes `to_chrome_trace()` as JSON to `path` atomically (a failed save keeps the old file); returns it."""
        target = Path(path)
        write_atomically(target, [json.dumps(self.to_chrome_trace()).encode()])
        return target


profiler = Profiler()
