"""`Generator`: generation with the KV cache: the prompt prefilled in jitted chunks, then one jitted step per token.

Both steps are `TinyJit`s over the model whose positions are `Variable`s, so their kernels are compiled once and
replayed for every prompt length, position and token id:

- the prefill step takes a chunk of up to `PREFILL_CHUNK` prompt tokens (a (1, chunk) int32 Tensor, zero-padded),
  its length and its first position as bound Variables and the sampler's parameters; inside, the tokens are cut to
  the symbolic length, so the model writes that many cache rows and attends over the positions so far only;
- the decode step takes the token id (a (1, 1) int32 Tensor), its position (a Variable) and the sampler's
  parameters (kiln.tensor.llm.sampling), gathers the token's embedding row (a one-hot product that codegen turns
  into one row's read, also for a quantized table), runs the model and samples on the device.

Each returns the next token id as a (1,) int32 Tensor, the only value that comes back to the host. A step is captured
once per sampling mode and replayed for every token id, position, prompt length, temperature, top-k, top-p and seed:
after the first prompt, nothing compiles during generation. `sample` is the host reference sampler (the same
distribution).

Prefix cache: the generator remembers which token sits in each cache row (`cached_tokens`). A new prompt that begins
with some of those tokens (the next turn of a chat, a shared system prompt) keeps their rows and prefills only the
rest, starting at the first position that differs; the last prompt token is always prefilled, since its logits pick
the first new token. Rows past the kept prefix hold stale values that no step reads: attention reads rows
0..position only, and the prefill overwrites them before they are read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np

from kiln.tensor.jit import TinyJit, Variable
from kiln.tensor.llm.sampling import SamplingMode, sample_on_device, sampling_params
from kiln.tensor.llm.weights import LoadedModel
from kiln.tensor.symbolic import as_size
from kiln.tensor.tensor import Tensor

__all__ = [
    "PREFILL_CHUNK",
    "GenerationStats",
    "Generator",
    "SamplingOptions",
    "SamplingSettings",
    "check_request",
    "reusable_prefix",
    "sample",
]

PREFILL_CHUNK = 256
"""Prompt tokens per call of the jitted prefill step (a longer prompt takes several calls)."""


@dataclass
class GenerationStats:
    """Token counts and seconds of the last `generate` call's prefill and decode: `prefill_tokens` were computed,
    `cached_tokens` (the prompt's beginning) were reused from the previous calls' cache rows."""

    prefill_tokens: int = 0
    cached_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_tokens: int = 0
    decode_seconds: float = 0.0

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prefill_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds else 0.0


class SamplingOptions(TypedDict, total=False):
    """The keyword settings of a request besides `max_tokens` (`Generator.generate`, `BatchedGenerator.start`):
    `temperature` (0: greedy), `top_k` (0: every token), `top_p`, the `seed` of its random draws and the `stop_ids`
    that end it; `SamplingSettings.of` gives the missing ones their defaults."""

    temperature: float
    top_k: int
    top_p: float
    seed: int | None
    stop_ids: set[int] | None


@dataclass(frozen=True)
class SamplingSettings:
    """A request's sampling settings with every default filled in (see `SamplingOptions`)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_ids: frozenset[int] = frozenset()

    @classmethod
    def of(cls, options: SamplingOptions) -> SamplingSettings:
        """The settings given as keywords, the others at their defaults.

        Raises:
            TypeError: a keyword that is no sampling setting (as a misspelt keyword argument would).
        """
        unknown = sorted(set(options) - SamplingOptions.__optional_keys__)
        if unknown:
            raise TypeError(
                f"unexpected request settings {unknown}; expected some of {sorted(SamplingOptions.__optional_keys__)}"
            )
        stop_ids = options.get("stop_ids")
        return cls(
            options.get("temperature", 0.0), options.get("top_k", 0), options.get("top_p", 1.0),
            options.get("seed"), frozenset(stop_ids or ()),
        )  # fmt: skip

    def check(self, prompt_ids: list[int], max_tokens: int, context: int, vocab: int) -> None:
        """`check_request` of a prompt with these settings."""
        check_request(prompt_ids, max_tokens, self.temperature, self.top_k, self.top_p, context, vocab)


def sample(logits: np.ndarray, temperature: float, top_k: int, top_p: float, rng: np.random.Generator) -> int:
    """A token id from one row of logits: argmax when temperature is 0, else a draw from the tempered softmax
    restricted to the top_k largest (0: all) and to the smallest set whose probability reaches top_p."""
    if temperature == 0.0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / temperature
    order = np.argsort(-scaled, kind="stable")
    if top_k > 0:
        order = order[:top_k]
    probs = np.exp(scaled[order] - scaled[order[0]])
    probs /= probs.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs), top_p)) + 1
        order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
    return int(order[rng.choice(len(order), p=probs)])


