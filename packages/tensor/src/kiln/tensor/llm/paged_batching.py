"""`PagedBatchedGenerator`: continuous batching over a paged KV pool shared by every sequence.

The same requests, steps and results as `BatchedGenerator` (kiln.tensor.llm.batching), with the KV memory of
kiln.tensor.llm.paged_cache instead of one (max_context)-row cache per slot: a sequence holds the blocks its
positions fill, a prompt whose beginning another sequence wrote (running or ended, in any slot) takes those blocks
and prefills only the rest, a sliding-window layer gives back the blocks its window has left, and a request the pool
cannot promise its blocks (its prompt plus `max_tokens`) now waits in `waiting` until running ones give theirs back
(each `step` places the waiting ones first, oldest first), never running out in the middle of its decode; one
that needs more blocks than the whole pool has is refused at `join` with `KVPoolExhausted` (a RuntimeError).
Requests that arrive together sharing a beginning (a system prompt) share its blocks too: one whose prompt begins
with a block or more that a prefilling sequence is still writing waits in `waiting` until those blocks are written,
then takes them and prefills only the rest.

The jitted steps take each group's write rows and read maps as int32 Tensors (kiln.tensor.llm.layers.PageRows)
besides the tokens, positions and sampling parameters; the prefill writes its chunk's rows through the map and reads
its positions 0 .. end - 1, the decode step writes one row per slot and reads each slot's rows 0 .. end - 1 (`end`
a bound Variable), so nothing compiles for a new request, block or position. A slot nobody decodes in writes and
reads the scratch block.
"""

from __future__ import annotations

import time

import numpy as np

from kiln.tensor.jit import TinyJit
from kiln.tensor.llm.batching import DEFAULT_SLOTS, JOIN_CHUNK, BatchedGenerator, Sequence, _with_logits, chosen_tokens
from kiln.tensor.llm.kv_pool import BlockTable, KVPoolExhausted
from kiln.tensor.llm.paged_cache import DEFAULT_BLOCK_SIZE, PagedCache
from kiln.tensor.llm.sampling import SamplingMode, sample_on_device
from kiln.tensor.llm.weights import LoadedModel
from kiln.tensor.symbolic import as_size
from kiln.tensor.tensor import Tensor

__all__ = ["PagedBatchedGenerator"]


