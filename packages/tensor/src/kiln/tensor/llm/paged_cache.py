"""`PagedCache`: a model's KV memory as paged pools shared by every sequence (kiln.tensor.llm.kv_pool's blocks).

The attention layers fall in at most two groups: the full-attention layers and the sliding-window ones (Mistral's
sliding window, Gemma 2/3's local layers). Each group has one `BlockPool` of `blocks` blocks of `block_size` rows,
and each layer of the group a (key, value) pool of blocks * block_size rows on the device (`allocate_pool`); a
sequence has one `BlockTable` per group, and the same block id addresses the same rows in every layer of its group.

A pass gets, per group, a `PageRows`: the pool row of each new key (`write`) and the rows of each sequence's
positions (`read`), both int32 Tensors built on the host from the block tables, so a new request, a new block or a
copy compiles nothing. A copy-on-write of a shared block is one jitted step over every layer of the group (the
block's rows gathered, then written to the new block). A prompt reuses the beginning that every group holds: the
full-attention group's blocks of it, and the sliding group's blocks that the window of its next position sees.

A decode step writes only its sequences' tail rows: each layer's pool has, after its blocks' rows, a tail of one
block per sequence slot, where a decoding sequence's newest block lives (`PageRows.sources`: the step rewrites those
few rows, where a write through a row map into the blocks' rows rewrote every row up to the highest one written).
Its read map sends the positions the tail holds to the tail's rows. When the block is full, or its sequence ends,
one jitted step per group copies the tail's rows into the block's rows (`_flush`, rows at offsets bound per call);
a block is only shared once its rows are there (a block its holder still writes into is never taken by another
prompt).

The sliding group's blocks wholly behind the window are released after each pass (kept cached while the pool does
not need them), and its pool only needs the blocks its windows span.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln.tensor.jit import TinyJit
from kiln.tensor.llm.kv_pool import SCRATCH_BLOCK, BlockCopy, BlockPool, BlockTable
from kiln.tensor.llm.layers import CachedAttention, PageRows
from kiln.tensor.llm.model import Transformer
from kiln.tensor.symbolic import BoundVariable, Size, Variable, as_size
from kiln.tensor.tensor import Tensor

__all__ = ["DEFAULT_BLOCK_SIZE", "PageGroup", "PagedCache", "Tail", "default_kv_blocks"]

DEFAULT_BLOCK_SIZE = 16
"""Rows per block when no size is given."""


def default_kv_blocks(slots: int, context: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """The blocks of a pool holding what `slots` slots of `context` rows hold (every request at the whole
    context at once), plus a block per slot for a copy-on-write and the scratch block: the slot layout's memory,
    which the pool then shares (a prefix held once, short requests leaving room for more)."""
    return slots * -(-context // block_size) + slots + 1


@dataclass
class PageGroup:
    """The layers sharing one block pool: `window` (None: full attention) and their attention modules; `slots`
    sequence slots, each with a tail block after the pool's blocks."""

    window: int | None
    pool: BlockPool
    layers: list[CachedAttention]
    slots: int = 0
    copy_step: TinyJit[Tensor] | None = None
    flush_step: TinyJit[None] | None = None
    flush_variables: tuple[Variable, Variable, Variable] | None = None
    tail_variable: Variable | None = None
    piece_variables: list[tuple[Variable, Variable, Variable]] = field(default_factory=list)
    tails: list[Tail | None] = field(default_factory=list)
    """Per sequence slot, the block its tail rows hold (None: none)."""

    @property
    def rows(self) -> int:
        """The rows of the blocks in each layer's device pool (the slots' tail blocks follow them)."""
        return self.pool.blocks * self.pool.block_size

    @property
    def buffer_rows(self) -> int:
        """The rows of each layer's device pool: the blocks', then a tail block per sequence slot."""
        return (self.pool.blocks + self.slots) * self.pool.block_size


@dataclass
class Tail:
    """The block of `table` (its `index`-th) whose rows from offset `first` on live in a slot's tail rows (the rows
    before `first` were written into the pool before the tail took the block)."""

    table: BlockTable
    index: int
    first: int


