"""The counter-based random number generator of kiln.tensor: Threefry-2x32-20 built from uint32 tensor ops.

Threefry (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC'11; Random123's
threefry.h gives the rotation constants and the key-schedule parity 0x1BD11BDA) is a keyed bijection of a pair of
32-bit words. Random numbers are the bijection applied to a counter, so every element is computed independently from
its position, with nothing but integer ADD / XOR / SHL / SHR / OR on uint32: every device produces the same bits for
a seed.

Streams: `Tensor.manual_seed(seed)` sets the current engine's `RandomState` (`Engine.random`): the key words become
the low and high 32 bits of `seed` and the call counter restarts. Each random tensor takes the next call number `c`
and uses the counter words `(block, c)` for block = 0, 1, 2, ...; see `kiln.tensor.ops.creation` for how words
become values.

A shape with bound Variables (`Tensor.rand(n, 4)`) draws the stream of its largest shape (every variable at its upper
bound) and keeps the leading part of each dim: two values of a variable give consistent prefixes, and one kernel
serves every value.
"""

from __future__ import annotations

from kiln.tensor.core import TensorT
from kiln.tensor.realize.random_state import RandomState
from kiln.uops import Ops, dtypes

__all__ = ["RandomState", "threefry2x32"]

_MASK32 = 0xFFFFFFFF
_KEY_PARITY = 0x1BD11BDA  # Random123 threefry.h: SKEIN_KS_PARITY32
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)  # Random123 threefry.h: R_32x2_0_0 .. R_32x2_7_0
_ROUNDS = 20


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
