"""What the runtime renews in a child after `os.fork()`: threads and locks do not survive a fork.

Only the forking thread lives on in the child. A lock another thread held at the fork stays held forever there, and
work another thread (a queue's worker, a thread in the middle of a launch) was doing never finishes. So every object
owning threads or locks registers with `renew_after_fork`, and in the child its `after_fork_in_child()` runs (from
the hook `os.register_at_fork` installs) before any other code of the child. Module-level state (a module's global
lock) registers a plain function with `renew_module_after_fork`; those run first, then the objects, in the order
they registered (a queue engine registers before the device that owns it, so a device sees its engines renewed).
Objects are held weakly. An object may also have a `before_fork()` method, which runs in the parent, in the forking
thread, just before the fork (to note state its child hook compares against).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

__all__ = ["ForkRenewable", "renew_after_fork", "renew_module_after_fork"]


class ForkRenewable(Protocol):
    """What `renew_after_fork` calls in the child."""

    def after_fork_in_child(self) -> None: ...


_module_hooks: list[Callable[[], None]] = []
_registered: list[weakref.ref[ForkRenewable]] = []
_registered_lock = threading.Lock()


def renew_module_after_fork(hook: Callable[[], None]) -> None:
    """Has `hook()` run in every child this process forks from now on, before the objects' hooks."""
    _module_hooks.append(hook)


def renew_after_fork(owner: ForkRenewable) -> None:
    """Has `owner.after_fork_in_child()` run in every child this process forks from now on (while owner lives)."""
    with _registered_lock:
        if len(_registered) >= 64:  # drop the references of collected objects now and then
            _registered[:] = [reference for reference in _registered if reference() is not None]
        _registered.append(weakref.ref(owner))


_cached_properties: list[functools.cached_property[object]] = []
_cached_properties_modules = [0]  # len(sys.modules) when `_cached_properties` was collected


def _collect_cached_properties() -> None:
    # in the parent, before a fork: the cached properties of kiln's classes, collected again when modules were added
    if len(sys.modules) == _cached_properties_modules[0]:
        return
    found: list[functools.cached_property[object]] = []
    for name, module in list(sys.modules.items()):
        if name.startswith("kiln.") and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, type) and value.__module__ == name:
                    found.extend(item for item in vars(value).values() if isinstance(item, functools.cached_property))
    _cached_properties[:] = found
    _cached_properties_modules[0] = len(sys.modules)


def _renew_cached_property_locks() -> None:
    """Python 3.11's `functools.cached_property` computes under one lock per descriptor, shared by every instance of
    the class: a thread of the parent computing one at the fork left it held, and the child hung on that property
    of any object. Renews the locks of the cached properties of kiln's classes (3.12 dropped the lock)."""
    for descriptor in _cached_properties:
        descriptor.lock = threading.RLock()  # type: ignore[attr-defined]


_has_cached_property_lock = sys.version_info < (3, 12)
if _has_cached_property_lock:
    _module_hooks.append(_renew_cached_property_locks)


def _before_fork() -> None:
    if _has_cached_property_lock:
        _collect_cached_properties()
    for reference in list(_registered):
        before = getattr(reference(), "before_fork", None)
        if before is not None:
            before()


def _after_fork_in_child() -> None:
    global _registered_lock
    _registered_lock = threading.Lock()  # another thread may have been registering at the fork
    for hook in _module_hooks:
        hook()
    for reference in list(_registered):
        owner = reference()
        if owner is not None:
            owner.after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
