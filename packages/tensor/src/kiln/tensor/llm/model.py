"""`Transformer`: the llama-family decoder (RMSNorm, RoPE, GQA, SwiGLU or top-k MoE, optional QK-norm and biases),
built from `kiln.tensor.nn` modules (kiln.tensor.llm.layers) whose attribute paths are the GGUF tensor names:
`model.state_dict()` lists `token_embd.weight`, `blk.N.attn_q.weight`, ..., `output_norm.weight`, `output.weight`,
and `load_state_dict` (or the `weights` argument) puts Tensors / `QuantizedWeight`s in place (kiln.tensor.llm.weights
maps safetensors names onto GGUF ones). A family's differences are config fields that choose its layers (biases,
QK-norm, MoE with or without a shared expert, a tied head).

Each layer owns a KV cache (batch, kv_heads, max_context, head_dim) updated in place (`max_context`: at most the
trained context, by default min(trained context, 4096), so a 128k-context model does not allocate its whole
context's cache up front). A call at `start_pos` with T tokens writes cache rows start_pos .. start_pos + T - 1 (an
indexed store into that slice) and attends over rows 0 .. start_pos + T - 1 only, so its work follows the position.
start_pos and T may be bound Variables (a jitted decode step's position, a prefill chunk's length): the slices'
bounds are then symbolic and one set of kernels serves every value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from kiln.tensor.jit import BoundVariable
from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.latent_attention import LatentAttention
from kiln.tensor.llm.layers import Block, PageRows, Positions, Projection, Rotary, TokenEmbedding, WeightModule
from kiln.tensor.llm.quantized import Weight, linear
from kiln.tensor.nn import RMSNorm
from kiln.tensor.symbolic import Size, as_size, bound_int, describe_variables, format_shape, max_int
from kiln.tensor.tensor import Tensor

__all__ = ["DEFAULT_MAX_CONTEXT", "Transformer"]


DEFAULT_MAX_CONTEXT = 4096
"""The KV cache's length when `max_context` is not given (or the trained context, when that is shorter)."""


