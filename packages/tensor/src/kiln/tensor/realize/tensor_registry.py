"""`TensorRegistry`: the live tensors of one `Engine` that writes and gradients must find.

A write (`kiln.tensor.realize.mutation`) rebinds every live tensor that views or reads the written buffer, and
`backward()` (`kiln.tensor.autograd_mixin`) finds the leaves that require grad among the live tensors: both need the
tensors that exist, so each Engine keeps them here, weakly (tracking never keeps a tensor alive). A tensor is
registered with the engine current when it is made; a write or a gradient looks at the registries of every engine on
the calling thread's `use_engine` stack (`kiln.tensor.realize.engine.engines_in_context`), so tensors made before a
`use_engine` block are still found inside it, and two threads working in two engines never see each other's tensors.
"""

from __future__ import annotations

import weakref

from kiln.tensor.core import TensorCore

__all__ = ["TensorRegistry"]

_FIRST_SWEEP = 1024


class TensorRegistry:
    """The live tensors of one Engine: all of them (for writes) and those that require grad (for gradients).

    Attributes:
        modified_count: how many realized nodes a write in this engine marked as changed after use; while none,
            gradient operands need no version check.
    """

    __slots__ = ("_live", "_requiring_grad", "_sweep_at", "modified_count")

    def __init__(self) -> None:
        # by id, weakly (Tensor's `==` builds a tensor, so tensors are kept out of sets). Plain weak references
        # without callbacks keep `track` cheap (it runs for every new tensor); dead entries are dropped by `alive`
        # and by a sweep whenever the table has doubled since the last one.
        self._live: dict[int, weakref.ref[TensorCore]] = {}
        self._sweep_at = _FIRST_SWEEP
        self._requiring_grad: weakref.WeakValueDictionary[int, TensorCore] = weakref.WeakValueDictionary()
        self.modified_count = 0

    def __repr__(self) -> str:
        return f"<TensorRegistry {len(self._live)} tracked, {len(self._requiring_grad)} requiring grad>"

    def track(self, holder: TensorCore) -> None:
        """Registers a new tensor (weakly); the caller holds `graph_lock`."""
        key = id(holder)
        # a new tensor at the address of a dead one goes to the end: `alive` lists tensors in creation order whatever
        # the addresses, so the same program asks for the same schedule (a write realizes live lazy tensors with it,
        # in this order) and hits the schedule cache
        self._live.pop(key, None)
        self._live[key] = weakref.ref(holder)
        if len(self._live) >= self._sweep_at:
            self.alive()
            self._sweep_at = max(_FIRST_SWEEP, 2 * len(self._live))

    def alive(self) -> list[TensorCore]:
        """The tracked tensors still alive, in creation order (forgetting the dead ones)."""
        found = []
        for key, reference in list(self._live.items()):
            holder = reference()
            if holder is None:
                del self._live[key]
            else:
                found.append(holder)
        return found

    def require_grad(self, holder: TensorCore) -> None:
        """Registers a tensor whose requires_grad became True."""
        self._requiring_grad[id(holder)] = holder

    def stop_requiring_grad(self, holder: TensorCore) -> None:
        """Forgets a tensor whose requires_grad is no longer True."""
        if self._requiring_grad.get(id(holder)) is holder:
            del self._requiring_grad[id(holder)]

    def requiring_grad(self) -> list[TensorCore]:
        """The live tensors that require grad."""
        return list(self._requiring_grad.values())