class PagedBatchedGenerator(BatchedGenerator):
    """`BatchedGenerator` (same methods, same results) over a paged KV pool of `kv_blocks` blocks of `block_size`
    rows per layer group (see the module docstring); `slots` bounds the sequences decoded together.

    Raises:
        ValueError: slots, prefill_chunk or block_size below 1, kv_blocks below 2.
    """

    def __init__(
        self,
        loaded: LoadedModel,
        slots: int = DEFAULT_SLOTS,
        prefill_chunk: int = JOIN_CHUNK,
        *,
        kv_blocks: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
    ) -> None:
        self.kv_blocks, self.block_size = kv_blocks, block_size
        self.tables: dict[Sequence, list[BlockTable]] = {}
        self.waiting: list[Sequence] = []  # joined, waiting for the pool to promise their blocks (oldest first)
        self.paged_prefills: dict[tuple[SamplingMode, bool], TinyJit[Tensor]] = {}
        self.paged_steps: dict[tuple[SamplingMode, int, bool], TinyJit[Tensor]] = {}
        super().__init__(loaded, slots, prefill_chunk)

    def _allocate(self) -> None:
        self.cache = PagedCache(self.model, self.kv_blocks, self.block_size, self.slots, self.chunk)

    # -- the jitted steps ------------------------------------------------------------------------------------------
    def paged_prefill_step(self, mode: SamplingMode, logits: bool = False) -> TinyJit[Tensor]:
        """The jitted prefill of one sequence's chunk: (tokens (1, chunk) int32 zero-padded, position, length, params
        (4,) float32, then per group its read map (1, max_context), then per group its pieces' bound sizes: see
        kiln.tensor.llm.layers.PageRows) -> the token id (1,) int32 sampled after the chunk's last token (with
        `logits`: the last position's logits and the id)."""
        if (mode, logits) not in self.paged_prefills:

            def prefill(tokens: Tensor, start_pos: Tensor, length: Tensor, params: Tensor, *inputs: Tensor) -> Tensor:
                count = as_size(length, "the prefill length")
                groups = len(self.cache.groups)
                reads = list(inputs[:groups])
                sizes = [as_size(size, "a written piece's size") for size in inputs[groups:]]
                pages = self.cache.page_rows(reads, sizes, as_size(start_pos, "the chunk start") + count)
                embedded = self.model.embed(tokens[:, :count])
                rows = self.cache.model_pages(pages)
                row = self.model.forward_embedded(embedded, start_pos, last_only=True, pages=rows)
                token = sample_on_device(row[0, 0], params, mode)
                return _with_logits(row[0], token) if logits else token

            self.paged_prefills[(mode, logits)] = TinyJit(prefill)
        return self.paged_prefills[(mode, logits)]

    def paged_decode_step(self, mode: SamplingMode, width: int, logits: bool = False) -> TinyJit[Tensor]:
        """The jitted decode step over slots 0 .. width - 1: (tokens (W, 1) int32, positions (W,) int32, end, params
        (W, 5) float32, then per group its read map (W, max_context) and sources (W * block_size,), or for W = 1
        per group its read map, then the row it writes; see kiln.tensor.llm.layers.PageRows) -> each slot's next
        token id (W,) int32 (with `logits`: each slot's logits and its id, (W, vocab + 1) float32)."""
        if (mode, width, logits) not in self.paged_steps:

            def decode(tokens: Tensor, positions: Tensor, end: Tensor, params: Tensor, *inputs: Tensor) -> Tensor:
                stop = as_size(end, "end")
                count = len(self.cache.groups) * (1 if width == 1 else 2)
                written = [as_size(row, "the written row") for row in inputs[count:]]
                pages = self.cache.model_pages(self.cache.decode_page_rows(list(inputs[:count]), written, stop))
                rows = self.model.forward_batched_decode(self.model.embed(tokens), positions, end, pages=pages)[:, 0]
                return chosen_tokens(rows, params, mode, width, logits)

            self.paged_steps[(mode, width, logits)] = TinyJit(decode)
        return self.paged_steps[(mode, width, logits)]

    # -- requests --------------------------------------------------------------------------------------------------
    def free_slots(self) -> int:
        """How many more sequences can join now (the slots not running nor promised to a waiting sequence)."""
        return max(self.running.count(None) - len(self.waiting), 0)

    def _place(self, sequence: Sequence) -> int | None:
        """The lowest free slot, and the blocks of the prompt's cached beginning (any sequence's); the blocks its
        prompt and `max_tokens` may need are promised. None when the pool cannot promise them now: the sequence
        waits (in `waiting`, first come first served) for running ones to give blocks back.

        Raises:
            KVPoolExhausted: the sequence needs more blocks than the whole pool has.
        """
        most = self._most_positions(sequence)
        now, ever = self.cache.fits(sequence.prompt, most)
        if not ever:
            raise KVPoolExhausted(
                f"a request of {len(sequence.prompt)} prompt tokens and max_tokens {sequence.max_tokens} may need "
                f"{most} positions of KV memory, more than the paged pool holds ({self.kv_blocks - 1} blocks of "
                f"{self.block_size} rows); ask for fewer tokens or give the pool more blocks (kv_blocks)"
            )
        if not now or self.waiting or self._prefix_pending(sequence):
            self.waiting.append(sequence)
            return None
        return self._open(sequence)

    def _prefix_pending(self, sequence: Sequence) -> bool:
        """Whether a sequence still prefilling is writing a beginning of this prompt (a block or more) that this one
        can take once it is written: then this one waits for those blocks instead of computing them a second time
        (requests sharing a system prompt that arrive together)."""
        if any(group.window is not None for group in self.cache.groups):
            return False  # a sliding group takes only the blocks nobody holds (kiln.tensor.llm.kv_pool.BlockPool.match)
        prompt = sequence.prompt[: len(sequence.prompt) - 1]  # the last token is computed again for its logits
        for other, _params in self.joining:
            shared = 0
            for mine, theirs in zip(prompt, other.prompt, strict=False):
                if mine != theirs:
                    break
                shared += 1
            if shared >= self.block_size and other.prefilled < shared:
                return True
        return False

    def _most_positions(self, sequence: Sequence) -> int:
        return min(len(sequence.prompt) + sequence.max_tokens, self.model.max_context)

    def _open(self, sequence: Sequence) -> int:
        tables, reused = self.cache.open(sequence.prompt, self._most_positions(sequence))
        self.tables[sequence] = tables
        sequence.slot = self.running.index(None)
        return reused

    def admit(self) -> None:
        """Places the waiting sequences, oldest first, while the pool can promise their blocks and no prefilling
        sequence is still writing blocks the oldest one will take (`_prefix_pending`)."""
        while self.waiting and self.cache.fits(self.waiting[0].prompt, self._most_positions(self.waiting[0]))[0]:
            if self._prefix_pending(self.waiting[0]):
                break
            sequence = self.waiting.pop(0)
            self._enter(sequence, self._open(sequence))

    def step(self) -> list[tuple[Sequence, int]]:
        """`BatchedGenerator.step`, after placing the waiting sequences the pool has room for."""
        self.admit()
        return super().step()

    def _prefill_chunk(self, index: int = 0) -> tuple[Sequence, int] | None:
        """Writes the next chunk of `self.joining[index]` into its blocks (as `BatchedGenerator._prefill_chunk`)."""
        sequence, params = self.joining[index]
        prompt, context, tables = sequence.prompt, self.model.max_context, self.tables[sequence]
        started = time.perf_counter()
        begin = sequence.prefilled
        end = min(begin + self.chunk, len(prompt))
        start = min(begin, context - self.chunk)
        try:
            host = sequence.needs_logits
            chunk = prompt[start:end]
            tokens = np.zeros((1, self.chunk), np.int32)
            tokens[0, : len(chunk)] = chunk
            self.cache.write(tables, begin, prompt[begin:end])
            reads, sizes = self.cache.prefill_pages(tables, start, len(chunk), begin)
            out = self.paged_prefill_step(sequence.mode, host)(
                Tensor(tokens), self.chunk_start_variable.bind(start), self.length_variable.bind(len(chunk)), params,
                *reads, *sizes,
            )  # fmt: skip
            values = out.numpy().reshape(-1)
            token = int(values[-1])
            if host and end == len(prompt):
                token = self._choose(sequence, values[:-1], token)
        except BaseException:
            self.cache.forget(tables, begin)
            del self.joining[index]
            self._release(sequence)
            raise
        self.cache.slide(tables, end)
        return self._chunk_written(index, end, started, token)

    def decode(self, running: list[Sequence] | None = None) -> list[tuple[Sequence, int]]:
        """As `BatchedGenerator.decode`, over the paged pool (one jitted step for every width, also width 1)."""
        decoding = self.decoding
        running = decoding if running is None else [s for s in running if any(s is d for d in decoding)]
        if not running:
            return []
        width = self.width(running)
        started = time.perf_counter()
        tokens, positions, params, mode = self._step_inputs(running, width, 0)
        end = self.end_variable.bind(max(sequence.position for sequence in running) + 1)
        host = any(sequence.needs_logits for sequence in running)
        try:
            rows: list[list[tuple[BlockTable, int] | None]] = [[None] * width for _ in self.cache.groups]
            for sequence in running:
                tables = self.tables[sequence]
                self.cache.write(tables, sequence.position, [sequence.tokens[-1]])
                for group, table in enumerate(tables):
                    rows[group][sequence.slot] = (table, sequence.position)
            arrays, written = self.cache.decode_pages(rows)
            step = self.paged_decode_step(mode, width, host)
            out = step(Tensor(tokens), Tensor(positions), end, Tensor(params), *arrays, *written).numpy()
            self.cache.decoded(rows)
        except BaseException:
            for sequence in running:
                self.cache.forget(self.tables[sequence], sequence.position)
            raise
        for sequence in running:
            self.cache.slide(self.tables[sequence], sequence.position + 1)
        return self._decoded(running, out, host, time.perf_counter() - started)

    def _release(self, sequence: Sequence) -> None:
        self.waiting = [waiting for waiting in self.waiting if waiting is not sequence]
        super()._release(sequence)
        tables = self.tables.pop(sequence, None)
        if tables is not None:
            self.cache.close(tables)

    def kv_bytes(self) -> int:
        """The bytes of the paged pools (every group's layers)."""
        return self.cache.pool_bytes()

    def held_blocks(self) -> list[int]:
        """The blocks the running sequences hold now, per layer group (full attention first)."""
        return self.cache.held_blocks()
