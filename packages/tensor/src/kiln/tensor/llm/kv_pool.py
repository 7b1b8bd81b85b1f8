"""`BlockPool`: the bookkeeping of a paged KV cache, one pool of fixed-size blocks shared by every sequence.

The cache rows of a group of attention layers (kiln.tensor.llm.paged_cache) are cut into `blocks` blocks of
`block_size` rows each; a sequence's `BlockTable` lists the block holding each `block_size` of its positions, so
position p sits in row `table.blocks[p // block_size] * block_size + p % block_size` of the pool. Block 0 is the
scratch block: never handed out, it is where a padded row of a step writes and reads (masked) values.

Prefix sharing, as vLLM does it: every block remembers the tokens its rows hold and the digest of the tokens before
it (the chain of its full predecessors), so a new sequence whose prompt begins with the same tokens at the same
block-aligned positions takes those blocks (their reference count goes up) instead of computing them again. A block
shared by several sequences, or holding tokens past the ones a sequence matched, is copied before that sequence
writes into it (copy-on-write: `BlockTable.write` returns the copies the device must make first). A block nobody
holds any more keeps its tokens in a least-recently-used list and serves later prompts until the pool needs it.

Memory is promised before it is used: `open` reserves the blocks a sequence can at most need (its prompt plus its
`max_tokens`; a sliding-window table the blocks its window spans), so a running sequence never finds the pool empty; a
request the pool cannot promise raises `KVPoolExhausted` at once, naming what it needs and what is free.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ROOT", "SCRATCH_BLOCK", "BlockCopy", "BlockPool", "BlockTable", "KVPoolExhausted"]

SCRATCH_BLOCK = 0
"""The block no sequence owns: padded rows of a step write there and their reads are masked."""
ROOT = b""
"""The digest before the first block of every sequence."""


class KVPoolExhausted(RuntimeError):
    """The pool cannot promise the blocks a new sequence may need (the request may wait for others to end)."""


@dataclass(frozen=True)
class BlockCopy:
    """A copy the device makes before a write: rows 0 .. rows - 1 of block `source` into block `target`."""

    source: int
    target: int
    rows: int


def _digest(parent: bytes, tokens: list[int]) -> bytes:
    """The digest of a full block's tokens after the blocks whose digest is `parent`."""
    data = parent + b"".join(token.to_bytes(8, "little", signed=True) for token in tokens)
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass(eq=False)
class BlockTable:
    """One sequence's blocks in a pool: `blocks[i]` holds its positions i * block_size .. (i + 1) * block_size - 1
    (None: released, outside a sliding window); `length` positions are written; `reserved` blocks are promised to
    it and not taken yet."""

    pool: BlockPool
    blocks: list[int | None] = field(default_factory=list)
    length: int = 0
    reserved: int = 0
    closed: bool = False
    digests: list[bytes] = field(default_factory=list)
    """The digest of the tokens up to the end of each of its first full blocks (the parents of the next)."""

    def row(self, position: int) -> int:
        """The pool row of a written position."""
        block = self.blocks[position // self.pool.block_size]
        if block is None:
            raise IndexError(f"position {position} lies in a block released outside the window")
        return block * self.pool.block_size + position % self.pool.block_size

    def rows(self, count: int) -> np.ndarray:
        """The pool rows of positions 0 .. count - 1 (a released block's positions read the scratch block's rows,
        which a sliding layer's mask hides)."""
        size = self.pool.block_size
        blocks = [SCRATCH_BLOCK if block is None else block for block in self.blocks[: -(-count // size)]]
        blocks += [SCRATCH_BLOCK] * (-(-count // size) - len(blocks))
        starts = np.array(blocks, np.int64).reshape(-1, 1) * size
        return (starts + np.arange(size)).reshape(-1)[:count]

    def write(self, start: int, tokens: list[int]) -> list[BlockCopy]:
        """Makes positions start .. start + len(tokens) - 1 writable for `tokens` (start <= length: a sequence
        writes after its rows, or over its own last ones again) and records their tokens; returns the block copies
        the device must make before it writes (copy-on-write of shared blocks)."""
        return self.pool.write(self, start, tokens)

    def slide(self, position: int, window: int) -> int:
        """Releases the blocks no query at `position` or later sees through a window of `window` keys (every row
        at or before position - window); returns how many were released."""
        return self.pool.slide(self, position, window)

    def close(self) -> None:
        """Gives back every block and the unused promise (a block with tokens stays cached for later prompts)."""
        self.pool.close(self)


class BlockPool:
    """`blocks` blocks of `block_size` rows (block 0 the scratch block) with reference counts, prefix digests and
    an LRU of cached free blocks (see the module docstring).

    Raises:
        ValueError: blocks below 2 or block_size below 1.
    """

    def __init__(self, blocks: int, block_size: int) -> None:
        for name, value, least in (("blocks", blocks, 2), ("block_size", block_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        self.blocks, self.block_size = blocks, block_size
        self.references = [0] * blocks
        self.tokens: list[list[int]] = [[] for _ in range(blocks)]  # the token in each written row of a block
        self.parents: list[bytes | None] = [None] * blocks  # the digest before a block holding tokens
        self.children: dict[bytes, dict[int, None]] = {}  # parent digest -> the blocks after it
        self.unused = list(range(blocks - 1, SCRATCH_BLOCK, -1))  # never written or evicted: popped lowest first
        self.cached: OrderedDict[int, None] = OrderedDict()  # nobody holds them, their tokens kept: oldest first
        self.promised = 0  # blocks reserved by open tables and not taken yet

    # -- counts ----------------------------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """The blocks sequences can hold (all but the scratch block)."""
        return self.blocks - 1

    @property
    def held(self) -> int:
        """The blocks some sequence holds now."""
        return sum(1 for count in self.references if count > 0)

    @property
    def available(self) -> int:
        """The blocks a new sequence can be promised: unused or cached, less those promised already."""
        return len(self.unused) + len(self.cached) - self.promised

    # -- sequences -------------------------------------------------------------------------------------------------
    def match(self, prompt: list[int], window: int | None = None) -> tuple[list[int | None], int]:
        """The cached blocks holding the longest beginning of `prompt` (at most len(prompt) - 1 tokens: the last
        one is computed again for its logits) and how many tokens they hold; the last block may hold it partly. A
        block not yet full that a sequence holds is not taken (that sequence writes on into it). With a sliding
        `window`, only the blocks of the positions the next query sees are needed (the keys before them are
        hidden): the blocks before those are None, cached or not; and only blocks nobody holds are taken (a window
        table holds its blocks alone, so that each block it releases is free again: see `open`)."""
        found, matched, _ = self._match(prompt, window)
        return found, matched

    def _match(self, prompt: list[int], window: int | None) -> tuple[list[int | None], int, list[bytes]]:
        """`match`, and the digests of the prompt's full blocks up to the tokens matched."""
        limit, size = len(prompt) - 1, self.block_size
        entries: list[tuple[int, int] | None] = []  # per block of the prompt: the cached block holding it, length
        digests: list[bytes] = []
        while len(entries) * size < limit:
            wanted = prompt[len(entries) * size : min((len(entries) + 1) * size, limit)]
            best, length = self._cached_child(digests[-1] if digests else ROOT, wanted, window is not None)
            entries.append((best, length) if length else None)
            if len(wanted) < size or (window is None and length < size):
                break
            digests.append(_digest(digests[-1] if digests else ROOT, wanted))
        for last in range(len(entries) - 1, -1, -1):
            entry = entries[last]
            if entry is None or (window is None and last > 0 and entries[last - 1] is None):
                continue
            matched = last * size + entry[1]
            first = 0 if window is None else max(matched - window + 1, 0) // size  # the first block still seen
            held = entries[first:last]
            if all(item is not None and item[1] == size for item in held):
                found: list[int | None] = [None] * first
                found += [item[0] for item in entries[first : last + 1] if item is not None]
                return found, matched, digests[: matched // size]
        return [], 0, []

    def _cached_child(self, parent: bytes, wanted: list[int], free_only: bool) -> tuple[int, int]:
        """The block after digest `parent` holding the longest beginning of `wanted` and that length (-1, 0: none);
        `free_only`: a block nobody holds."""
        best, best_length = -1, 0
        for block in self.children.get(parent, {}):
            held = self.tokens[block]
            if self.references[block] > 0 and (free_only or len(held) < self.block_size):
                continue  # its holder still writes into it (a copy it was never promised), or a window table's
            length = 0
            while length < len(wanted) and length < len(held) and held[length] == wanted[length]:
                length += 1
            if length > best_length:
                best, best_length = block, length
        return best, best_length

    def open(
        self, prompt: list[int], most_tokens: int, window: int | None = None, largest_write: int = 1
    ) -> tuple[BlockTable, int]:
        """A table for a sequence of `prompt` that will hold at most `most_tokens` positions (prompt included): the
        cached blocks of its beginning taken (`match`), the blocks it may still need promised. A table with a
        sliding `window` takes the cached blocks its window still sees (`match`) and is promised the blocks a window
        spans (before the largest write it makes between two `slide`s, `largest_write` positions), each block it
        releases promised back. Returns (table, tokens reused).

        Raises:
            KVPoolExhausted: the pool cannot promise those blocks now (`fits` says whether it ever can).
        """
        found, matched, promise, cached, digests = self._plan(prompt, most_tokens, window, largest_write)
        if promise + cached > self.available:
            raise KVPoolExhausted(
                f"the KV pool cannot hold another sequence of {most_tokens} positions: it needs {promise} more "
                f"blocks of {self.block_size} rows, {self.available - cached} of {self.capacity} are free; "
                "wait for a running sequence to end or give the pool more blocks"
            )
        for block in found:
            if block is not None:
                self._take(block)
        table = BlockTable(self, list(found), matched, promise, digests=digests)
        self.promised += promise
        return table, matched

    def fits(
        self, prompt: list[int], most_tokens: int, window: int | None = None, largest_write: int = 1
    ) -> tuple[bool, bool]:
        """Whether `open` with these arguments succeeds now, and whether it could in an otherwise empty pool."""
        _, _, promise, cached, _ = self._plan(prompt, most_tokens, window, largest_write)
        alone = self._plan([], most_tokens, window, largest_write)[2]
        return promise + cached <= self.available, alone <= self.capacity

    def _plan(
        self, prompt: list[int], most_tokens: int, window: int | None, largest_write: int
    ) -> tuple[list[int | None], int, int, int, list[bytes]]:
        """(the cached blocks it takes, the tokens they hold, the blocks to promise, how many of the taken blocks
        leave the cached list, the digests of its full blocks) of an `open`."""
        size = self.block_size
        needed = -(-most_tokens // size)
        found, matched, digests = self._match(prompt, window) if prompt else ([], 0, [])
        if window is not None:  # each block it releases is free again and promised back to it
            needed = min(needed, -(-(window + largest_write - 1) // size) + 1)
        taken = [block for block in found if block is not None]
        partial = matched % size != 0  # its last matched block is written into: maybe a copy
        promise = max(needed - len(taken), 0) + (1 if partial else 0)
        return found, matched, promise, sum(1 for block in taken if self.references[block] == 0), digests

    def write(self, table: BlockTable, start: int, tokens: list[int]) -> list[BlockCopy]:
        """`BlockTable.write`."""
        if table.closed:
            raise RuntimeError("the sequence's blocks were given back; it cannot write any more")
        if not 0 <= start <= table.length:
            raise ValueError(f"a write must start at or before the {table.length} written positions, got {start}")
        size, copies = self.block_size, []
        end = start + len(tokens)
        for index in range(start // size, -(-end // size)):
            first, last = max(start, index * size), min(end, (index + 1) * size)  # positions written in this block
            offset = first - index * size
            written = tokens[first - start : last - start]
            if index == len(table.blocks):
                block = self._new_block(table)
                table.blocks.append(block)
            else:
                held = table.blocks[index]
                if held is None:
                    raise ValueError(f"positions {first}..{last - 1} lie in a block released outside the window")
                block = held
                if self.references[block] > 1:  # another sequence reads these rows: write into a copy
                    copy = self._new_block(table)
                    copies.append(BlockCopy(block, copy, offset))
                    self.tokens[copy] = self.tokens[block][:offset]
                    self._drop(block)
                    block = table.blocks[index] = copy
            self._record(table, index, block, offset, written)
        table.length = max(table.length, end)
        return copies

    def slide(self, table: BlockTable, position: int, window: int) -> int:
        """`BlockTable.slide`."""
        released = 0
        for index in range(min(max(position - window + 1, 0) // self.block_size, len(table.blocks))):
            block = table.blocks[index]
            if block is not None:
                self._drop(block)
                table.blocks[index] = None
                released += 1
        table.reserved += released  # a window's table holds its blocks alone: each one released is free again
        self.promised += released
        return released

    def close(self, table: BlockTable) -> None:
        """`BlockTable.close` (a second close does nothing)."""
        if table.closed:
            return
        table.closed = True
        for block in table.blocks:
            if block is not None:
                self._drop(block)
        table.blocks = []
        self.promised -= table.reserved
        table.reserved = 0

    def forget(self, table: BlockTable, start: int) -> None:
        """Forgets the tokens of the table's positions from `start` on (a failed step left their rows unknown):
        their blocks no longer match any prompt there."""
        size = self.block_size
        del table.digests[start // size :]
        for index in range(start // size, len(table.blocks)):
            block = table.blocks[index]
            if block is not None:
                kept = max(start - index * size, 0)
                self._unlink(block)
                self.tokens[block] = self.tokens[block][:kept]
                self._link(block, self._parent_of(table, index))
        table.length = min(table.length, start)

    # -- blocks ----------------------------------------------------------------------------------------------------
    def _take(self, block: int) -> None:
        if self.references[block] == 0:
            self.cached.pop(block, None)
        self.references[block] += 1

    def _drop(self, block: int) -> None:
        self.references[block] -= 1
        assert self.references[block] >= 0, f"block {block} released more often than taken"
        if self.references[block] == 0:
            if self.tokens[block]:
                self.cached[block] = None
            else:
                self._unlink(block)
                self.unused.append(block)

    def _new_block(self, table: BlockTable) -> int:
        """A block for the table out of its promise: an unused one, else the least recently used cached one (its
        tokens forgotten)."""
        if table.reserved == 0:
            raise KVPoolExhausted(f"the sequence wrote past the {len(table.blocks)} blocks promised to it")
        table.reserved -= 1
        self.promised -= 1
        if self.unused:
            block = self.unused.pop()
        else:
            block, _ = self.cached.popitem(last=False)
            self._unlink(block)
            self.tokens[block] = []
        self.references[block] = 1
        return block

    def _record(self, table: BlockTable, index: int, block: int, offset: int, written: list[int]) -> None:
        self._unlink(block)
        self.tokens[block] = self.tokens[block][:offset] + written
        del table.digests[index:]
        parent = self._parent_of(table, index)
        self._link(block, parent)
        if parent is not None and len(self.tokens[block]) == self.block_size:  # kept when a window releases it
            table.digests.append(_digest(parent, self.tokens[block]))

    def _parent_of(self, table: BlockTable, index: int) -> bytes | None:
        """The digest of the table's tokens before its block `index` (None when a block before it is released or
        not full: then the block cannot be matched)."""
        while len(table.digests) < index:
            earlier = table.blocks[len(table.digests)]
            if earlier is None or len(self.tokens[earlier]) != self.block_size:
                return None
            table.digests.append(_digest(table.digests[-1] if table.digests else ROOT, self.tokens[earlier]))
        return table.digests[index - 1] if index else ROOT

    def _link(self, block: int, parent: bytes | None) -> None:
        if parent is not None and self.tokens[block]:
            self.parents[block] = parent
            self.children.setdefault(parent, {})[block] = None

    def _unlink(self, block: int) -> None:
        parent = self.parents[block]
        if parent is not None:
            siblings = self.children[parent]
            del siblings[block]
            if not siblings:
                del self.children[parent]
            self.parents[block] = None
