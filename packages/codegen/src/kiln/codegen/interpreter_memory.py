"""The reference interpreter's machine: the launch grid, memory objects and pointers, the run state, and every
memory access with its checks (out of bounds, never-written reads, data races between threads).

`interpreter.py` runs a program's steps over this state; a LOAD or STORE step calls `load` / `store` here. Races are
tracked only while more than one thread runs (`RunState.track`): each element of a tracked memory remembers its
last writer (and, for local memory, its readers) and the barrier interval of that access.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.codegen.kernel_signature import CORE_ID
from kiln.codegen.numpy_semantics import Array, compute_dtype, from_storage, storage_dtype, to_storage
from kiln.uops import DType, MemoryScope

__all__ = [
    "DataRaceError",
    "InterpreterError",
    "LastAccess",
    "LaunchGrid",
    "Loop",
    "Memory",
    "Pointer",
    "RunState",
    "read",
    "start_tracking",
    "write",
]


class InterpreterError(RuntimeError):
    """A linear program did something undefined while it ran (out-of-bounds access, divergent barrier, ...)."""


class DataRaceError(InterpreterError):
    """Two threads touched one memory element without a barrier ordering them (a result would depend on timing)."""


@dataclass(frozen=True)
class LaunchGrid:
    """The threads of one launch: `cores` x global blocks x local threads, thread ids running fastest over lidx0."""

    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int]
    cores: int = 1

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.local_size)

    @property
    def blocks(self) -> int:
        return self.cores * math.prod(self.global_size)

    @property
    def threads(self) -> int:
        return self.blocks * self.threads_per_block

    def special_values(self) -> dict[str, Array]:
        """The value of every SPECIAL name for every thread."""
        thread = np.arange(self.threads, dtype=np.int64)
        local, block = thread % self.threads_per_block, thread // self.threads_per_block
        grid_block = block % math.prod(self.global_size)
        values: dict[str, Array] = {CORE_ID: block // math.prod(self.global_size)}
        for dim in range(3):
            values[f"lidx{dim}"] = local % self.local_size[dim]
            local = local // self.local_size[dim]
            values[f"gidx{dim}"] = grid_block % self.global_size[dim]
            grid_block = grid_block // self.global_size[dim]
        return values


@dataclass(frozen=True)
class LastAccess:
    """Of each element of a tracked memory: the thread of its last access of one kind (-1: none yet; -2: several
    readers) and the barrier epoch it happened in."""

    thread: Array
    epoch: Array

    @classmethod
    def none_yet(cls, shape: tuple[int, ...]) -> LastAccess:
        return cls(np.full(shape, -1, np.int64), np.zeros(shape, np.int64))


@dataclass
class Memory:
    """One memory object: `data` has a row per instance (1 global, 1 per block local, 1 per thread register)."""

    name: str
    dtype: DType
    scope: MemoryScope
    data: Array
    row_of_thread: Array
    initialized: Array | None = None
    writes: LastAccess | None = None
    reads: LastAccess | None = None

    @property
    def size(self) -> int:
        return int(self.data.shape[1])


@dataclass(frozen=True)
class Pointer:
    memory: Memory
    offset: Array  # (rows,) scalar offsets, or (rows, lanes) one address per lane
    gate: Array | None


@dataclass
class Loop:
    range_position: int
    iteration: int
    stop: int
    size: Array
    outer_mask: Array | None


@dataclass
class RunState:
    grid: LaunchGrid
    values: list[Any]
    mask: Array | None = None
    mask_stack: list[Array | None] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    epoch: int = 0

    @property
    def track(self) -> bool:
        """Whether accesses are checked for data races (only when more than one thread runs)."""
        return self.grid.threads > 1


# ---- memory access ---------------------------------------------------------------------------------------------------


# ---- memory access -----------------------------------------------------------------------------------------


def access(
    state: RunState, pointer: Pointer, lanes: int, gate: Array | None
) -> tuple[Array, Array, Array | None, Array | None]:
    """Rows, addresses, running lanes (None: all) and thread ids (None: untracked) of an access, all (n, lanes)."""
    memory = pointer.memory
    offset = pointer.offset.astype(np.int64)
    addresses = offset if offset.ndim == 2 else offset[:, None] + np.arange(lanes, dtype=np.int64)
    rows = memory.row_of_thread[:, None]
    running = _all_of(pointer.gate, gate, state.mask)
    shapes = [addresses.shape, rows.shape] + ([running.shape] if running is not None else [])
    threads = None
    if state.track and memory.writes is not None:
        shapes.append((state.grid.threads, 1))
    shape = np.broadcast_shapes(*shapes)
    addresses, rows = np.broadcast_to(addresses, shape), np.broadcast_to(rows, shape)
    if running is not None:
        running = np.broadcast_to(running, shape)
        if running.all():
            running = None
    if state.track and memory.writes is not None:
        threads = np.broadcast_to(np.arange(state.grid.threads)[:, None], shape)
    outside = (addresses < 0) | (addresses >= memory.size)
    if running is not None:
        outside = outside & running
    if outside.any():
        where = np.argwhere(outside)[0]
        raise InterpreterError(
            f"out-of-bounds access to {memory.name} (size {memory.size}): address {addresses[tuple(where)]} "
            f"in thread row {where[0]}"
        )
    if running is not None:
        addresses = np.where(running, addresses, 0)
    return rows, addresses, running, threads


def contiguous(state: RunState, pointer: Pointer, lanes: int, gate: Array | None) -> slice | None:
    """The elements of an ungated, unmasked, untracked access at one address (one thread in loops)."""
    offset = pointer.offset
    if state.track or state.mask is not None or pointer.gate is not None or gate is not None:
        return None
    if offset.ndim != 1 or offset.shape[0] != 1 or pointer.memory.row_of_thread.shape[0] != 1:
        return None
    start = int(offset[0])
    if start < 0 or start + lanes > pointer.memory.size:
        raise InterpreterError(
            f"out-of-bounds access to {pointer.memory.name} (size {pointer.memory.size}): address {start}"
        )
    return slice(start, start + lanes)


def read(state: RunState, pointer: Pointer, dtype: DType, alternative: Array | None, gate: Array | None) -> Array:
    """The values a LOAD of `dtype` through `pointer` reads (gated-off lanes give `alternative`, default 0)."""
    memory = pointer.memory
    lanes = dtype.count
    elements = contiguous(state, pointer, lanes, gate)
    if elements is not None:
        row = int(memory.row_of_thread[0])
        if memory.initialized is not None and not memory.initialized[row, elements].all():
            raise InterpreterError(f"read of never-written {memory.name} at addresses {elements.start}..")
        values = from_storage(memory.data[row, elements].copy(), memory.dtype)  # a copy: later stores must not show
        return values[None, :] if dtype.count > 1 else values
    if memory.size == 0:
        raw = np.zeros((1, lanes), storage_dtype(memory.dtype))
        rows = addresses = np.zeros((1, lanes), np.int64)
        running: Array | None = np.zeros((1, lanes), bool)
        threads = None
    else:
        rows, addresses, running, threads = access(state, pointer, lanes, gate)
        raw = memory.data[rows, addresses]
    if memory.initialized is not None:
        uninitialized = ~memory.initialized[rows, addresses]
        if running is not None:
            uninitialized &= running
        if uninitialized.any():
            raise InterpreterError(f"read of never-written {memory.name} at address {addresses[uninitialized][0]}")
    if threads is not None:
        _check_read(memory, rows, addresses, running, threads, state)
    values = from_storage(raw, memory.dtype)
    enabled = _all_of(pointer.gate, gate)
    if enabled is not None:
        fallback = alternative if alternative is not None else np.zeros(1, compute_dtype(dtype))
        values = np.where(enabled, values, fallback if fallback.ndim == 2 else fallback[:, None])
    return values if dtype.count > 1 else values[:, 0]


def write(state: RunState, pointer: Pointer, value: Array, dtype: DType, gate: Array | None) -> None:
    """Write `value` through `pointer` for every running, gated-on lane."""
    memory = pointer.memory
    elements = contiguous(state, pointer, dtype.count, gate)
    if elements is not None:
        row = int(memory.row_of_thread[0])
        memory.data[row, elements] = to_storage(value, memory.dtype).reshape(-1)
        if memory.initialized is not None:
            memory.initialized[row, elements] = True
        return
    if memory.size == 0:
        return
    rows, addresses, running, threads = access(state, pointer, dtype.count, gate)
    raw = to_storage(value if value.ndim == 2 else value[:, None], memory.dtype)
    raw = np.broadcast_to(raw, rows.shape)
    if running is not None:
        rows, addresses, raw = rows[running], addresses[running], raw[running]
        threads = threads[running] if threads is not None else None
    if threads is not None:
        _check_write(memory, rows.reshape(-1), addresses.reshape(-1), raw.reshape(-1), threads.reshape(-1), state)
    memory.data[rows, addresses] = raw
    if memory.initialized is not None:
        memory.initialized[rows, addresses] = True


def _all_of(*conditions: Array | None) -> Array | None:
    """The lanes where every given condition holds, as (rows, lanes) or (rows, 1); None when none is given."""
    result: Array | None = None
    for condition in conditions:
        if condition is not None:
            condition = condition if condition.ndim == 2 else condition[:, None]
            result = condition if result is None else result & condition
    return result


# ---- race tracking (only when more than one thread runs) -----------------------------------------------------------


def start_tracking(memory: Memory, readers: bool) -> None:
    shape = memory.data.shape
    memory.writes = LastAccess.none_yet(shape)
    if readers:
        memory.reads = LastAccess.none_yet(shape)


def _unordered(state: RunState, earlier: Array, earlier_epoch: Array, thread: Array) -> Array:
    # an earlier access by another thread is ordered before this one only by a barrier of their common block
    per_block = state.grid.threads_per_block
    ordered = (earlier // per_block == thread // per_block) & (earlier_epoch < state.epoch)
    return np.asarray((earlier >= 0) & (earlier != thread) & ~ordered)


def _check_read(
    memory: Memory, rows: Array, addresses: Array, running: Array | None, threads: Array, state: RunState
) -> None:
    if running is not None:
        rows, addresses, threads = rows[running], addresses[running], threads[running]
    rows, addresses, threads = rows.reshape(-1), addresses.reshape(-1), threads.reshape(-1)
    writes, reads = memory.writes, memory.reads
    assert writes is not None
    writer = writes.thread[rows, addresses]
    racing = _unordered(state, writer, writes.epoch[rows, addresses], threads)
    if racing.any():
        k = int(np.argmax(racing))
        raise DataRaceError(
            f"thread {threads[k]} reads {memory.name}[{addresses[k]}] written by thread {writer[k]} "
            f"without a barrier between them"
        )
    if reads is None or threads.size == 0:
        return
    # remember who read each element in this barrier interval: one thread id, or -2 for several
    previous = np.where(reads.epoch[rows, addresses] == state.epoch, reads.thread[rows, addresses], -1)
    keys = rows * memory.size + addresses
    unique, inverse = np.unique(keys, return_inverse=True)
    low = np.full(unique.shape, np.iinfo(np.int64).max)
    high = np.full(unique.shape, -1)
    np.minimum.at(low, inverse, threads)
    np.maximum.at(high, inverse, threads)
    several = (low[inverse] != high[inverse]) | ((previous != -1) & (previous != threads))
    reads.thread[rows, addresses] = np.where(several, -2, threads)
    reads.epoch[rows, addresses] = state.epoch


def _check_write(memory: Memory, rows: Array, addresses: Array, raw: Array, threads: Array, state: RunState) -> None:
    writes, reads = memory.writes, memory.reads
    assert writes is not None
    if threads.size == 0:
        return
    bits = raw.view(np.dtype(f"u{raw.dtype.itemsize}")) if raw.dtype != np.bool_ else raw
    old = memory.data[rows, addresses]
    old_bits = old.view(np.dtype(f"u{old.dtype.itemsize}")) if old.dtype != np.bool_ else old
    changes = bits != old_bits
    writer = writes.thread[rows, addresses]
    racing = _unordered(state, writer, writes.epoch[rows, addresses], threads) & changes
    what = "writes a different value than thread {other} wrote"
    if reads is not None:
        reader = reads.thread[rows, addresses]
        current = reads.epoch[rows, addresses] == state.epoch
        read_race = current & (reader != -1) & (reader != threads) & changes
        if read_race.any() and not racing.any():
            racing, writer, what = read_race, reader, "overwrites a value thread {other} (-2: several) read"
    # two threads of this very step writing different values to one element
    keys = rows * memory.size + addresses
    order = np.lexsort((threads, keys))
    same = keys[order][1:] == keys[order][:-1]
    clash = same & (bits[order][1:] != bits[order][:-1]) & (threads[order][1:] != threads[order][:-1])
    if clash.any() and not racing.any():
        k = int(order[1:][np.argmax(clash)])
        other = int(threads[order[:-1][np.argmax(clash)]])
        racing = np.zeros_like(racing)
        racing[k] = True
        writer = np.full_like(writer, other)
        what = "writes a different value than thread {other} in the same step"
    if racing.any():
        k = int(np.argmax(racing))
        raise DataRaceError(
            f"thread {threads[k]} {what.format(other=writer[k])} to {memory.name}[{addresses[k]}] without a barrier"
        )
    writes.thread[rows, addresses] = threads
    writes.epoch[rows, addresses] = state.epoch
