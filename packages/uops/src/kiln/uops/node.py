"""`GraphNode`: the read-only shape of a UOp that the modules below `kiln.uops.uop` work on.

Range analysis and the text forms (`node_text`) only read a node's fields and walk its graph; typing them against
this protocol instead of the UOp class lets `uop.py` import them at module level while they never import `uop.py`,
so the modules of kiln.uops form a DAG (checked by scripts/check_import_cycles.py). `UOp` satisfies it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol

from kiln.uops.dtype import ConstType, DType
from kiln.uops.ops import Ops

__all__ = ["GraphNode"]


class GraphNode(Hashable, Protocol):
    """A node of an immutable IR graph: `op` applied to `src`, producing `dtype`, with payload `arg` and `tag`.

    The fields are read, never written, through this protocol (a UOp refuses writes at run time)."""

    op: Ops
    dtype: DType

    @property
    def src(self) -> tuple[GraphNode, ...]: ...  # a property: a UOp's sources are UOps, a subtype

    arg: Any
    tag: Any

    @property
    def vmin(self) -> ConstType: ...

    @property
    def vmax(self) -> ConstType: ...

    def toposort(self, gate: Callable[[Any], bool] | None = None) -> Iterable[Any]: ...
