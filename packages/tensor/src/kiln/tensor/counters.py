"""`GlobalCounters`: running totals of the work the engine launched (kernels, flops, memory traffic, time)."""

from __future__ import annotations

__all__ = ["Counters", "GlobalCounters"]


class Counters:
    """Totals since the last `reset()`, updated by the engine after every kernel and copy it runs.

    kernel_count  kernels launched
    flops         floating/integer operations the kernels performed (codegen's estimate)
    mem_bytes     bytes the kernels and copies read and wrote (codegen's estimate)
    time_ns       wall time spent running them, in nanoseconds (measured around each launch)
    copies        buffer copies between devices

    The counters are slots of one object (`GlobalCounters`) rather than class attributes: every launch updates
    four of them, and writing a class attribute costs about three times a slot's.
    """

    __slots__ = ("copies", "flops", "kernel_count", "mem_bytes", "time_ns")

    def __init__(self) -> None:
        self.reset()

    def __repr__(self) -> str:
        return (
            f"<Counters {self.kernel_count} kernels, {self.copies} copies, {self.flops} flops, "
            f"{self.mem_bytes} bytes, {self.time_ns} ns>"
        )

    def reset(self) -> None:
        """Sets every counter back to zero."""
        self.kernel_count = 0
        self.flops = 0
        self.mem_bytes = 0
        self.time_ns = 0
        self.copies = 0


GlobalCounters = Counters()  # module-state: process totals for DEBUG and benchmarks; nothing computes from them
"""The process's totals: `GlobalCounters.kernel_count`, ..., `GlobalCounters.reset()`."""
