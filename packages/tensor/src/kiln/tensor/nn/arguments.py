"""Argument checks shared by the layers, the functions of `kiln.tensor.nn.functional` and the LR schedulers."""

from __future__ import annotations

__all__ = ["check_positive_int"]


def check_positive_int(value: object, what: str) -> int:
    """`value` when it is an int >= 1; ValueError naming `what` otherwise (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return value