class Transformer(WeightModule):
    """The decoder: `token_embd`, the layers `blk` (a list of `Block`s), `output_norm` and the head `output` (absent
    when `config.tie_embeddings`: the head is the embedding table). `weights` (GGUF name -> Tensor or
    QuantizedWeight) are loaded with `load_state_dict` when given; `max_context` positions fit the KV cache (None:
    min(trained context, DEFAULT_MAX_CONTEXT)).

    Raises:
        ValueError: a missing, unexpected or wrongly shaped weight (naming it), or a max_context below 1 or above
            the trained context.
    """

    def __init__(
        self, config: LlamaConfig, weights: Mapping[str, Weight] | None = None, max_context: int | None = None
    ) -> None:
        super().__init__()
        trained = config.context_length
        if max_context is None:
            max_context = min(trained, DEFAULT_MAX_CONTEXT)
        if isinstance(max_context, bool) or not isinstance(max_context, int) or not 1 <= max_context <= trained:
            raise ValueError(f"max_context must be an int in [1, {trained}] (the trained context), got {max_context!r}")
        self.config, self.max_context = config, max_context
        self.token_embd = TokenEmbedding(config.vocab_size, config.dim)
        self.blk = [
            Block(config, max_context, i, LatentAttention(config, max_context) if config.kv_lora_rank else None)
            for i in range(config.n_layers)
        ]
        self.output_norm = RMSNorm(config.dim, config.norm_eps)
        if not config.tie_embeddings:
            self.output = Projection(config.dim, config.vocab_size)
        self._rotary = Rotary(config, max_context)
        # Gemma 3: the sliding layers rotate with their own base, unscaled
        local = (
            replace(config, rope_theta=config.rope_local_theta, rope_scaling={}) if config.rope_local_theta else None
        )
        self._local_rotary = None if local is None else Rotary(local)
        if weights is not None:
            try:
                self.load_state_dict(weights)
            except RuntimeError as error:
                raise ValueError(str(error)) from None

    @property
    def weights(self) -> dict[str, Weight]:
        """GGUF name -> weight (the state dict)."""
        return self.state_dict()

    @property
    def caches(self) -> list[tuple[Tensor, Tensor]]:
        """The (key, value) cache of each layer (empty before the first forward pass allocates them)."""
        return [cache for block in self.blk for cache in block.attention.caches]

    def _caches(self, batch: int) -> list[tuple[Tensor, Tensor]]:
        return [block.attention.allocate_cache(batch) for block in self.blk]

    def cache_bytes(self) -> int:
        """The bytes the allocated KV caches and paged KV pools hold (0 before the first forward pass allocates
        them)."""
        pairs = [*self.caches, *(pool for block in self.blk for pool in block.attention.pools)]
        return sum(t.numel() * t.dtype.itemsize for pair in pairs for t in pair)

    def reset(self) -> None:
        """Zeroes the KV caches in place (the same buffers, so a jitted step stays valid)."""
        for key, value in self.caches:
            key.assign(Tensor.zeros(*key.shape)).realize()
            value.assign(Tensor.zeros(*value.shape)).realize()

    def embed(self, tokens: Tensor) -> Tensor:
        """The embeddings of int token ids `tokens` (B, T) (a device Tensor), (B, T, dim) float32, read as a gather
        of the T rows (see `TokenEmbedding`): a new token id compiles nothing. Gemma scales them by sqrt(dim)."""
        embedded: Tensor = self.token_embd(tokens)
        scale = self.config.embedding_scale
        return embedded if scale == 1.0 else embedded * float(np.float32(scale))

    def __call__(self, tokens: Tensor, start_pos: int | Tensor | BoundVariable) -> Tensor:
        """Logits (B, T, vocab) of `tokens` (B, T) placed at positions start_pos.. of the cache."""
        return self.forward(tokens, start_pos)

    def forward(self, tokens: Tensor, start_pos: int | Tensor | BoundVariable) -> Tensor:
        """Logits (B, T, vocab) of `tokens` (B, T) placed at positions start_pos.. of the cache."""
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be (batch, seq), got shape {tokens.shape}")
        return self.forward_embedded(self.embed(tokens), start_pos)

    def forward_embedded(
        self,
        h: Tensor,
        start_pos: int | Tensor | BoundVariable,
        *,
        last_only: bool = False,
        slot: int | Tensor | BoundVariable | None = None,
        slots: int = 1,
        pages: tuple[PageRows, PageRows | None] | None = None,
    ) -> Tensor:
        """Logits (B, T, vocab) of embedded tokens `h` (B, T, dim) placed at cache positions start_pos ..
        start_pos + T - 1, attending over positions 0 .. start_pos + T - 1 only. `last_only`: the logits of the
        last position only, (B, 1, vocab) (a prompt needs no others: the vocabulary projection of every position
        would cost as much as a fifth of the whole prefill).

        T may be symbolic (`tokens[:, :length]` with `length` a bound Variable) and start_pos an int, a
        `BoundVariable`, or the Tensor a jitted function receives for one: the kernels then depend on the variables'
        ranges, not their values (one compile serves every position and length).

        Raises:
            ValueError: h not (B, T, dim); positions past max_context (for bound variables: their bound values, or
                ranges that could reach past it, e.g. start_pos in [0, 99] with T in [1, 8] for a 100-row cache).
            TypeError: a start_pos that is neither an int nor a bound Variable.

        `slot` (with `slots`, the batch of a cache of sequence slots, kiln.tensor.llm.batching): a batch-1 pass
        that writes and reads that slot's rows of the `slots`-row cache (an int, or a bound Variable).

        `pages` (the rows of the full-attention layers and of the sliding ones, kiln.tensor.llm.paged_cache): the
        pass writes and reads the rows of a paged KV pool instead of the per-batch cache.
        """
        config = self.config
        if h.ndim != 3 or h.shape[2] != config.dim:
            raise ValueError(f"embedded tokens must be (batch, seq, {config.dim}), got shape {format_shape(h.shape)}")
        batch, length = h.shape[0], h.shape[1]
        start = as_size(start_pos, "start_pos")
        end = start + length
        self._check_span(start, length, end)
        offset = Tensor(start_pos) if isinstance(start_pos, BoundVariable) else start_pos  # the start as a value
        queries_at = Tensor.arange(length).reshape(length, 1) + offset  # (T, 1)
        cos, sin = self._rotary.angles(queries_at.float())
        mask = window = None
        keys_at = Tensor.arange(self.max_context)[:end].unsqueeze(0)  # (1, end)
        if not (isinstance(length, int) and length == 1):  # one query at the last position sees every key
            mask = (keys_at <= queries_at).where(0.0, float("-inf")).unsqueeze(0).unsqueeze(0)  # (1, 1, T, end)
        if config.sliding_window:  # the sliding layers' mask also hides the keys the window has left behind
            seen = (keys_at <= queries_at) & (keys_at > queries_at - config.sliding_window)
            window = seen.where(0.0, float("-inf")).unsqueeze(0).unsqueeze(0)  # (1, 1, T, end)
        local_cos = local_sin = None
        if self._local_rotary is not None:
            local_cos, local_sin = self._local_rotary.angles(queries_at.float())
        if pages is not None:
            where = Positions(
                start, end, cos, sin, mask, self._rotary, window_mask=window, local_cos=local_cos,
                local_sin=local_sin, pages=pages[0], window_pages=pages[1],
            )  # fmt: skip
        elif slot is None:
            where = Positions(
                start, end, cos, sin, mask, self._rotary, window_mask=window, local_cos=local_cos, local_sin=local_sin
            )
        else:
            if batch != 1:
                raise ValueError(f"a pass into one cache slot takes a batch of 1 sequence, got {batch}")
            row = as_size(slot, "slot")
            if not 0 <= bound_int(row) <= max_int(row) < slots:
                raise ValueError(f"slot {bound_int(row)} (at most {max_int(row)}) is not one of {slots} cache slots")
            where = Positions(
                start, end, cos, sin, mask, self._rotary, cache_batch=slots, slot=row, window_mask=window,
                local_cos=local_cos, local_sin=local_sin,
            )  # fmt: skip
        if pages is None:
            self._caches(where.cache_batch or batch)
        for block in self.blk:
            h = block(h, where)
        if last_only:
            h = h[:, length - 1 : length]
        return self._head(h)

    def forward_batched_decode(
        self,
        h: Tensor,
        positions: Tensor,
        end: int | Tensor | BoundVariable,
        slots: int | None = None,
        pages: tuple[PageRows, PageRows | None] | None = None,
    ) -> Tensor:
        """Logits (W, 1, vocab) of one embedded token per sequence slot 0 .. W - 1, `h` (W, 1, dim), each at its own
        cache position `positions` (W,) int32 of the cache of `slots` sequence slots (default W): slot s writes its
        key and value to row positions[s] and attends over its rows 0 .. positions[s]. The pass reads rows 0 ..
        end - 1 of every slot (`end` > every position: an int or a bound Variable, so one set of kernels serves
        every value) and masks each slot's rows past its position; a slot nobody uses computes values that nobody
        reads (a position of max_context writes no row). With `pages` (as `forward_embedded`'s), each sequence's row
        goes to the paged pool row its `write` names and it reads its rows through its `read` map.

        Raises:
            ValueError: h not (W, 1, dim), positions not (W,), W above slots, or end outside [1, max_context].
        """
        width = h.shape[0]
        if h.ndim != 3 or h.shape[1] != 1 or h.shape[2] != self.config.dim or not isinstance(width, int):
            raise ValueError(f"embedded tokens must be (slots, 1, {self.config.dim}), got {format_shape(h.shape)}")
        slots = width if slots is None else slots
        if width > slots:
            raise ValueError(f"{width} sequences do not fit a cache of {slots} slots")
        if positions.shape != (width,):
            raise ValueError(f"positions must be ({width},), one per slot, got {format_shape(positions.shape)}")
        stop = as_size(end, "end")
        if not 1 <= bound_int(stop) <= max_int(stop) <= self.max_context:
            raise ValueError(f"end {bound_int(stop)} (at most {max_int(stop)}) must be in [1, {self.max_context}]")
        cos, sin = self._slot_angles(self._rotary, positions)
        keys_at = Tensor.arange(self.max_context)[:stop]  # (end,)
        at = positions.reshape(width, 1)
        visible = (keys_at.unsqueeze(0) <= at).where(0.0, float("-inf"))  # (W, end)
        mask = visible.unsqueeze(1).unsqueeze(1).unsqueeze(1)  # (W, 1, 1, 1, end)
        window = local_cos = local_sin = None
        if self.config.sliding_window:
            seen = (keys_at.unsqueeze(0) <= at) & (keys_at.unsqueeze(0) > at - self.config.sliding_window)
            window = seen.where(0.0, float("-inf")).unsqueeze(1).unsqueeze(1).unsqueeze(1)  # (W, 1, 1, 1, end)
        if self._local_rotary is not None:
            local_cos, local_sin = self._slot_angles(self._local_rotary, positions)
        if pages is not None:
            where = Positions(
                0, stop, cos, sin, mask, self._rotary, window_mask=window, local_cos=local_cos, local_sin=local_sin,
                pages=pages[0], window_pages=pages[1],
            )  # fmt: skip
        else:
            rows = keys_at.unsqueeze(-1).unsqueeze(0).unsqueeze(0) == at.reshape(width, 1, 1, 1)  # (W, 1, end, 1)
            where = Positions(
                0, stop, cos, sin, mask, self._rotary, cache_batch=slots, rows=rows, window_mask=window,
                local_cos=local_cos, local_sin=local_sin,
            )  # fmt: skip
            self._caches(slots)
        for block in self.blk:
            h = block(h, where)
        return self._head(h)

    @staticmethod
    def _slot_angles(rotary: Rotary, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin (W, 1, 1, D/2) of one position per slot, against (W, heads, 1, D/2)."""
        width = positions.shape[0]
        cos, sin = rotary.angles(positions.float().reshape(width, 1))  # (W, D/2)
        half = cos.shape[-1]
        return cos.reshape(width, 1, 1, half), sin.reshape(width, 1, 1, half)

    def _head(self, h: Tensor) -> Tensor:
        """The logits of the last layer's output h (B, T, dim): the final norm, then the (maybe tied) head, then
        Gemma 2's soft-cap (cap * tanh(logits / cap))."""
        config = self.config
        h = self.output_norm(h)
        logits = linear(h, self.token_embd.weight) if config.tie_embeddings else self.output(h)
        if config.final_softcap:
            logits = (logits * (1.0 / config.final_softcap)).tanh() * config.final_softcap
        return logits

    def _check_span(self, start: Size, length: Size, end: Size) -> None:
        """Raises ValueError unless rows start .. end - 1 fit the cache (for bound variables: at their values, and
        over their whole ranges, which the kernels are built for)."""
        first, last = bound_int(start), bound_int(end) - 1
        if first < 0 or last >= self.max_context:
            raise ValueError(f"positions {first}..{last} exceed the context length {self.max_context}")
        if not isinstance(end, int) and max_int(end) > self.max_context:
            raise ValueError(
                f"start_pos + T reaches {max_int(end)} for some values of {describe_variables(start, length)}, past "
                f"the context length {self.max_context}: bound the variables so start_pos + T <= {self.max_context}"
            )