def reusable_prefix(cached_tokens: list[int], prompt: list[int]) -> int:
    """How many of `prompt`'s first tokens equal the cache rows' tokens `cached_tokens` (at most len(prompt) - 1:
    the last prompt token is computed again for its logits)."""
    limit = min(len(cached_tokens), len(prompt) - 1)
    kept = 0
    while kept < limit and cached_tokens[kept] == prompt[kept]:
        kept += 1
    return kept


def check_request(
    prompt_ids: list[int], max_tokens: int, temperature: float, top_k: int, top_p: float, context: int, vocab: int
) -> None:
    """Raises ValueError for an empty prompt, a prompt longer than `context`, a token outside [0, vocab), or a
    negative max_tokens / temperature, top_k < 0, top_p outside (0, 1]."""
    if not prompt_ids:
        raise ValueError("the prompt is empty; generation needs at least one token")
    if len(prompt_ids) > context:
        raise ValueError(f"the prompt has {len(prompt_ids)} tokens, more than the context length {context}")
    if any(not 0 <= token < vocab for token in prompt_ids):
        raise ValueError(f"prompt token ids must be in [0, {vocab}), got {prompt_ids}")
    if max_tokens < 0 or temperature < 0 or top_k < 0 or not 0 < top_p <= 1:
        raise ValueError(
            f"need max_tokens >= 0, temperature >= 0, top_k >= 0 and 0 < top_p <= 1; got {max_tokens}, "
            f"{temperature}, {top_k}, {top_p}"
        )


