"""The side table from BUFFER nodes to the runtime `Buffer` objects holding their data.

Each BUFFER node has a unique number, so it is never shared by hash-consing; its runtime Buffer is kept in the node's
own attribute dictionary, which makes the Buffer live exactly as long as the node (and every graph using it).
"""

from __future__ import annotations

from kiln.runtime import Buffer
from kiln.uops import Ops, UOp

SLOT = "tensor_buffer"
"""The attribute of a BUFFER node holding its runtime Buffer."""


def buffer_of(uop: UOp) -> Buffer:
    """The runtime Buffer behind BUFFER node `uop`, created (unallocated) on first use."""
    if uop.op is not Ops.BUFFER:
        raise TypeError(f"only BUFFER nodes hold a runtime Buffer, got {uop.op!r}")
    found: Buffer | None = uop.__dict__.get(SLOT)
    if found is None:
        found = uop.__dict__[SLOT] = Buffer(uop.arg.device, uop.arg.size, uop.dtype)
    return found


def attach_buffer(uop: UOp, buffer: Buffer) -> None:
    """Makes `buffer` the data of BUFFER node `uop` (it must match the node's size, dtype and device)."""
    if uop.op is not Ops.BUFFER:
        raise TypeError(f"only BUFFER nodes hold a runtime Buffer, got {uop.op!r}")
    if (buffer.size, buffer.dtype, buffer.device) != (uop.arg.size, uop.dtype, uop.arg.device):
        raise ValueError(f"{buffer!r} does not match the BUFFER node ({uop.arg}, {uop.dtype!r})")
    uop.__dict__[SLOT] = buffer


def has_buffer(uop: UOp) -> bool:
    """Whether BUFFER node `uop` has a runtime Buffer attached already."""
    return SLOT in uop.__dict__
