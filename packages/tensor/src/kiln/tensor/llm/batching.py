"""`BatchedGenerator`: continuous batching, one decode step for every running sequence at once.

The KV cache has S sequence slots (batch S, allocated once). A request takes a free slot and is prefilled into that
slot's rows alone (a batch-1 jitted prefill whose slot is a bound Variable, chunk by chunk as `Generator` does); then
every `step` decodes one token for each running sequence in one jitted pass over all S slots:

- inputs: the tokens (W, 1) int32, each slot's position (W,) int32 as a Tensor, the largest position + 1 as a bound
  Variable `end`, and the sampling parameters per slot (W, 5) float32 [1 / temperature, top_k, top_p, u, greedy],
  for the slots 0 .. W - 1, W the smallest power of two covering the highest running slot (a request takes the
  lowest free slot), so one request alone decodes at batch 1, not S: one jitted step per width (slot 0 alone
  takes `Generator`'s own decode step over its rows);
- each slot writes its new key and value to its own row (a one-hot select over rows 0 .. end - 1) and attends over
  its rows 0 .. position only (the rows past it masked to -inf before the softmax);
- a free slot below W sits at position max_context, which no row matches: it writes nothing (its rows keep the
  tokens of the prefix cache) and its logits, computed like the others', are never read.

A sequence joins and leaves between steps; nothing compiles for a new slot, position or sampling value. The step of
a batch where every sequence is greedy is an argmax per slot; otherwise each slot draws with `sample_on_device`
under the union of the running sequences' sampling modes (a cut a sequence does not ask for keeps every token), and
greedy slots keep their argmax.

Prefix cache per slot: each slot remembers the token in each of its cache rows. A new request takes the free slot
whose rows begin with the longest part of its prompt (the slot that held the same conversation; a slot above the
running ones only for `MIN_PREFIX_REUSE` tokens or more), else the lowest free slot; it keeps those rows and
prefills only the rest, as `Generator` does for its single slot.

Chunked prefill between decode steps: `start` prefills a prompt at once, the others waiting; `join` only takes the
slot, and each `step` then prefills one chunk (`prefill_chunk` tokens) of the oldest joining request before it
decodes one token for every sequence already decoding, so a long prompt arriving delays a running stream by one
chunk per token, not by its whole prefill (`prefill` and `decode` are the two halves of a step). A joining
sequence's slot sits in the decode steps as a free slot (position max_context: it writes nothing), and its first
token comes from the step that prefills its last chunk.

`PagedBatchedGenerator` (kiln.tensor.llm.paged_batching) serves the same requests over a paged KV pool shared by
every slot instead of a (max_context)-row cache per slot: blocks held as positions fill, prefixes shared across
slots and turns, sliding-window layers freeing the blocks behind their window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Unpack

import numpy as np

from kiln.tensor.jit import TinyJit, Variable
from kiln.tensor.llm.generate import GenerationStats, SamplingOptions, SamplingSettings, reusable_prefix, sample
from kiln.tensor.llm.json_grammar import TokenConstraint
from kiln.tensor.llm.logprobs import TokenLogprob, token_logprob
from kiln.tensor.llm.sampling import SamplingMode, sample_on_device, sampling_row
from kiln.tensor.llm.weights import LoadedModel
from kiln.tensor.symbolic import as_size
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["DEFAULT_SLOTS", "JOIN_CHUNK", "MIN_PREFIX_REUSE", "BatchedGenerator", "RequestOptions", "Sequence"]

DEFAULT_SLOTS = 8
"""Sequences decoded together when no number is given (the server's `--max-batch`)."""
MIN_PREFIX_REUSE = 16
JOIN_CHUNK = 64
"""Prompt tokens a joining sequence prefills per step when no number is given (the server's `--prefill-chunk`):
the running streams wait about one such chunk's forward for each of their tokens while a prompt arrives."""
"""The shortest cached beginning of a prompt worth taking a slot above the running ones for."""


class RequestOptions(SamplingOptions, total=False):
    """A batched request's keyword settings: the sampling ones (`SamplingOptions`), plus `logprobs` and
    `constraint` (`Sequence`'s)."""

    logprobs: int | None
    constraint: TokenConstraint | None


@dataclass(eq=False)
class Sequence:
    """One request in a slot of a `BatchedGenerator`: its settings, its tokens so far and whether it has ended.

    `tokens` are the ids produced so far (the first comes from the prefill); `finished` once the last one was a stop
    id, `max_tokens` were produced or the context is full (its slot is free again then)."""

    prompt: list[int]
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    stop_ids: set[int]
    rng: np.random.Generator
    mode: SamplingMode
    slot: int = -1
    position: int = 0
    tokens: list[int] = field(default_factory=list)
    finished: bool = False
    stats: GenerationStats = field(default_factory=GenerationStats)
    logprobs: int | None = None
    """Record each token's log-probability and this many most likely tokens in `logprob_entries` (None: not)."""
    constraint: TokenConstraint | None = None
    """Sample each token on the host among the tokens this grammar allows (kiln.tensor.llm.json_grammar)."""
    logprob_entries: list[TokenLogprob] = field(default_factory=list)
    prefilled: int = 0
    """The prompt tokens its slot's rows hold so far (len(prompt) once it decodes)."""

    @property
    def needs_logits(self) -> bool:
        """Whether this sequence's steps bring the logits back to the host (logprobs or a grammar)."""
        return self.logprobs is not None or self.constraint is not None

    def params(self, vocab: int) -> list[float]:
        """This sequence's row of the step's sampling parameters (one uniform draw from its generator); a cut it
        does not ask for is given the value that keeps every token."""
        row = sampling_row(self.temperature, self.top_k if self.top_k > 0 else vocab, self.top_p, self.rng)
        return [*row, 1.0 if self.mode.greedy else 0.0]


class BatchedGenerator:
    """Decodes up to `slots` sequences together (see the module docstring): `start` a request (its prefill), then
    `step` until its `Sequence` is finished; `cancel` frees a slot early.

    Raises:
        ValueError: slots or prefill_chunk below 1.
    """

    def __init__(self, loaded: LoadedModel, slots: int = DEFAULT_SLOTS, prefill_chunk: int = JOIN_CHUNK) -> None:
        for name, value in (("slots", slots), ("prefill_chunk", prefill_chunk)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.loaded, self.model, self.config = loaded, loaded.model, loaded.config
        self.slots = slots
        context = self.model.max_context
        self.chunk = min(prefill_chunk, context)
        self.slot_variable = Variable("slot", 0, slots - 1)
        self.length_variable = Variable("length", 1, self.chunk)
        self.chunk_start_variable = Variable("chunk_start", 0, context - self.chunk)
        self.end_variable = Variable("end", 1, context)
        self.position_variable = Variable("position", 0, context - 1)
        self._allocate()
        self.prefills: dict[tuple[SamplingMode, bool], TinyJit[Tensor]] = {}
        self.steps: dict[tuple[SamplingMode, int], TinyJit[Tensor]] = {}
        self.host_steps: dict[tuple[SamplingMode, int], TinyJit[Tensor]] = {}  # the steps that return logits too
        self.lone_steps: dict[tuple[SamplingMode, bool], TinyJit[Tensor]] = {}
        self.running: list[Sequence | None] = [None] * slots
        self.joining: list[tuple[Sequence, Tensor]] = []  # the sequences still prefilling (oldest first), params
        self.cached_tokens: list[list[int]] = [[] for _ in range(slots)]  # per slot, the token in each cache row

    def _allocate(self) -> None:
        """Allocates the KV memory before the steps are captured (their replays write these very buffers)."""
        self.model._caches(self.slots)

    def kv_bytes(self) -> int:
        """The bytes of KV memory this generator's steps use (allocated whether the rows are used or not)."""
        caches = [block.attention.allocate_cache(self.slots) for block in self.model.blk]
        return sum(t.numel() * t.dtype.itemsize for pair in caches for t in pair)

    # -- the jitted steps ------------------------------------------------------------------------------------------
    def prefill_step(self, mode: SamplingMode, logits: bool = False) -> TinyJit[Tensor]:
        """The jitted prefill into one slot: (tokens (1, chunk) int32 zero-padded, slot, position, length, params
        (4,) float32) -> the token id (1,) int32 sampled after the chunk's last token; with `logits`, the last
        position's logits with that id after them (vocab + 1,) float32."""
        if (mode, logits) not in self.prefills:

            def prefill(tokens: Tensor, slot: Tensor, start_pos: Tensor, length: Tensor, params: Tensor) -> Tensor:
                count = as_size(length, "the prefill length")
                embedded = self.model.embed(tokens[:, :count])
                row = self.model.forward_embedded(embedded, start_pos, last_only=True, slot=slot, slots=self.slots)
                token = sample_on_device(row[0, 0], params, mode)
                return _with_logits(row[0], token) if logits else token

            self.prefills[(mode, logits)] = TinyJit(prefill)
        return self.prefills[(mode, logits)]

    def decode_step(self, mode: SamplingMode, width: int, logits: bool = False) -> TinyJit[Tensor]:
        """The jitted decode step over slots 0 .. width - 1: (tokens (W, 1) int32, positions (W,) int32, end, params
        (W, 5) float32) -> the next token id of each slot (W,) int32; with `logits`, each slot's logits with its
        token id after them (W, vocab + 1) float32."""
        steps = self.host_steps if logits else self.steps
        if (mode, width) not in steps:

            def decode(tokens: Tensor, positions: Tensor, end: Tensor, params: Tensor) -> Tensor:
                embedded = self.model.embed(tokens)
                rows = self.model.forward_batched_decode(embedded, positions, end, slots=self.slots)[:, 0, :]
                return chosen_tokens(rows, params, mode, width, logits)

            steps[(mode, width)] = TinyJit(decode)
        return steps[(mode, width)]

    def lone_step(self, mode: SamplingMode, logits: bool = False) -> TinyJit[Tensor]:
        """The jitted decode step of slot 0 running alone: (token (1, 1) int32, position, params (4,) float32) -> the
        next token id (1,) int32 (with `logits`: the logits and the id, (1, vocab + 1) float32); `Generator`'s
        decode step over slot 0's rows (a slice store at the position, no mask), cheaper than the one-hot store of a
        batched step."""
        if (mode, logits) not in self.lone_steps:

            def decode(token: Tensor, position: Tensor, params: Tensor) -> Tensor:
                embedded = self.model.embed(token)
                row = self.model.forward_embedded(embedded, position, slot=0, slots=self.slots)[0, -1:, :]
                chosen = sample_on_device(row[0], params, mode)
                return _with_logits(row, chosen) if logits else chosen

            self.lone_steps[(mode, logits)] = TinyJit(decode)
        return self.lone_steps[(mode, logits)]

    def width(self, sequences: list[Sequence] | None = None) -> int:
        """The slots a step over `sequences` (default: every running one) runs over: the smallest power of two (or
        all slots) covering their slots, so that a few requests do not pay for a full batch (new requests take the
        lowest free slots)."""
        held = self.active if sequences is None else sequences
        highest = max((sequence.slot for sequence in held), default=0)
        width = 1
        while width <= highest:
            width *= 2
        return min(width, self.slots)

    # -- requests --------------------------------------------------------------------------------------------------
    @property
    def active(self) -> list[Sequence]:
        """The sequences in a slot now (decoding or still prefilling), by slot."""
        return [sequence for sequence in self.running if sequence is not None]

    @property
    def decoding(self) -> list[Sequence]:
        """The sequences whose prompt is prefilled (each step decodes a token for them), by slot."""
        waiting = {id(sequence) for sequence, _ in self.joining}
        return [sequence for sequence in self.active if id(sequence) not in waiting]

    def free_slots(self) -> int:
        """How many more sequences can start now."""
        return self.running.count(None)

    def start(
        self, prompt_ids: list[int], *, max_tokens: int, chunked: bool = False, **options: Unpack[RequestOptions]
    ) -> Sequence:
        """Starts a request in a free slot: prefills its prompt (all but the part its slot's rows hold already) and
        samples its first token (`tokens[0]`, none when max_tokens is 0). The settings mean what they mean for
        `Generator.generate`, and greedy output equals its output for the same prompt. `logprobs` and `constraint`
        are `Sequence`'s (a constrained token is drawn on the host from the masked logits with the same settings).
        `chunked`: only take the slot, as `join` (the next steps prefill the prompt, a chunk each).

        Raises:
            ValueError: a bad request (as `Generator.generate`).
            RuntimeError: no free slot (`free_slots()` is 0).
        """
        sequence = self.join(prompt_ids, max_tokens=max_tokens, **options)
        while not chunked:
            index = next((i for i, (joining, _) in enumerate(self.joining) if joining is sequence), None)
            if index is None:
                return sequence
            self._prefill_chunk(index)
        return sequence

    def join(self, prompt_ids: list[int], *, max_tokens: int, **options: Unpack[RequestOptions]) -> Sequence:
        """Takes a free slot for a request (as `start`) without prefilling it: the next steps prefill its prompt one
        chunk each, between their decodes, and the step of its last chunk gives its first token.

        Raises:
            ValueError: a bad request (as `Generator.generate`).
            RuntimeError: no free slot (`free_slots()` is 0).
        """
        logprobs, constraint = options.pop("logprobs", None), options.pop("constraint", None)
        settings = SamplingSettings.of(options)
        settings.check(prompt_ids, max_tokens, self.model.max_context, self.config.vocab_size)
        temperature, top_k, top_p = settings.temperature, settings.top_k, settings.top_p
        if not self.free_slots():
            raise RuntimeError(f"all {self.slots} sequence slots are running; start a request when one is free")
        prompt = list(prompt_ids)
        mode = SamplingMode.of(temperature, top_k, top_p, self.config.vocab_size)
        rng = np.random.default_rng(settings.seed)
        sequence = Sequence(prompt, max_tokens, temperature, top_k, top_p, set(settings.stop_ids), rng, mode,
                            logprobs=logprobs, constraint=constraint)  # fmt: skip
        if max_tokens == 0:
            sequence.finished = True
            return sequence
        first = self._place(sequence)
        if first is not None:
            self._enter(sequence, first)
        return sequence

    def _enter(self, sequence: Sequence, first: int) -> None:
        """Puts a placed sequence in its slot, to be prefilled from prompt token `first` on."""
        sequence.prefilled = first
        self.running[sequence.slot] = sequence
        stats = sequence.stats
        stats.cached_tokens, stats.prefill_tokens = first, len(sequence.prompt) - first
        row = sampling_row(sequence.temperature, sequence.top_k, sequence.top_p, sequence.rng)
        self.joining.append((sequence, Tensor(np.array(row, np.float32))))

    def _place(self, sequence: Sequence) -> int | None:
        """Gives a joining sequence its slot (and its KV memory); returns how many prompt tokens it reuses (None:
        it waits for KV memory, which a paged pool may lack for now: kiln.tensor.llm.paged_batching)."""
        slot = sequence.slot = self._choose_slot(sequence.prompt)
        first = reusable_prefix(self.cached_tokens[slot], sequence.prompt)
        del self.cached_tokens[slot][first:]
        return first

    def _choose_slot(self, prompt: list[int]) -> int:
        """The free slot for `prompt`: the one whose rows hold the longest beginning of it, else the lowest. A slot
        that would widen the steps (above the running ones) counts its beginning only from `MIN_PREFIX_REUSE`
        tokens on: every step of the request would pay for the width, a short beginning saves little."""
        covered = self.width() if self.active else 0

        def value(slot: int) -> tuple[int, int]:
            reused = reusable_prefix(self.cached_tokens[slot], prompt)
            return (reused if reused >= MIN_PREFIX_REUSE or slot < covered else 0), -slot

        return max((slot for slot, held in enumerate(self.running) if held is None), key=value)

    def _prefill_chunk(self, index: int = 0) -> tuple[Sequence, int] | None:
        """Writes the next chunk of the joining sequence `self.joining[index]` into its slot's rows (see
        `Generator.prefill`: a chunk ending near the end of the cache starts earlier); after its last chunk the
        sequence decodes and (sequence, its first token) is returned. A failure frees its slot."""
        sequence, params = self.joining[index]
        prompt, slot, context = sequence.prompt, sequence.slot, self.model.max_context
        started = time.perf_counter()
        try:
            host = sequence.needs_logits
            begin = sequence.prefilled
            end = min(begin + self.chunk, len(prompt))
            start = min(begin, context - self.chunk)
            chunk = prompt[start:end]
            tokens = np.zeros((1, self.chunk), np.int32)
            tokens[0, : len(chunk)] = chunk
            out = self.prefill_step(sequence.mode, host)(
                Tensor(tokens), self.slot_variable.bind(slot), self.chunk_start_variable.bind(start),
                self.length_variable.bind(len(chunk)), params)  # fmt: skip
            values = out.numpy().reshape(-1)
            token = int(values[-1])
            if host and end == len(prompt):
                token = self._choose(sequence, values[:-1], token)
        except BaseException:
            del self.joining[index]
            self._release(sequence)
            raise
        self.cached_tokens[slot][start:] = chunk
        return self._chunk_written(index, end, started, token)

    def _chunk_written(self, index: int, end: int, started: float, token: int) -> tuple[Sequence, int] | None:
        """After a chunk of `self.joining[index]` up to prompt position `end` was written (its prefill started at
        `started`, perf_counter): the sequence's progress; after its last chunk it decodes, its first token `token`."""
        sequence = self.joining[index][0]
        sequence.prefilled = end
        sequence.stats.prefill_seconds += time.perf_counter() - started
        if end < len(sequence.prompt):
            return None
        del self.joining[index]
        sequence.position = len(sequence.prompt)
        self._produced(sequence, token)
        return sequence, token

    def prefill(self) -> list[tuple[Sequence, int]]:
        """Prefills one chunk of the oldest joining sequence (none: nothing); returns [(sequence, first token)]
        when that was its last chunk, else []. A failure frees that sequence's slot alone."""
        if not self.joining:
            return []
        done = self._prefill_chunk(0)
        return [] if done is None else [done]

    def _choose(self, sequence: Sequence, logits: np.ndarray, token: int) -> int:
        """The token of a sequence whose step brought its logits back: the device's choice `token`, or a draw among
        the tokens its grammar allows; its log-probability is recorded when asked for."""
        constraint = sequence.constraint
        if constraint is not None:
            allowed = constraint.mask(sequence.max_tokens - len(sequence.tokens))
            masked = np.where(allowed, logits.astype(np.float64), -np.inf)
            token = sample(masked, sequence.temperature, sequence.top_k, sequence.top_p, sequence.rng)
            constraint.advance(token)
        if sequence.logprobs is not None:
            sequence.logprob_entries.append(token_logprob(logits, token, sequence.logprobs))
        return token

    def step(self) -> list[tuple[Sequence, int]]:
        """One chunk of the oldest joining sequence's prefill (`prefill`), then one token for every sequence that
        was decoding before it (`decode`); returns (sequence, token) for each token made, the first token of a
        sequence whose prefill ended first."""
        decoding = self.decoding
        return self.prefill() + self.decode(decoding)

    def decode(self, running: list[Sequence] | None = None) -> list[tuple[Sequence, int]]:
        """Decodes one token for every decoding sequence (or those of `running` still decoding) in one jitted pass;
        returns (sequence, token) for each, in slot order. A sequence that ends with its token frees its slot."""
        decoding = self.decoding
        running = decoding if running is None else [s for s in running if any(s is d for d in decoding)]
        if not running:
            return []
        context, width = self.model.max_context, self.width(running)
        started = time.perf_counter()
        tokens, positions, params, mode = self._step_inputs(running, width, context)
        end = self.end_variable.bind(max(sequence.position for sequence in running) + 1)
        for sequence in running:  # a step that fails leaves the rows from here on unknown
            del self.cached_tokens[sequence.slot][sequence.position :]
        host = any(sequence.needs_logits for sequence in running)
        if width == 1:  # slot 0 alone
            lone = running[0]
            position = self.position_variable.bind(lone.position)
            step = self.lone_step(lone.mode, host)
            out = step(Tensor(tokens), position, Tensor(np.ascontiguousarray(params[0, :4]))).numpy()
        else:
            out = self.decode_step(mode, width, host)(Tensor(tokens), Tensor(positions), end, Tensor(params)).numpy()
        for sequence in running:
            self.cached_tokens[sequence.slot].append(sequence.tokens[-1])
        return self._decoded(running, out, host, time.perf_counter() - started)

    def _step_inputs(
        self, running: list[Sequence], width: int, free_position: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, SamplingMode]:
        """A decode step's tokens (W, 1), positions (W,) (`free_position` for a slot nobody decodes in), sampling
        parameters (W, 5) and mode (the union of the running sequences' modes)."""
        tokens = np.zeros((width, 1), np.int32)
        positions = np.full((width,), free_position, np.int32)
        params = np.zeros((width, 5), np.float32)
        params[:, 0], params[:, 2], params[:, 4] = 1.0, 1.0, 1.0
        for sequence in running:
            tokens[sequence.slot, 0] = sequence.tokens[-1]
            positions[sequence.slot] = sequence.position
            params[sequence.slot] = sequence.params(self.config.vocab_size)
        modes = [sequence.mode for sequence in running]
        if all(mode.greedy for mode in modes):
            return tokens, positions, params, SamplingMode(greedy=True)
        return tokens, positions, params, SamplingMode(False, any(m.top_k for m in modes), any(m.top_p for m in modes))

    def _decoded(
        self, running: list[Sequence], out: np.ndarray, host: bool, seconds: float
    ) -> list[tuple[Sequence, int]]:
        """The tokens a decode step made for `running` (its output `out`, with the logits when `host`), recorded."""
        produced = []
        for sequence in running:
            sequence.position += 1
            sequence.stats.decode_tokens += 1
            sequence.stats.decode_seconds += seconds
            if host:
                row = out[sequence.slot]
                token = int(row[-1])
                if sequence.needs_logits:
                    token = self._choose(sequence, row[:-1], token)
            else:
                token = int(out[sequence.slot])
            self._produced(sequence, token)
            produced.append((sequence, token))
        return produced

    def _produced(self, sequence: Sequence, token: int) -> None:
        sequence.tokens.append(token)
        if (
            len(sequence.tokens) >= sequence.max_tokens
            or token in sequence.stop_ids
            or sequence.position >= self.model.max_context
            or (sequence.constraint is not None and sequence.constraint.closed)
        ):
            sequence.finished = True
            self._release(sequence)

    def cancel(self, sequence: Sequence) -> None:
        """Ends a sequence before its end (its client left; also while it is prefilling): its slot is free for the
        next request."""
        sequence.finished = True
        self._release(sequence)

    def _release(self, sequence: Sequence) -> None:
        self.joining = [(joining, params) for joining, params in self.joining if joining is not sequence]
        if 0 <= sequence.slot < self.slots and self.running[sequence.slot] is sequence:
            self.running[sequence.slot] = None


def chosen_tokens(rows: Tensor, params: Tensor, mode: SamplingMode, width: int, logits: bool) -> Tensor:
    """The token of each of the `width` slots from its logits row `rows` (width, vocab): the argmax when every slot
    is greedy, else a draw under `mode` with each slot's sampling `params` row (greedy slots keep their argmax);
    with `logits` the rows come along (`_with_logits`)."""
    greedy = rows.argmax(-1).cast(dtypes.int32)
    if mode.greedy:
        chosen = greedy
    else:
        drawn = Tensor.cat(*[sample_on_device(rows[s], params[s, :4], mode) for s in range(width)])
        chosen = (params[:, 4] > 0.5).where(greedy, drawn)
    return _with_logits(rows, chosen) if logits else chosen


def _with_logits(logits: Tensor, tokens: Tensor) -> Tensor:
    """Logits (N, vocab) with the chosen token ids (N,) after them as one more column (exact in float32)."""
    rows = logits.shape[0]
    return logits.float().cat(tokens.float().reshape(rows, 1), dim=1)
