"""`Generator`: token generation with the KV cache: the prompt prefilled in one pass, then one jitted step per token.

The decode step is a `TinyJit` over the model whose inputs are the token id (a (1, 1) int32 Tensor), a `Variable`
cache position (a 0-dim int32 Tensor: the cache row to write and the attention mask read it from memory) and the
sampler's parameters (kiln.tensor.llm.sampling): the step gathers the token's embedding row (a one-hot product that
codegen turns into one row's read, also for a quantized table), runs the model and samples on the device, returning
the next token id as a (1,) int32 Tensor, the only value that comes back to the host. So the step is captured once per
sampling mode and replayed for every token id, position, temperature, top-k, top-p and seed: nothing compiles
during generation. `sample` is the host reference sampler (the same distribution).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kiln.tensor.jit import TinyJit, Variable
from kiln.tensor.llm.sampling import SamplingMode, sample_on_device, sampling_params
from kiln.tensor.llm.weights import LoadedModel
from kiln.tensor.tensor import Tensor

__all__ = ["GenerationStats", "Generator", "sample"]


@dataclass
class GenerationStats:
    """Token counts and seconds of the last `generate` call's prefill and decode."""

    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_tokens: int = 0
    decode_seconds: float = 0.0

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prefill_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds else 0.0


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


class Generator:
    """Generates tokens from a loaded model (batch 1)."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded, self.model, self.config = loaded, loaded.model, loaded.config
        self.position_variable = Variable("start_pos", 0, self.model.max_context - 1)
        self.model._caches(1)  # allocated before the step is captured: the replays write these very buffers
        self.steps: dict[SamplingMode, TinyJit[Tensor]] = {}
        self.last_stats = GenerationStats()
        self.position = 0

    def step(self, mode: SamplingMode) -> TinyJit[Tensor]:
        """The jitted decode step of a sampling mode: (token (1, 1) int32, position, params (4,) float32) -> the next
        token id (1,) int32."""
        if mode not in self.steps:

            def decode(token: Tensor, start_pos: Tensor, params: Tensor) -> Tensor:
                logits = self.model.forward_embedded(self.model.embed(token), start_pos)[0, -1, :]
                return sample_on_device(logits, params, mode)

            self.steps[mode] = TinyJit(decode)
        return self.steps[mode]

    def reset(self) -> None:
        """Clears the KV cache (the next `generate` starts from an empty context)."""
        self.model.reset()
        self.position = 0

    def generate(
        self,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_ids: set[int] | None = None,
    ) -> Iterator[int]:
        """Yields up to `max_tokens` new token ids after `prompt_ids` (the cache is reset first), stopping after a
        token in `stop_ids` (which is yielded) or at the end of the context (the model's `max_context`).

        Raises:
            ValueError: an empty prompt, a prompt longer than the context, a token outside the vocabulary, or a
                negative max_tokens / temperature, top_k < 0, top_p outside (0, 1].
        """
        context, vocab = self.model.max_context, self.config.vocab_size
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
        return self._generate(list(prompt_ids), max_tokens, temperature, top_k, top_p, seed, stop_ids or set())

    def _generate(
        self, prompt: list[int], max_tokens: int, temperature: float, top_k: int, top_p: float, seed: int | None,
        stop_ids: set[int],
    ) -> Iterator[int]:  # fmt: skip
        rng = np.random.default_rng(seed)
        stats = self.last_stats = GenerationStats()
        self.reset()
        if max_tokens == 0:
            return
        mode = SamplingMode.of(temperature, top_k, top_p, self.config.vocab_size)
        step = self.step(mode)
        started = time.perf_counter()
        ids = Tensor(np.array([prompt], np.int32))
        logits = self.model.forward_embedded(self.model.embed(ids).contiguous(), 0)[0, -1]
        token = int(sample_on_device(logits, sampling_params(temperature, top_k, top_p, rng), mode).numpy()[0])
        self.position = len(prompt)
        stats.prefill_tokens, stats.prefill_seconds = len(prompt), time.perf_counter() - started
        yield token
        produced = 1
        while produced < max_tokens and token not in stop_ids and self.position < self.model.max_context:
            started = time.perf_counter()
            params = sampling_params(temperature, top_k, top_p, rng)
            token_input = Tensor(np.array([[token]], np.int32))
            token = int(step(token_input, self.position_variable.bind(self.position), params).numpy()[0])
            self.position += 1
            stats.decode_tokens += 1
            stats.decode_seconds += time.perf_counter() - started
            yield token
            produced += 1
