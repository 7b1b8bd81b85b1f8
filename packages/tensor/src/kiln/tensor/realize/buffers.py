"""The side table from BUFFER nodes to the runtime `Buffer` objects holding their data.

Each BUFFER node has a unique number, so it is never shared by hash-consing; its runtime Buffer is kept in the node's
own slot (a `NodeSlot`), which makes the Buffer live exactly as long as the node (and every graph using it).
"""

from __future__ import annotations

from kiln.runtime import Buffer
from kiln.uops import NodeSlot, Ops, UOp

SLOT: NodeSlot[Buffer] = NodeSlot("tensor_buffer", __name__, "the runtime Buffer holding a BUFFER node's data")
"""The slot of a BUFFER node holding its runtime Buffer."""


def buffer_of(uop: UOp) -> Buffer:
    """The runtime Buffer behind BUFFER node `uop`, created (unallocated) on first use."""
    if uop.op is not Ops.BUFFER:
        raise TypeError(f"only BUFFER nodes hold a runtime Buffer, got {uop.op!r}")
    found = SLOT.get(uop)
    if found is None:
        found = Buffer(uop.arg.device, uop.arg.size, uop.dtype)
        SLOT.set(uop, found)
    return found


def attach_buffer(uop: UOp, buffer: Buffer) -> None:
    """Makes `buffer` the data of BUFFER node `uop` (it must match the node's size, dtype and device)."""
    if uop.op is not Ops.BUFFER:
        raise TypeError(f"only BUFFER nodes hold a runtime Buffer, got {uop.op!r}")
    if (buffer.size, buffer.dtype, buffer.device) != (uop.arg.size, uop.dtype, uop.arg.device):
        raise ValueError(f"{buffer!r} does not match the BUFFER node ({uop.arg}, {uop.dtype!r})")
    SLOT.set(uop, buffer)


def has_buffer(uop: UOp) -> bool:
    """Whether BUFFER node `uop` has a runtime Buffer attached already."""
    return SLOT.has(uop)
