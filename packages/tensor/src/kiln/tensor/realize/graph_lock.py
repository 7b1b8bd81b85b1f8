"""The lock that lets several threads use kiln: the tensor layer's shared state changes under it, one thread at a time.

Threads that share an engine (the process's, by default) share its state: the live tensors a write must rebind
(`Engine.tensors`), the record of which node was realized into which buffer (`schedule.normalize`), and the
engine's caches (plans, compiled methods, constant buffers, the placeholder memo of normalizing). Each of these is
read and then changed in several steps, so two threads interleaving them broke invariants: a write found a realized
reader and, before it could rebuild the reader over the new node, another thread's write had forgotten that node
(a bare AssertionError in `_view_over`); a sweep of dead tensors could drop the entry a new tensor at the same
address had just made. Realizing, writing and tracking tensors therefore run under `graph_lock`; building graphs
(hash-consed, immutable nodes) and kernels running on the devices' queues stay concurrent.

The lock is reentrant: a write realizes its schedule, and realizing one node compiles its kernels, each of which
takes the lock again on the same thread. `os.fork()` waits for it: a child forked while another thread held it
would find it held forever by a thread the child does not have (its first realize hung), and the state it guards
half changed.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["graph_lock", "serialized"]

graph_lock = threading.RLock()
"""Held while a thread realizes, writes or registers tensors (see the module doc)."""

if hasattr(os, "register_at_fork"):  # POSIX: the forking thread holds the lock across the fork, in both processes
    os.register_at_fork(
        before=graph_lock.acquire, after_in_parent=graph_lock.release, after_in_child=graph_lock.release
    )

_P = ParamSpec("_P")
_R = TypeVar("_R")


def serialized(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """`function`, run while holding `graph_lock`."""

    @functools.wraps(function)
    def under_lock(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with graph_lock:
            return function(*args, **kwargs)

    return under_lock
