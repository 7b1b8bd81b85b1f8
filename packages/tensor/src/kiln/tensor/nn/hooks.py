"""`RemovableHandle`, what `Module.register_forward_hook` / `register_forward_pre_hook` return, and the table a
module keeps its hooks in."""

from __future__ import annotations

import itertools
import weakref
from typing import Any

__all__ = ["HookTable", "RemovableHandle"]


class RemovableHandle:
    """What `register_forward_hook` / `register_forward_pre_hook` return: `remove()` takes the hook out again (also
    usable as a context manager), like torch's `torch.utils.hooks.RemovableHandle`."""

    _next_id = itertools.count()

    def __init__(self, hooks: dict[int, Any]) -> None:
        self.hooks_dict_ref = weakref.ref(hooks) if _weakly_referable(hooks) else (lambda: hooks)
        self.id = next(RemovableHandle._next_id)

    def remove(self) -> None:
        """Removes the hook (a second call does nothing)."""
        hooks = self.hooks_dict_ref()
        if hooks is not None:
            hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()


def _weakly_referable(value: object) -> bool:
    try:
        weakref.ref(value)
    except TypeError:
        return False
    return True


class HookTable(dict[int, Any]):
    """The hooks of one module (a dict subclass, so a handle can hold a weak reference to it)."""
