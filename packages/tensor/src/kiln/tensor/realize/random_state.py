"""`RandomState`: the seed and call counter of one `Engine`'s random tensor functions.

`Tensor.manual_seed(seed)` resets the current engine's state; each random tensor takes the next call number (see
`kiln.tensor.ops.random` for how a seed and a call number become random bits). Each Engine has its own, so two
threads working in two engines draw independent streams.
"""

from __future__ import annotations

import threading

__all__ = ["RandomState"]

_MASK32 = 0xFFFFFFFF


class RandomState:
    """The seed and call counter of the random tensor functions of one Engine (thread-safe)."""

    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self.seed = 0
        self.calls = 0
        self.reset(seed)

    def __repr__(self) -> str:
        return f"RandomState(seed={self.seed}, calls={self.calls})"

    def reset(self, seed: int) -> None:
        """Sets the seed (any int; only its low 64 bits matter) and restarts the call counter."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"a random seed must be an int, got {seed!r} of type {type(seed).__name__}")
        with self._lock:
            self.seed = seed & ((1 << 64) - 1)
            self.calls = 0

    def next_stream(self) -> tuple[int, int, int]:
        """(key word 0, key word 1, call number) for the next random tensor; advances the call counter."""
        with self._lock:
            call = self.calls
            self.calls = (self.calls + 1) & _MASK32
            return self.seed & _MASK32, self.seed >> 32, call

    def advance(self, count: int) -> int:
        """Takes `count` call numbers at once (what `count` random tensors would); returns the first."""
        with self._lock:
            first = self.calls
            self.calls = (self.calls + count) & _MASK32
            return first
