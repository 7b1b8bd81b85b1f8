"""The counter-based random number generator of kiln.tensor: Threefry-2x32-20 built from uint32 tensor ops.

Threefry (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC'11; Random123's
threefry.h gives the rotation constants and the key-schedule parity 0x1BD11BDA) is a keyed bijection of a pair of
32-bit words. Random numbers are the bijection applied to a counter, so every element is computed independently from
its position, with nothing but integer ADD / XOR / SHL / SHR / OR on uint32: every device produces the same bits for
a seed.

Streams: `Tensor.manual_seed(seed)` sets the key words to the low and high 32 bits of `seed` and restarts the call
counter. Each random tensor takes the next call number `c` and uses the counter words `(block, c)` for
block = 0, 1, 2, ...; see `kiln.tensor.ops.creation` for how words become values.

A shape with bound Variables (`Tensor.rand(n, 4)`) draws the stream of its largest shape (every variable at its upper
bound) and keeps the leading part of each dim: two values of a variable give consistent prefixes, and one kernel
serves every value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kiln.tensor.core import TensorCore, TensorT
from kiln.uops import Ops, dtypes

__all__ = ["RandomState", "random_state", "threefry2x32"]

_MASK32 = 0xFFFFFFFF
_KEY_PARITY = 0x1BD11BDA  # Random123 threefry.h: SKEIN_KS_PARITY32
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)  # Random123 threefry.h: R_32x2_0_0 .. R_32x2_7_0
_ROUNDS = 20


class RandomState:
    """The global seed and call counter of the random tensor functions (thread-safe)."""

    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self.seed = 0
        self.calls = 0
        self.stream_observer: Callable[[TensorCore, int], None] | None = None
        """Told about each call-number tensor a random tensor reads (TinyJit rewrites them on replay)."""
        self.reset(seed)

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


random_state = RandomState()
"""The state behind `Tensor.manual_seed`, `Tensor.rand` and the other random creation functions."""


def _add(x: TensorT, value: int) -> TensorT:
    return x._binary(Ops.ADD, x._const(value & _MASK32, x.shape, dtypes.uint32, x.device))


def _rotate_left(x: TensorT, bits: int) -> TensorT:
    left = x._binary(Ops.SHL, x._const(bits, x.shape, dtypes.uint32, x.device))
    right = x._binary(Ops.SHR, x._const(32 - bits, x.shape, dtypes.uint32, x.device))
    return left._binary(Ops.OR, right)


def threefry2x32(word0: TensorT, word1: TensorT, key0: int, key1: int) -> tuple[TensorT, TensorT]:
    """Threefry-2x32 with 20 rounds of the counter words (`word0`, `word1`: uint32 tensors of one shape) under the
    key (`key0`, `key1`); returns the two output words as uint32 tensors.
    """
    if word0.dtype != dtypes.uint32 or word1.dtype != dtypes.uint32:
        raise TypeError(f"threefry2x32 works on uint32 words, got {word0.dtype!r} and {word1.dtype!r}")
    schedule = (key0 & _MASK32, key1 & _MASK32, (key0 ^ key1 ^ _KEY_PARITY) & _MASK32)
    x0, x1 = _add(word0, schedule[0]), _add(word1, schedule[1])
    for round_number in range(_ROUNDS):
        x0 = x0._binary(Ops.ADD, x1)
        x1 = _rotate_left(x1, _ROTATIONS[round_number % 8])._binary(Ops.XOR, x0)
        if round_number % 4 == 3:  # key injection every four rounds
            injection = (round_number + 1) // 4
            x0 = _add(x0, schedule[injection % 3])
            x1 = _add(x1, schedule[(injection + 1) % 3] + injection)
    return x0, x1
