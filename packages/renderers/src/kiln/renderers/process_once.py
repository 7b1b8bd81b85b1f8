"""`ProcessOnce`: a value made once per process (a GPU library's handle, its devices), on first use.

The GPU libraries (libcuda, OpenCL, WebGPU) are opened lazily, by whichever thread needs them first, and then shared
by the whole process: `ProcessOnce` is that pattern written once.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["ProcessOnce"]

T = TypeVar("T")


class ProcessOnce(Generic[T]):
    """Wraps `make` (a function of no arguments, used as a decorator) so that it runs once per process: the first
    call that succeeds keeps its value for every later call. Concurrent first calls wait for one another (the value is
    made once), and a call that raises keeps nothing, so the next one tries again (a library installed meanwhile)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._made: list[T] = []  # empty until made: a value may be None or falsy
        functools.update_wrapper(self, make)

    def __call__(self) -> T:
        with self._lock:
            if not self._made:
                self._made.append(self._make())
            return self._made[0]
