"""The llama family's layers as `kiln.tensor.nn` modules: `Projection`, `TokenEmbedding`, `Experts`, `Attention`
(with its KV cache), `FeedForward`, `MoE` and `Block`, all `WeightModule`s.

A weight is a float Tensor or a `QuantizedWeight` (kept as its ggml blocks, decoded inside the kernel that reads
it); kiln.tensor.llm.weight_module names and loads both as leaves under the GGUF tensor names
(`blk.0.attn_q.weight`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.quantized import QuantizedWeight, Weight, linear
from kiln.tensor.llm.weight_module import WeightModule, named_weights
from kiln.tensor.nn import Module, RMSNorm
from kiln.tensor.symbolic import Size, max_int
from kiln.tensor.tensor import Tensor

__all__ = [
    "Attention",
    "Block",
    "CachedAttention",
    "Experts",
    "FeedForward",
    "MoE",
    "PageRows",
    "Positions",
    "Projection",
    "Rotary",
    "TokenEmbedding",
    "WeightModule",
    "named_weights",
]


def _placeholder(*shape: int) -> Tensor:
    # never realized: load_state_dict replaces it (a model is built, then loaded)
    return Tensor.empty(*shape)


class Projection(WeightModule):
    """y = x @ weight.T (+ bias) in float32, like `nn.Linear`, over a weight (out_features, in_features) that may
    be half precision or a `QuantizedWeight` (decoded inside the product, kiln.tensor.llm.quantized.linear)."""

    accepts_quantized = True

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight: Weight = _placeholder(out_features, in_features)
        self.bias: Tensor | None = _placeholder(out_features) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward(x)

    def forward(self, x: Tensor) -> Tensor:
        """x @ weight.T + bias, float32."""
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class TokenEmbedding(WeightModule):
    """The rows of a (vocab, dim) table picked by int token ids, like `nn.Embedding`, the table possibly quantized."""

    accepts_quantized = True

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight: Weight = _placeholder(num_embeddings, embedding_dim)

    def matrix(self) -> Tensor:
        """The table as a lazy float32 Tensor (a quantized one decoded where it is read)."""
        return self.weight.dequantized() if isinstance(self.weight, QuantizedWeight) else self.weight.float()

    def __call__(self, tokens: Tensor) -> Tensor:
        return self.forward(tokens)

    def forward(self, tokens: Tensor) -> Tensor:
        """(*tokens.shape, dim) float32: a one-hot product with the table, which codegen's gather rewrite
        (kiln.codegen.opt.gather) turns into reading the picked rows only. A quantized table's picked rows are
        gathered as bytes and only they are decoded (`QuantizedWeight.take_rows`; a one-hot product over the decoded
        table had the scheduler decode the whole table first). The kernel depends on the tokens' shape, not on their
        values."""
        if isinstance(self.weight, QuantizedWeight):
            return self.weight.take_rows(tokens)
        matrix = self.matrix()
        vocab, dim = self.num_embeddings, self.embedding_dim
        # a broadcast product summed over the vocabulary, not `@`: the matmul of 2 or more rows is laid out for
        # register tiles and is not recognised as a gather (64 prompt tokens read the whole table: 18 ms, not 1)
        picked = (tokens.reshape(-1, 1, 1) == Tensor.arange(vocab).reshape(1, vocab, 1)).where(1.0, 0.0)
        return (picked * matrix.reshape(1, vocab, dim)).sum(1).reshape(*tokens.shape, dim)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Experts(WeightModule):
    """The stacked (experts, out_features, in_features) matrices of a MoE layer's experts (one GGUF tensor)."""

    accepts_quantized = True

    def __init__(self, experts: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.experts, self.in_features, self.out_features = experts, in_features, out_features
        self.weight: Weight = _placeholder(experts, out_features, in_features)

    def picked(self, hot: Tensor) -> Tensor:
        """The matrices of the experts a one-hot `hot` (..., experts, 1) picks, (..., out_features, in_features)
        float32: a product with the one-hot summed over the experts, which codegen's gather rewrite
        (kiln.codegen.opt.gather) turns into reading the picked matrices only (a quantized one decoded as read)."""
        matrix = self.weight.dequantized() if isinstance(self.weight, QuantizedWeight) else self.weight.float()
        flat = matrix.reshape(self.experts, self.out_features * self.in_features)
        picked = (hot * flat).sum(-2)  # (..., out * in)
        return picked.reshape(*picked.shape[:-1], self.out_features, self.in_features)

    def extra_repr(self) -> str:
        return f"experts={self.experts}, in_features={self.in_features}, out_features={self.out_features}"


class Rotary:
    """Rotary position embedding: the inverse frequencies and attention scale of a config (kiln's own tensors,
    not weights), the cos / sin of positions, and the rotation of a (B, H, T, D) query or key. `context`: the
    positions the model runs over (`LlamaConfig.inv_freq`)."""

    def __init__(self, config: LlamaConfig, context: int | None = None) -> None:
        inv_freq, self.scale = config.inv_freq(context)
        self.inv_freq = Tensor(inv_freq.astype(np.float32).reshape(1, -1))
        self.interleaved = config.rope_interleaved

    def angles(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin (T, D/2) (times the attention scale) of float positions (T, 1)."""
        angles = positions * self.inv_freq
        return angles.cos() * self.scale, angles.sin() * self.scale

    def rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """x (B, H, T, D) rotated by the angles whose cos / sin are (T, D/2): pairs (2i, 2i+1) when interleaved
        (GGUF's llama layout), else (i, i + D/2)."""
        half = x.shape[-1] // 2
        if self.interleaved:
            pairs = x.reshape(*x.shape[:-1], half, 2)
            a, b = pairs[..., 0], pairs[..., 1]
            return Tensor.stack(a * cos - b * sin, a * sin + b * cos, dim=-1).reshape(x.shape)
        a, b = x[..., :half], x[..., half:]
        return Tensor.cat(a * cos - b * sin, b * cos + a * sin, dim=-1)


@dataclass(frozen=True)
class PageRows:
    """Where a pass's keys and values go in a paged KV pool of `pool_rows` rows (kiln.tensor.llm.paged_cache), and
    which rows it reads: `read` (B, end) int32, the pool row of each sequence's positions 0 .. end - 1 (a position
    it does not hold reads a row that its mask hides). A pass writes `pieces`, `sources` or `tail_row`."""

    pool_rows: int
    read: Tensor
    pieces: tuple[tuple[Size, Size, Size], ...] = ()
    """A prefill's writes (one sequence): (pool row, first key, count) per run of its keys into consecutive pool
    rows (a block's), each a slice store of `count` rows (sizes bound per call; a run the chunk does not need writes
    one row into the scratch block)."""
    sources: Tensor | None = None
    """A decode step's (one key per sequence): (rows,) int32, the batch row + 1 whose new key goes to each of the
    pool rows tail .. tail + rows - 1 (0: the row keeps its value). Those rows, a block per sequence slot after the
    pool's blocks, hold each decoding sequence's newest block until it is full and copied into its block's rows, so a
    step rewrites a block per sequence, not the pool."""
    tail: int = 0
    tail_row: Size | None = None
    """Instead of `sources`, for a decode step of one sequence: the pool row its new key goes to (a slice store of
    one row, bound per step)."""


@dataclass(frozen=True)
class Positions:
    """Where a forward pass's T tokens sit in the KV cache: rows start .. end - 1 (ints, or symbolic sizes over
    bound Variables), their rotary cos / sin ((T, D/2), or (B, 1, 1, D/2) for one token per sequence at its own
    position), and the mask added to the attention scores (B, kv_heads, group, T, end), broadcast from (1, 1, T, end)
    or (B, 1, 1, 1, end) (None where every key is visible).

    `window_mask` (with a config's sliding window): the mask of the sliding layers, which also hides the keys more
    than the window behind each query (also for one query); `local_cos` / `local_sin`: the rotary of the sliding
    layers where it has another base (Gemma 3).

    `pages` (a paged KV pool instead of per-slot rows): the rows of the full-attention layers, `window_pages` those
    of the sliding layers (their own pool, whose blocks behind the window are released).

    Two ways to address a cache of several sequence slots (`cache_batch` of them):
    - `slot` (a size, maybe symbolic): a batch-1 pass writes and reads that slot's rows only (a request's prefill);
    - `rows` (a (B, 1, end, 1) bool Tensor, B <= cache_batch: slots 0 .. B - 1): each sequence's new key and value
      go to the row its one-hot marks (a batched decode step, every sequence at its own position); the pass reads
      rows 0 .. end - 1 of every slot, and `mask` hides each sequence's rows past its position.
    """

    start: Size
    end: Size
    cos: Tensor
    sin: Tensor
    mask: Tensor | None
    rotary: Rotary
    cache_batch: int | None = None
    slot: Size | None = None
    rows: Tensor | None = None
    window_mask: Tensor | None = None
    local_cos: Tensor | None = None
    local_sin: Tensor | None = None
    pages: PageRows | None = None
    window_pages: PageRows | None = None

    def of_layer(self, sliding: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        """(cos, sin, mask) of a layer: a sliding-window layer's mask hides the keys before its window (`window_mask`,
        shaped like `mask` but never None) and its rotary may have its own base (`local_cos` / `local_sin`)."""
        if not sliding:
            return self.cos, self.sin, self.mask
        if self.local_cos is not None and self.local_sin is not None:
            return self.local_cos, self.local_sin, self.window_mask
        return self.cos, self.sin, self.window_mask


class CachedAttention(WeightModule):
    """The KV cache of an attention layer: per batch size, a (key, value) pair of private buffers (not weights),
    (batch, cache_heads, max_context, width) each, written in place row by row."""

    _sliding = False  # whether the layer sees a sliding window only (its paged rows are `window_pages`)

    def __init__(self, cache_heads: int, key_width: int, value_width: int, max_context: int) -> None:
        super().__init__()
        self._cache_shapes = ((cache_heads, max_context, key_width), (cache_heads, max_context, value_width))
        # one cache per batch size: a batch-1 generator and a batched one share the weights, not the cache rows
        self._caches: dict[int, tuple[Tensor, Tensor]] = {}
        self._pools: dict[int, tuple[Tensor, Tensor]] = {}  # paged pools by their number of rows

    def __call__(self, h: Tensor, where: Positions) -> Tensor:
        return self.forward(h, where)

    def forward(self, h: Tensor, where: Positions) -> Tensor:
        """The attention output (B, T, dim) of the residual stream h (B, T, dim); each kind of attention has its own."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward")

    @property
    def cache(self) -> tuple[Tensor, Tensor] | None:
        """The (key, value) cache of batch 1 (else the first one allocated), None before `allocate_cache`."""
        return self._caches.get(1, next(iter(self._caches.values()), None))

    @property
    def caches(self) -> list[tuple[Tensor, Tensor]]:
        """Every allocated (key, value) cache, one per batch size."""
        return list(self._caches.values())

    def allocate_cache(self, batch: int) -> tuple[Tensor, Tensor]:
        """The (key, value) cache for `batch` rows: the same buffers on every call for that batch (new zeroed ones
        the first time)."""
        if batch not in self._caches:
            keys, values = self._cache_shapes
            self._caches[batch] = (
                Tensor.zeros(batch, *keys).contiguous().realize(),
                Tensor.zeros(batch, *values).contiguous().realize(),
            )
        return self._caches[batch]

    @property
    def pools(self) -> list[tuple[Tensor, Tensor]]:
        """Every allocated paged (key, value) pool, (cache_heads, rows, width) each."""
        return list(self._pools.values())

    def allocate_pool(self, rows: int) -> tuple[Tensor, Tensor]:
        """The paged (key, value) pool of `rows` rows shared by every sequence: the same buffers on every call (new
        zeroed ones the first time)."""
        if rows not in self._pools:
            (heads, _, key_width), (_, _, value_width) = self._cache_shapes
            self._pools[rows] = (
                Tensor.zeros(heads, rows, key_width).contiguous().realize(),
                Tensor.zeros(heads, rows, value_width).contiguous().realize(),
            )
        return self._pools[rows]

    def store(self, k: Tensor, v: Tensor, where: Positions) -> tuple[Tensor, Tensor]:
        """Writes the pass's keys and values k, v (B, cache_heads, T, width) to their cache rows (an indexed store)
        and returns the cache rows 0 .. where.end - 1 the pass attends over, (B, cache_heads, end, width) each."""
        pages = where.window_pages if self._sliding and where.window_pages is not None else where.pages
        if pages is not None:
            return self._store_paged(k, v, pages)
        batch = k.shape[0]
        key_cache, value_cache = self.allocate_cache(where.cache_batch or batch)
        if where.slot is not None:  # one slot of a batched cache: its rows only
            key_cache, value_cache = key_cache[where.slot : where.slot + 1], value_cache[where.slot : where.slot + 1]
        elif key_cache.shape[0] != batch:  # the first `batch` slots of a batched cache
            key_cache, value_cache = key_cache[:batch], value_cache[:batch]
        if where.rows is not None:  # each sequence's row at its own position: a one-hot select over rows 0..end-1
            old_keys, old_values = key_cache[:, :, : where.end], value_cache[:, :, : where.end]
            Tensor.realize_all(
                old_keys.assign(where.rows.where(k, old_keys)), old_values.assign(where.rows.where(v, old_values))
            )
        else:
            Tensor.realize_all(
                key_cache[:, :, where.start : where.end].assign(k),
                value_cache[:, :, where.start : where.end].assign(v),
            )
        return key_cache[:, :, : where.end], value_cache[:, :, : where.end]

    def _store_paged(self, k: Tensor, v: Tensor, pages: PageRows) -> tuple[Tensor, Tensor]:
        """The paged store: each new key and value to its pool row (an indexed write into the pool buffers; a
        decode step's into its slot's tail block), then each sequence's rows gathered through its row map (a gather
        that reads only the rows it picks)."""
        key_pool, value_pool = self.allocate_pool(pages.pool_rows)
        length = k.shape[2]
        if pages.tail_row is not None:  # a decode step of one sequence: a slice store of its row
            row = pages.tail_row
            Tensor.realize_all(key_pool[:, row : row + 1].assign(k[0]), value_pool[:, row : row + 1].assign(v[0]))
        elif pages.sources is not None:  # a decode step: one key per sequence, rows tail .. tail + rows - 1 rewritten
            stores = []
            for pool, new in ((key_pool, k), (value_pool, v)):
                region = pool[:, pages.tail : pages.tail + pages.sources.shape[0]]
                stores.append(region.assign(_scattered(pages.sources, new[:, :, 0].permute(1, 0, 2), region)))
            Tensor.realize_all(*stores)
        else:  # a prefill chunk: its runs of keys into consecutive pool rows, a slice store each
            span = max(max_int(first) + max_int(count) for _, first, count in pages.pieces)
            stores = []
            for pool, new in ((key_pool, k), (value_pool, v)):
                rows = new[0].pad((0, 0, 0, span - length))  # (heads, span, width): every run's keys in range
                for row, first, count in pages.pieces:
                    stores.append(pool[:, row : row + count].assign(rows[:, first : first + count]))
            Tensor.realize_all(*stores)
        return key_pool[:, pages.read].permute(1, 0, 2, 3), value_pool[:, pages.read].permute(1, 0, 2, 3)


def _scattered(sources: Tensor, new: Tensor, region: Tensor) -> Tensor:
    """`region` (heads, R, width) with row r replaced by new[:, sources[r] - 1] where sources[r] > 0 (new: (heads,
    W, width)): the pick is a one-hot sum over the W rows, which codegen's gather rewrite turns into one load."""
    count, batch = sources.shape[0], new.shape[1]
    hot = ((sources - 1).reshape(count, 1) == Tensor.arange(batch).reshape(1, batch)).where(1.0, 0.0)
    picked = (hot.reshape(1, count, batch, 1) * new.reshape(new.shape[0], 1, batch, new.shape[2])).sum(2)
    return (sources > 0).reshape(1, count, 1).where(picked.cast(region.dtype), region)


def attend(scores: Tensor, values: Tensor, mask: Tensor | None, softcap: float) -> Tensor:
    """softmax(scores (soft-capped: cap * tanh(scores / cap), when softcap > 0) + mask) @ values."""
    if softcap:
        scores = (scores * (1.0 / softcap)).tanh() * softcap
    if mask is not None:
        scores = scores + mask
    return scores.softmax(-1) @ values


class Attention(CachedAttention):
    """Grouped-query self-attention with RoPE (pre-normed unless `config.pre_norm` is False), optional QK-norm (per
    head, or over the whole projection: `qk_norm_full`), q/k/v biases, score soft-capping and a sliding window, and
    its KV cache (batch, kv_heads, max_context, head_dim)."""

    def __init__(self, config: LlamaConfig, max_context: int, layer: int = 0) -> None:
        dim, heads, kv_heads, head_dim = config.dim, config.n_heads, config.n_kv_heads, config.head_dim
        super().__init__(kv_heads, head_dim, head_dim, max_context)
        if config.pre_norm:
            self.attn_norm = RMSNorm(dim, config.norm_eps)
        self.attn_q = Projection(dim, heads * head_dim, config.attention_bias)
        self.attn_k = Projection(dim, kv_heads * head_dim, config.attention_bias)
        self.attn_v = Projection(dim, kv_heads * head_dim, config.attention_bias)
        self.attn_output = Projection(heads * head_dim, dim)
        if config.qk_norm:
            self.attn_q_norm = RMSNorm(heads * head_dim if config.qk_norm_full else head_dim, config.norm_eps)
            self.attn_k_norm = RMSNorm(kv_heads * head_dim if config.qk_norm_full else head_dim, config.norm_eps)
        self._heads, self._kv_heads, self._head_dim = heads, kv_heads, head_dim
        self._full_qk_norm, self._sliding, self._softcap = (
            config.qk_norm_full,
            config.is_sliding(layer),
            config.attn_softcap,
        )
        self._scale = config.attention_scale if config.attention_scale is not None else 1.0 / float(np.sqrt(head_dim))

    def forward(self, h: Tensor, where: Positions) -> Tensor:
        """The attention output (B, T, dim) of the residual stream h (B, T, dim) at positions where.start ..
        where.end - 1: their keys and values are written to those cache rows (an indexed store), then the queries
        attend over cache rows 0 .. where.end - 1 only. With symbolic start and T, one set of kernels serves every
        value (the slices' bounds are the variables)."""
        batch, length = h.shape[0], h.shape[1]
        heads, kv_heads, head_dim = self._heads, self._kv_heads, self._head_dim
        x: Tensor = self.attn_norm(h) if hasattr(self, "attn_norm") else h
        q, k = self.attn_q(x), self.attn_k(x)
        if self._full_qk_norm:  # OLMo 2: over the whole projection, before the heads are split
            q, k = self.attn_q_norm(q), self.attn_k_norm(k)
        q = q.reshape(batch, length, heads, head_dim)
        k = k.reshape(batch, length, kv_heads, head_dim)
        v = self.attn_v(x).reshape(batch, length, kv_heads, head_dim).transpose(1, 2)
        if hasattr(self, "attn_q_norm") and not self._full_qk_norm:
            q, k = self.attn_q_norm(q), self.attn_k_norm(k)
        cos, sin, mask = where.of_layer(self._sliding)
        q = where.rotary.rotate(q.transpose(1, 2), cos, sin)
        k = where.rotary.rotate(k.transpose(1, 2), cos, sin)
        key_rows, value_rows = self.store(k, v, where)
        # grouped queries against their KV head's rows, broadcast over the group: (B, KVH, G, T, D) @ (B, KVH, 1, D, S).
        # The cache slice is never reshaped: merging a group axis into a view whose length is a variable makes its
        # index a division by that variable (35x slower kernels than the int-shaped ones).
        keys, values = key_rows.unsqueeze(2), value_rows.unsqueeze(2)
        grouped = q.reshape(batch, kv_heads, heads // kv_heads, length, head_dim)
        scores = (grouped @ keys.transpose(-1, -2)) * self._scale
        attended = attend(scores, values, mask, self._softcap).reshape(batch, heads, length, head_dim)
        return self.attn_output(attended.transpose(1, 2).reshape(batch, length, heads * head_dim))


def gated(gate: Tensor, up: Tensor, activation: str) -> Tensor:
    """act(gate) * up: SwiGLU (silu) or GeGLU (gelu_tanh, the tanh approximation)."""
    return (gate.gelu(approximate="tanh") if activation == "gelu_tanh" else gate.silu()) * up


class FeedForward(WeightModule):
    """SwiGLU or GeGLU, pre-normed unless `config.pre_norm` is False: down(act(gate(x)) * up(x)). `hidden`: the
    hidden size (default config.hidden_dim)."""

    def __init__(self, config: LlamaConfig, hidden: int | None = None) -> None:
        super().__init__()
        hidden = config.hidden_dim if hidden is None else hidden
        if config.pre_norm:
            self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.ffn_gate = Projection(config.dim, hidden)
        self.ffn_up = Projection(config.dim, hidden)
        self.ffn_down = Projection(hidden, config.dim)
        self._activation = config.activation

    def __call__(self, h: Tensor) -> Tensor:
        return self.forward(h)

    def forward(self, h: Tensor) -> Tensor:
        """The feed-forward output (B, T, dim) of the residual stream h."""
        x: Tensor = self.ffn_norm(h) if hasattr(self, "ffn_norm") else h
        return self.ffn_down(gated(self.ffn_gate(x), self.ffn_up(x), self._activation))


class MoE(WeightModule):
    """Pre-normed top-k routed SwiGLU experts (softmax over the router's logits, the k best, renormalized when
    configured, times `expert_weights_scale`), plus a shared expert when the config has one: behind a sigmoid gate
    (Qwen MoE) or added as it is (DeepSeek, `shared_expert_gated` False).

    Sparse where it pays: when the tokens' picks are fewer than the experts (decode: k of E), each token runs only
    its k chosen experts, whose matrices are gathered per token on the device (a one-hot product that reads the
    picked experts' weights only, quantized ones decoded as they are read; the gathered matrices are written once as
    float32 before the products read them). With as many picks as experts or more (a prompt), gathering a copy of an
    expert per token would cost more than reading every expert once, so every expert runs over the tokens and each
    token selects its experts' results. Either way an unchosen expert's values never reach a token's output (NaN
    weights there stay out). The choice follows the largest token count the shapes allow, not their values.
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        dim, hidden, experts = config.dim, config.hidden_dim, config.n_experts
        self.ffn_norm = RMSNorm(dim, config.norm_eps)
        self.ffn_gate_inp = Projection(dim, experts)
        self.ffn_gate_exps = Experts(experts, dim, hidden)
        self.ffn_up_exps = Experts(experts, dim, hidden)
        self.ffn_down_exps = Experts(experts, hidden, dim)
        if config.shared_expert_dim:
            if config.shared_expert_gated:
                self.ffn_gate_inp_shexp = Projection(dim, 1)
            self.ffn_gate_shexp = Projection(dim, config.shared_expert_dim)
            self.ffn_up_shexp = Projection(dim, config.shared_expert_dim)
            self.ffn_down_shexp = Projection(config.shared_expert_dim, dim)
        self._experts, self._used, self._normalize = experts, config.n_experts_used, config.norm_topk_prob
        self._scale = config.expert_weights_scale
        self._groups, self._groups_used = config.expert_groups, config.expert_groups_used

    def __call__(self, h: Tensor) -> Tensor:
        return self.forward(h)

    def forward(self, h: Tensor) -> Tensor:
        """The routed (and shared) experts' output (B, T, dim) of the residual stream h."""
        x: Tensor = self.ffn_norm(h)
        probs = self.ffn_gate_inp(x).softmax(-1)  # (B, T, E)
        if self._groups > 1:  # DeepSeek-V2's group-limited routing: the experts of the best groups only
            probs = self._in_best_groups(probs)
        top, chosen = probs.topk(self._used, dim=-1)
        if self._normalize:
            top = top / top.sum(-1, keepdim=True)
        if self._scale != 1.0:
            top = top * self._scale
        if max_int(x.shape[0]) * max_int(x.shape[1]) * self._used < self._experts:
            out = self._gathered(x, top, chosen)
        else:
            out = self._per_expert(x, top, chosen)
        if hasattr(self, "ffn_gate_shexp"):
            shared = self.ffn_down_shexp(self.ffn_gate_shexp(x).silu() * self.ffn_up_shexp(x))
            gated_share = hasattr(self, "ffn_gate_inp_shexp")
            out = out + (shared * self.ffn_gate_inp_shexp(x).sigmoid() if gated_share else shared)
        return out

    def _in_best_groups(self, probs: Tensor) -> Tensor:
        """probs (B, T, E) with the experts outside each token's `expert_groups_used` best groups (a group's score:
        its best expert's) set to 0, so that the top-k picks from those groups only."""
        groups, per_group = self._groups, self._experts // self._groups
        grouped = probs.reshape(*probs.shape[:-1], groups, per_group)  # (B, T, G, E / G)
        _, best = grouped.amax(-1).topk(self._groups_used, dim=-1)  # (B, T, used)
        kept = (best.unsqueeze(-1) == Tensor.arange(groups)).any(-2)  # (B, T, G)
        return kept.unsqueeze(-1).where(grouped, 0.0).reshape(probs.shape)

    def _gathered(self, x: Tensor, top: Tensor, chosen: Tensor) -> Tensor:
        """Each token's k experts with their matrices gathered for it (the one-hot product below reads the picked
        matrices only)."""
        hot = (chosen.unsqueeze(-1) == Tensor.arange(self._experts)).where(1.0, 0.0).unsqueeze(-1)  # (B,T,k,E,1)
        rows = x.unsqueeze(2).unsqueeze(2)  # (B, T, 1, 1, dim)
        gate = (rows * self.ffn_gate_exps.picked(hot)).sum(-1)  # (B, T, k, hidden)
        up = (rows * self.ffn_up_exps.picked(hot)).sum(-1)
        down = ((gate.silu() * up).unsqueeze(-2) * self.ffn_down_exps.picked(hot)).sum(-1)  # (B, T, k, dim)
        return (down * top.unsqueeze(-1)).sum(2)

    def _per_expert(self, x: Tensor, top: Tensor, chosen: Tensor) -> Tensor:
        """Every expert over every token, each token keeping the results of its k experts (selected, not multiplied
        by a zero share, so an unchosen expert's values never reach the output)."""
        gates, ups, downs = self.ffn_gate_exps.weight, self.ffn_up_exps.weight, self.ffn_down_exps.weight
        out = x.float() * 0.0
        for expert in range(self._experts):
            picked = chosen == expert  # (B, T, k): at most one true per token
            share = (picked.where(top, 0.0)).sum(-1, keepdim=True)  # (B, T, 1)
            result = linear(linear(x, gates[expert]).silu() * linear(x, ups[expert]), downs[expert])
            out = out + picked.any(-1, keepdim=True).where(result * share, 0.0)
        return out


class Block(WeightModule):
    """One decoder layer: h + attention(h), then + feed-forward (dense or MoE); with `config.post_norm` each
    sublayer's output is normed first (`post_attention_norm`, `post_ffw_norm`: Gemma 2/3, OLMo 2). Layer `layer`
    has the given `attention` (default: an `Attention`; DeepSeek's is kiln.tensor.llm.latent_attention's), and a
    dense feed-forward of
    `dense_hidden_dim` when it is one of the `leading_dense_layers` of a MoE model.

    GGUF names a layer's tensors flat (`blk.N.attn_q.weight`, `blk.N.ffn_up_exps.weight`), so the block lists its
    parts' layers as its own attributes (the same objects: loading a weight into one is loading it into the part)
    and keeps the parts themselves private.
    """

    def __init__(
        self, config: LlamaConfig, max_context: int, layer: int = 0, attention: CachedAttention | None = None
    ) -> None:
        super().__init__()
        self._attention = Attention(config, max_context, layer) if attention is None else attention
        self._feed_forward: FeedForward | MoE
        if config.n_experts and layer >= config.leading_dense_layers:
            self._feed_forward = MoE(config)
        else:
            self._feed_forward = FeedForward(config, config.dense_hidden_dim if config.n_experts else None)
        for part in (self._attention, self._feed_forward):
            for key, module in vars(part).items():
                if isinstance(module, Module) and not key.startswith("_"):
                    setattr(self, key, module)
        if config.post_norm:
            self.post_attention_norm = RMSNorm(config.dim, config.norm_eps)
            self.post_ffw_norm = RMSNorm(config.dim, config.norm_eps)

    @property
    def attention(self) -> CachedAttention:
        """The self-attention part (its layers are also this block's attributes)."""
        return self._attention

    @property
    def feed_forward(self) -> FeedForward | MoE:
        """The feed-forward part, dense or MoE (its layers are also this block's attributes)."""
        return self._feed_forward

    def __call__(self, h: Tensor, where: Positions) -> Tensor:
        return self.forward(h, where)

    def forward(self, h: Tensor, where: Positions) -> Tensor:
        """The residual stream (B, T, dim) after this layer."""
        attended: Tensor = self._attention(h, where)
        if hasattr(self, "post_attention_norm"):
            attended = self.post_attention_norm(attended)
        h = h + attended
        fed: Tensor = self._feed_forward(h)
        if hasattr(self, "post_ffw_norm"):
            fed = self.post_ffw_norm(fed)
        return h + fed