class PagedCache:
    """The paged KV memory of `model` for up to `slots` sequences writing at most `chunk` positions a pass: a pool
    of `blocks` blocks of `block_size` rows for the full-attention layers, and one for the sliding layers sized to
    what `slots` windows span (at most `blocks`).

    Raises:
        ValueError: blocks below 2 or block_size below 1.
    """

    def __init__(self, model: Transformer, blocks: int, block_size: int, slots: int, chunk: int) -> None:
        config = model.config
        attentions = [block.attention for block in model.blk]
        full = [layer for index, layer in enumerate(attentions) if not config.is_sliding(index)]
        sliding = [layer for index, layer in enumerate(attentions) if config.is_sliding(index)]
        self.groups: list[PageGroup] = []
        if full:
            self.groups.append(PageGroup(None, BlockPool(blocks, block_size), full))
        if sliding:
            window = config.sliding_window
            span = -(-(window + chunk - 1) // block_size) + 1
            self.groups.append(PageGroup(window, BlockPool(min(blocks, slots * span + 1), block_size), sliding))
        self.block_size, self.chunk, self.context, self.slots = block_size, chunk, model.max_context, slots
        for index, group in enumerate(self.groups):
            group.slots, group.tails = slots, [None] * slots
            # a flush's block row, tail row and first offset: bound per call, so one capture serves every block
            group.flush_variables = (
                Variable(f"flush_target_{index}", 0, group.rows - block_size),
                Variable(f"flush_source_{index}", group.rows, group.buffer_rows - block_size),
                Variable(f"flush_first_{index}", 0, block_size - 1),
            )
            group.tail_variable = Variable(f"tail_row_{index}", group.rows, group.buffer_rows - 1)
            # a prefill chunk's runs of positions inside one block: (pool row, first key, count), bound per call
            group.piece_variables = [
                (
                    Variable(f"piece_row_{index}_{piece}", 0, group.rows - 1),
                    Variable(f"piece_first_{index}_{piece}", 0, self.chunk - 1),
                    Variable(f"piece_count_{index}_{piece}", 1, block_size),
                )
                for piece in range(-(-self.chunk // block_size) + 1)
            ]
            for layer in group.layers:
                layer.allocate_pool(group.buffer_rows)

    def reusable(self, prompt: list[int]) -> int:
        """How many of the prompt's first tokens every group's cached blocks hold (a sliding group: the blocks its
        window still sees; see `BlockPool.match`)."""
        reused = len(prompt) - 1
        while reused > 0:
            shortest = min(group.pool.match(prompt[: reused + 1], group.window)[1] for group in self.groups)
            if shortest == reused:
                break
            reused = shortest  # a shorter beginning may need a sliding group's earlier blocks: match again
        return max(reused, 0)

    def fits(self, prompt: list[int], most_tokens: int) -> tuple[bool, bool]:
        """Whether `open` succeeds now, and whether it could in empty pools (`BlockPool.fits` of every group)."""
        reused = self.reusable(prompt)
        answers = [group.pool.fits(*self._open_arguments(group, prompt, most_tokens, reused)) for group in self.groups]
        return all(now for now, _ in answers), all(ever for _, ever in answers)

    def _open_arguments(
        self, group: PageGroup, prompt: list[int], most_tokens: int, reused: int
    ) -> tuple[list[int], int, int | None, int]:
        """`BlockPool.open`'s arguments for a group: the prompt cut to match `reused` tokens at most (what every
        group holds); a sliding group writes a chunk between two slides."""
        mine = prompt[: reused + 1]
        if group.window is None:
            return mine, most_tokens, None, 1
        return mine, most_tokens, group.window, self.chunk

    def open(self, prompt: list[int], most_tokens: int) -> tuple[list[BlockTable], int]:
        """A sequence's tables, one per group (see `BlockPool.open`), and the prompt tokens they reuse.

        Raises:
            KVPoolExhausted: a group's pool cannot promise the blocks (no table is left open then).
        """
        tables: list[BlockTable] = []
        reused = self.reusable(prompt)
        try:
            for group in self.groups:
                tables.append(group.pool.open(*self._open_arguments(group, prompt, most_tokens, reused))[0])
        except BaseException:
            for table in tables:
                table.close()
            raise
        return tables, min(table.length for table in tables)

    def write(self, tables: list[BlockTable], start: int, tokens: list[int]) -> None:
        """Makes positions start .. start + len(tokens) - 1 of a sequence writable: the block copies the tables ask
        for are made on the device now."""
        for group, table in zip(self.groups, tables, strict=True):
            for copy in table.write(start, tokens):
                self._copy(group, copy)

    def slide(self, tables: list[BlockTable], position: int) -> None:
        """Releases the sliding groups' blocks that a query at `position` or later no longer sees."""
        for group, table in zip(self.groups, tables, strict=True):
            if group.window is not None:
                table.slide(position, group.window)

    def forget(self, tables: list[BlockTable], start: int) -> None:
        """Forgets the tokens from `start` on (a failed pass left those rows unknown)."""
        for table in tables:
            table.pool.forget(table, start)

    def prefill_pages(
        self, tables: list[BlockTable], start: int, count: int, fresh: int
    ) -> tuple[list[Tensor], list[BoundVariable]]:
        """The inputs of a sequence's prefill chunk over positions start .. start + count - 1: per group the read map
        (1, max_context) int32 (a position nobody holds reads the scratch block), then per group its pieces' bound
        sizes (see `PageRows.pieces`): the chunk's positions from `fresh` on, cut at block ends (a chunk moved back
        from the context's end computes rows the sequence holds already, maybe shared with others since: those are
        not written), and a piece it does not need writes its first key into the scratch block."""
        size, scratch = self.block_size, SCRATCH_BLOCK * self.block_size
        reads, sizes = [], []
        for group, table in zip(self.groups, tables, strict=True):
            read = np.full((1, self.context), scratch, np.int32)
            mapped = table.rows(table.length)
            read[0, : len(mapped)] = mapped
            reads.append(Tensor(read))
            runs, at = [], max(start, fresh)
            while at < start + count:
                stop = min(start + count, (at // size + 1) * size)
                runs.append((table.row(at), at - start, stop - at))
                at = stop
            runs += [(scratch, 0, 1)] * (len(group.piece_variables) - len(runs))
            for variables, values in zip(group.piece_variables, runs, strict=True):
                sizes += [variable.bind(value) for variable, value in zip(variables, values, strict=True)]
        return reads, sizes

    def decode_pages(self, rows: list[list[tuple[BlockTable, int] | None]]) -> tuple[list[Tensor], list[BoundVariable]]:
        """A decode step's inputs from `rows[group][s]` = (table, the position slot s writes) (None: nobody's): per
        group the read map (W, max_context) int32 and the sources (W * block_size,) int32 (see `PageRows.sources`):
        each sequence writes its slot's tail row, and reads the positions its tail holds there. A position nobody
        holds reads the scratch block. A step of one slot (W = 1) takes per group its read map and the pool row it
        writes (a bound Variable) instead. Call `decoded` after the step."""
        size, scratch = self.block_size, SCRATCH_BLOCK * self.block_size
        arrays, written = [], []
        for group, group_rows in zip(self.groups, rows, strict=True):
            read = np.full((len(group_rows), self.context), scratch, np.int32)
            sources = np.zeros(len(group_rows) * size, np.int32)
            for slot, entry in enumerate(group_rows):
                if entry is None:
                    continue
                table, position = entry
                index, offset = divmod(position, size)
                tail = self._tail(group, slot, table, index, offset)
                mapped = table.rows(table.length)
                read[slot, : len(mapped)] = mapped
                start, stop = index * size + tail.first, min(table.length, (index + 1) * size)
                read[slot, start:stop] = group.rows + slot * size + np.arange(tail.first, stop - index * size)
                sources[slot * size + offset] = slot + 1
            if len(group_rows) == 1:
                assert group.tail_variable is not None, "PagedCache sets every group's tail variable"
                written.append(group.tail_variable.bind(group.rows + int(sources.argmax())))
                arrays.append(Tensor(read))
            else:
                arrays += [Tensor(read), Tensor(sources)]
        return arrays, written

    def _tail(self, group: PageGroup, slot: int, table: BlockTable, index: int, offset: int) -> Tail:
        """The slot's tail for block `index` of `table` (a new one from `offset` on, after flushing another)."""
        tail = group.tails[slot]
        if tail is not None and (tail.table is not table or tail.index != index):
            self._flush(group, slot)
            tail = None
        if tail is None:
            tail = group.tails[slot] = Tail(table, index, offset)
        return tail

    def decoded(self, rows: list[list[tuple[BlockTable, int] | None]]) -> None:
        """After a decode step over `rows` (as `decode_pages`): the tails whose block the step filled go to the
        pool."""
        for group, group_rows in zip(self.groups, rows, strict=True):
            for slot, entry in enumerate(group_rows):
                if entry is not None and entry[1] % self.block_size == self.block_size - 1:
                    self._flush(group, slot)

    def _flush(self, group: PageGroup, slot: int) -> None:
        """Copies a slot's tail rows into its block's pool rows in every layer of the group (one jitted step for
        every block and offset), and frees the tail."""
        tail = group.tails[slot]
        group.tails[slot] = None
        if tail is None or tail.table.closed or tail.index >= len(tail.table.blocks):
            return
        block = tail.table.blocks[tail.index]
        if block is None:  # released behind a sliding window
            return
        size = self.block_size
        if group.flush_step is None:

            def flush(target: Tensor, source: Tensor, first: Tensor) -> None:
                offset = as_size(first, "the tail's first offset")
                to = as_size(target, "the flushed block's row") + offset
                start = as_size(source, "the tail's row") + offset
                count = size - offset
                written = []
                for layer in group.layers:
                    for pool in layer.allocate_pool(group.buffer_rows):
                        written.append(pool[:, to : to + count].assign(pool[:, start : start + count]))
                Tensor.realize_all(*written)

            group.flush_step = TinyJit(flush)
        assert group.flush_variables is not None, "PagedCache sets every group's flush variables"
        target, source, first = group.flush_variables
        group.flush_step(target.bind(block * size), source.bind(group.rows + slot * size), first.bind(tail.first))

    def decode_page_rows(self, arrays: list[Tensor], written: list[Size], end: Size) -> list[PageRows]:
        """Inside a jitted decode step: the `PageRows` of each group from its read map (cut to positions 0 ..
        end - 1) and sources, as `decode_pages` made them."""
        if written:  # one slot: its row to write
            return [
                PageRows(group.buffer_rows, arrays[index][:, :end], tail=group.rows, tail_row=written[index])
                for index, group in enumerate(self.groups)
            ]
        return [
            PageRows(group.buffer_rows, arrays[2 * index][:, :end], sources=arrays[2 * index + 1], tail=group.rows)
            for index, group in enumerate(self.groups)
        ]

    def page_rows(self, reads: list[Tensor], sizes: list[Size], end: Size) -> list[PageRows]:
        """Inside a jitted prefill: the `PageRows` of each group from its read map (cut to positions 0 .. end - 1)
        and its pieces' sizes, as `prefill_pages` made them."""
        out, at = [], 0
        for group, read in zip(self.groups, reads, strict=True):
            count = len(group.piece_variables)
            flat = sizes[at : at + 3 * count]
            at += 3 * count
            pieces = tuple((flat[3 * i], flat[3 * i + 1], flat[3 * i + 2]) for i in range(count))
            out.append(PageRows(group.buffer_rows, read[:, :end], pieces=pieces))
        return out

    def model_pages(self, rows: list[PageRows]) -> tuple[PageRows, PageRows | None]:
        """The (full-attention, sliding) rows a model pass takes (a model of sliding layers only: both the same)."""
        by_window = {group.window is None: page for group, page in zip(self.groups, rows, strict=True)}
        full = by_window.get(True, by_window.get(False))
        assert full is not None, "a model has at least one attention layer"
        return full, by_window.get(False)

    def _copy(self, group: PageGroup, copy: BlockCopy) -> None:
        """Copies a block's rows to another block in every layer of the group (one jitted step for every copy)."""
        if group.copy_step is None:

            def copy_rows(source: Tensor, target: Tensor) -> Tensor:
                written = []
                for layer in group.layers:
                    for pool in layer.allocate_pool(group.buffer_rows):
                        pool[:, target] = pool[:, source]
                        written.append(pool)
                Tensor.realize_all(*written)
                return source + 0

            group.copy_step = TinyJit(copy_rows)
        size = self.block_size
        source = np.arange(copy.source * size, (copy.source + 1) * size, dtype=np.int32)
        target = np.arange(copy.target * size, (copy.target + 1) * size, dtype=np.int32)
        group.copy_step(Tensor(source), Tensor(target)).realize()

    def close(self, tables: list[BlockTable]) -> None:
        """Gives a sequence's blocks back (cached for later prompts while the pool does not need them), its tail
        rows copied into the pool first (a later prompt may take that block)."""
        for group, table in zip(self.groups, tables, strict=True):
            for slot, tail in enumerate(group.tails):
                if tail is not None and tail.table is table:
                    self._flush(group, slot)
            table.close()

    def pool_bytes(self) -> int:
        """The bytes of every layer's device pools (their tails included)."""
        pools = [layer.allocate_pool(group.buffer_rows) for group in self.groups for layer in group.layers]
        return sum(t.numel() * t.dtype.itemsize for pair in pools for t in pair)

    def held_blocks(self) -> list[int]:
        """The blocks sequences hold now, per group."""
        return [group.pool.held for group in self.groups]
