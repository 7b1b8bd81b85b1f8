"""`GlobalCounters`: running totals of the work the engine launched (kernels, flops, memory traffic, time)."""

from __future__ import annotations

from typing import ClassVar


class GlobalCounters:
    """Totals since the last `reset()`, updated by the engine after every kernel and copy it runs.

    kernel_count  kernels launched
    flops         floating/integer operations the kernels performed (codegen's estimate)
    mem_bytes     bytes the kernels and copies read and wrote (codegen's estimate)
    time_ns       wall time spent running them, in nanoseconds (measured around each launch)
    copies        buffer copies between devices
    """

    kernel_count: ClassVar[int] = 0
    flops: ClassVar[int] = 0
    mem_bytes: ClassVar[int] = 0
    time_ns: ClassVar[int] = 0
    copies: ClassVar[int] = 0

    @classmethod
    def reset(cls) -> None:
        """Sets every counter back to zero."""
        cls.kernel_count = 0
        cls.flops = 0
        cls.mem_bytes = 0
        cls.time_ns = 0
        cls.copies = 0
