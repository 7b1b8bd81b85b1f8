"""`IREnum`: the base of the IR's enums (`Ops`, `AxisKind`, `MemoryScope`)."""

from __future__ import annotations

import enum

__all__ = ["IREnum"]


class IREnum(enum.Enum):
    """An enum of the IR: hashed by identity, and printed as it is written in code (`Ops.ADD`).

    Enum's own hash hashes the member's name in Python; IR enums are hashed on every UOp construction and pattern
    dispatch, so they take `object.__hash__` (C, by identity: a member is a singleton).
    """

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"