class Generator:
    """Generates tokens from a loaded model (batch 1); the prompt is prefilled `prefill_chunk` tokens per call.

    Raises:
        ValueError: a prefill_chunk below 1.
    """

    def __init__(self, loaded: LoadedModel, prefill_chunk: int = PREFILL_CHUNK) -> None:
        if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be an int >= 1, got {prefill_chunk!r}")
        self.loaded, self.model, self.config = loaded, loaded.model, loaded.config
        self.position_variable = Variable("start_pos", 0, self.model.max_context - 1)
        self.chunk = min(prefill_chunk, self.model.max_context)
        self.length_variable = Variable("length", 1, self.chunk)
        # a chunk's rows start .. start + length - 1 must fit the cache for every value the kernels are built for
        self.chunk_start_variable = Variable("chunk_start", 0, self.model.max_context - self.chunk)
        self.model._caches(1)  # allocated before the steps are captured: the replays write these very buffers
        self.steps: dict[SamplingMode, TinyJit[Tensor]] = {}
        self.prefills: dict[SamplingMode, TinyJit[Tensor]] = {}
        self.last_stats = GenerationStats()
        self.position = 0
        self.cached_tokens: list[int] = []  # the token whose keys and values are in each cache row, row 0 first

    def step(self, mode: SamplingMode) -> TinyJit[Tensor]:
        """The jitted decode step of a sampling mode: (token (1, 1) int32, position, params (4,) float32) -> the next
        token id (1,) int32."""
        if mode not in self.steps:

            def decode(token: Tensor, start_pos: Tensor, params: Tensor) -> Tensor:
                logits = self.model.forward_embedded(self.model.embed(token), start_pos)[0, -1, :]
                return sample_on_device(logits, params, mode)

            self.steps[mode] = TinyJit(decode)
        return self.steps[mode]

    def prefill_step(self, mode: SamplingMode) -> TinyJit[Tensor]:
        """The jitted prefill step of a sampling mode: (tokens (1, chunk) int32 zero-padded, position, length,
        params (4,) float32) -> the token id (1,) int32 sampled after the chunk's last token."""
        if mode not in self.prefills:

            def prefill(tokens: Tensor, start_pos: Tensor, length: Tensor, params: Tensor) -> Tensor:
                count = as_size(length, "the prefill length")
                logits = self.model.forward_embedded(self.model.embed(tokens[:, :count]), start_pos, last_only=True)
                return sample_on_device(logits[0, 0], params, mode)

            self.prefills[mode] = TinyJit(prefill)
        return self.prefills[mode]

    def reusable_prefix(self, prompt: list[int]) -> int:
        """How many of `prompt`'s first tokens already sit in the cache rows 0.. (at most len(prompt) - 1: the last
        prompt token is computed again for its logits)."""
        return reusable_prefix(self.cached_tokens, prompt)

    def prefill(self, prompt: list[int], params: Tensor, mode: SamplingMode, first: int = 0) -> int:
        """Writes `prompt[first:]` into cache rows first.. chunk by chunk (rows 0..first-1 must already hold
        `prompt[:first]`) and returns the token sampled after the prompt.

        A chunk ending near the end of the cache starts earlier (at max_context - chunk) and writes some rows again:
        the same tokens at the same positions over the same earlier rows, so the same values."""
        if not 0 <= first < len(prompt):
            raise ValueError(f"the prefill must start inside the prompt of {len(prompt)} tokens, got {first}")
        step, token = self.prefill_step(mode), -1
        del self.cached_tokens[first:]  # rows from `first` on are rewritten; a failure leaves them unknown
        for begin in range(first, len(prompt), self.chunk):
            end = min(begin + self.chunk, len(prompt))
            start = min(begin, self.model.max_context - self.chunk)  # end <= len(prompt) <= max_context
            chunk = prompt[start:end]
            tokens = np.zeros((1, self.chunk), np.int32)
            tokens[0, : len(chunk)] = chunk
            position, length = self.chunk_start_variable.bind(start), self.length_variable.bind(len(chunk))
            token = int(step(Tensor(tokens), position, length, params).numpy()[0])
            self.cached_tokens[start:] = prompt[start:end]
        self.position = len(prompt)
        return token

    def reset(self) -> None:
        """Clears the KV cache and forgets its tokens (the next `generate` prefills its whole prompt)."""
        self.model.reset()
        self.position = 0
        self.cached_tokens.clear()

    def generate(self, prompt_ids: list[int], *, max_tokens: int, **options: Unpack[SamplingOptions]) -> Iterator[int]:
        """Yields up to `max_tokens` new token ids after `prompt_ids`, stopping after a token in `stop_ids` (which is
        yielded) or at the end of the context (the model's `max_context`). The cache rows of the longest beginning
        of the prompt that earlier calls left in the cache are reused (`last_stats.cached_tokens`).

        Raises:
            ValueError: an empty prompt, a prompt longer than the context, a token outside the vocabulary, or a
                negative max_tokens / temperature, top_k < 0, top_p outside (0, 1].
        """
        settings = SamplingSettings.of(options)
        settings.check(prompt_ids, max_tokens, self.model.max_context, self.config.vocab_size)
        return self._generate(list(prompt_ids), max_tokens, settings)

    def _generate(self, prompt: list[int], max_tokens: int, settings: SamplingSettings) -> Iterator[int]:
        temperature, top_k, top_p, stop_ids = settings.temperature, settings.top_k, settings.top_p, settings.stop_ids
        rng = np.random.default_rng(settings.seed)
        stats = self.last_stats = GenerationStats()
        if max_tokens == 0:
            return
        mode = SamplingMode.of(temperature, top_k, top_p, self.config.vocab_size)
        step = self.step(mode)
        started = time.perf_counter()
        first = self.reusable_prefix(prompt)
        token = self.prefill(prompt, sampling_params(temperature, top_k, top_p, rng), mode, first)
        stats.cached_tokens, stats.prefill_tokens = first, len(prompt) - first
        stats.prefill_seconds = time.perf_counter() - started
        yield token
        produced = 1
        while produced < max_tokens and token not in stop_ids and self.position < self.model.max_context:
            started = time.perf_counter()
            params = sampling_params(temperature, top_k, top_p, rng)
            fed = token
            del self.cached_tokens[self.position :]  # a step that fails leaves its row unknown
            token = int(
                step(Tensor(np.array([[fed]], np.int32)), self.position_variable.bind(self.position), params).numpy()[0]
            )
            self.cached_tokens.append(fed)
            self.position += 1
            stats.decode_tokens += 1
            stats.decode_seconds += time.perf_counter() - started
            yield token
            produced += 1
