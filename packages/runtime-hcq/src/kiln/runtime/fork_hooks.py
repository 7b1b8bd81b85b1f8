"""Objects that own threads and must renew them in a child after `os.fork()` (threads do not survive a fork).

An object registers itself with `renew_after_fork`; in the child, its `after_fork_in_child()` runs (from the hook
`os.register_at_fork` installs) before any other code of the child. Objects are held weakly.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["ForkRenewable", "renew_after_fork"]


class ForkRenewable(Protocol):
    """What `renew_after_fork` calls in the child."""

    def after_fork_in_child(self) -> None: ...


_registered: weakref.WeakSet[ForkRenewable] = weakref.WeakSet()


def renew_after_fork(owner: ForkRenewable) -> None:
    """Has `owner.after_fork_in_child()` run in every child this process forks from now on (while owner lives)."""
    _registered.add(owner)


def _after_fork_in_child() -> None:
    for owner in list(_registered):
        owner.after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
