"""`LlamaConfig`: the hyperparameters of a llama-family transformer, read from GGUF metadata or a HF config.json."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.tensor.llm.families import gguf_overrides, hf_overrides

__all__ = ["LlamaConfig"]


@dataclass
class LlamaConfig:
    """One configurable llama-family decoder (Llama 2/3, Mistral/Mixtral, Qwen2/3, Qwen MoE, Phi-3, OLMo 2,
    Gemma 2/3, DeepSeek-V2; kiln.tensor.llm.families reads what sets the later ones apart)."""

    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden_dim: int
    head_dim: int
    context_length: int = 2048
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    rope_interleaved: bool = False  # GGUF llama layout: rotate pairs (2i, 2i+1) instead of (i, i + d/2)
    tie_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    n_experts: int = 0
    n_experts_used: int = 0
    shared_expert_dim: int = 0  # the hidden size of a MoE layer's shared expert (Qwen MoE), 0: none
    norm_topk_prob: bool = True
    expert_weights_scale: float = 1.0  # DeepSeek: the routed experts' shares times this
    expert_groups: int = 0  # DeepSeek-V2 group-limited routing: the experts in this many groups (0: no groups)
    expert_groups_used: int = 0  # ... of which each token picks from the best this many (by their best expert)
    shared_expert_gated: bool = True  # Qwen MoE: a sigmoid gate on the shared expert; DeepSeek: none
    leading_dense_layers: int = 0  # DeepSeek: the first layers have a dense feed-forward of dense_hidden_dim
    dense_hidden_dim: int = 0
    pre_norm: bool = True  # False (OLMo 2): no norm before the attention / feed-forward, only after (post_norm)
    post_norm: bool = False  # Gemma 2/3, OLMo 2: each sublayer's output is normed before the residual add
    qk_norm_full: bool = False  # OLMo 2: the q / k norms span the whole projection, not one head
    activation: str = "silu"  # the gate's activation: silu (SwiGLU) or gelu_tanh (GeGLU, Gemma)
    embedding_scale: float = 1.0  # Gemma: the embeddings times sqrt(dim)
    attention_scale: float | None = None  # the scores' scale; None: 1 / sqrt(head_dim)
    attn_softcap: float = 0.0  # Gemma 2: scores -> cap * tanh(scores / cap) before the mask (0: none)
    final_softcap: float = 0.0  # Gemma 2: logits -> cap * tanh(logits / cap) (0: none)
    sliding_window: int = 0  # a query sees the last `sliding_window` positions only (0: every earlier one)
    sliding_layers: tuple[bool, ...] = ()  # which layers have the window (empty with a window: all of them)
    rope_local_theta: float = 0.0  # Gemma 3: the rope base of the sliding layers (0: the global rotary)
    q_lora_rank: int = 0  # DeepSeek MLA: the compressed query's rank (0: a plain query projection)
    kv_lora_rank: int = 0  # DeepSeek MLA: the compressed key / value latent's rank (0: no MLA)
    qk_rope_head_dim: int = 0  # DeepSeek MLA: the rotated share of a query / key head (head_dim is this)
    qk_nope_head_dim: int = 0  # DeepSeek MLA: the unrotated share of a query / key head
    v_head_dim: int = 0  # DeepSeek MLA: a value head's size
    kv_b_split: bool = False  # DeepSeek MLA in GGUF since 2025: kv_b as per-head attn_k_b and attn_v_b (absorbed)
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    architecture: str = "llama"

    @property
    def max_seq_len(self) -> int:
        return self.context_length

    def is_sliding(self, layer: int) -> bool:
        """Whether layer `layer` attends over the sliding window only."""
        if not self.sliding_window:
            return False
        return self.sliding_layers[layer] if self.sliding_layers else True

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> LlamaConfig:
        """The config of a Hugging Face `config.json` (LlamaForCausalLM, Qwen2/3, Mistral, Mixtral, Qwen MoE)."""
        try:
            dim, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
            model_type = str(hf.get("model_type", "llama"))
            rope = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
            parameters = hf.get("rope_parameters") or {}
            theta = float(rope.pop("rope_theta", hf.get("rope_theta", parameters.get("rope_theta", 10000.0))))
            if rope.get("rope_type", rope.get("type")) in (None, "default"):
                rope = {}
            experts = int(hf.get("num_local_experts", hf.get("num_experts", 0)) or 0)
            eos_value: Any = hf.get("eos_token_id")
            eos = eos_value[0] if isinstance(eos_value, list) and eos_value else eos_value
            fields: dict[str, Any] = dict(
                vocab_size=int(hf["vocab_size"]),
                dim=dim,
                n_layers=int(hf["num_hidden_layers"]),
                n_heads=heads,
                n_kv_heads=int(hf.get("num_key_value_heads") or heads),
                hidden_dim=int(hf.get("moe_intermediate_size") or hf["intermediate_size"])
                if experts
                else int(hf["intermediate_size"]),
                head_dim=int(hf.get("head_dim") or dim // heads),
                context_length=int(hf.get("max_position_embeddings", 2048)),
                norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
                rope_theta=theta,
                rope_scaling=rope,
                tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
                attention_bias=bool(hf.get("attention_bias", model_type in ("qwen2", "qwen2_moe"))),
                qk_norm=model_type in ("qwen3", "qwen3_moe"),
                n_experts=experts,
                n_experts_used=int(hf.get("num_experts_per_tok", 0) or 0),
                shared_expert_dim=int(hf.get("shared_expert_intermediate_size", 0) or 0) if experts else 0,
                norm_topk_prob=bool(hf.get("norm_topk_prob", model_type == "mixtral")),
                bos_token_id=hf.get("bos_token_id"),
                eos_token_id=None if eos is None else int(eos),
                architecture=model_type,
            )
            return cls(**(fields | hf_overrides(hf, model_type)))
        except KeyError as error:
            raise ValueError(f"config.json lacks {error.args[0]!r}, which a llama-family model needs") from None

    @classmethod
    def from_gguf_metadata(cls, meta: dict[str, Any]) -> LlamaConfig:
        """The config of a GGUF file's metadata (`general.architecture` llama, qwen2, qwen3, qwen2moe, qwen3moe...)."""
        arch = meta.get("general.architecture")
        if not isinstance(arch, str):
            raise ValueError("GGUF metadata has no general.architecture")

        def get(key: str, default: Any = None) -> Any:
            value = meta.get(f"{arch}.{key}", default)
            if value is None:
                raise ValueError(f"GGUF metadata lacks {arch}.{key}, which a {arch} model needs")
            return value

        dim, heads = int(get("embedding_length")), int(get("attention.head_count"))
        tokens = meta.get("tokenizer.ggml.tokens")
        vocab = meta.get(f"{arch}.vocab_size", len(tokens) if isinstance(tokens, list) else None)
        if vocab is None:
            raise ValueError(f"GGUF metadata has neither {arch}.vocab_size nor tokenizer.ggml.tokens")
        rope: dict[str, Any] = {}
        kind = meta.get(f"{arch}.rope.scaling.type")
        if kind in ("linear", "yarn"):
            rope = {"rope_type": kind, "factor": float(get("rope.scaling.factor"))}
            original = meta.get(f"{arch}.rope.scaling.original_context_length")
            if original is not None:
                rope["original_max_position_embeddings"] = int(original)
        experts = int(meta.get(f"{arch}.expert_count", 0) or 0)
        ff = meta.get(f"{arch}.expert_feed_forward_length") if experts else None
        fields: dict[str, Any] = dict(
            vocab_size=int(vocab),
            dim=dim,
            n_layers=int(get("block_count")),
            n_heads=heads,
            n_kv_heads=int(meta.get(f"{arch}.attention.head_count_kv", heads)),
            hidden_dim=int(ff if ff is not None else get("feed_forward_length")),
            head_dim=int(meta.get(f"{arch}.attention.key_length", dim // heads)),
            context_length=int(get("context_length", 2048)),
            norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_theta=float(get("rope.freq_base", 10000.0)),
            rope_scaling=rope,
            rope_interleaved=arch == "llama",
            attention_bias=arch in ("qwen2", "qwen2moe"),
            qk_norm=arch in ("qwen3", "qwen3moe"),
            n_experts=experts,
            n_experts_used=int(meta.get(f"{arch}.expert_used_count", 0) or 0),
            shared_expert_dim=int(meta.get(f"{arch}.expert_shared_feed_forward_length", 0) or 0) if experts else 0,
            norm_topk_prob=arch != "qwen2moe",
            bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
            eos_token_id=meta.get("tokenizer.ggml.eos_token_id"),
            architecture=arch,
        )
        return cls(**(fields | gguf_overrides(meta, arch)))

    def inv_freq(self, context: int | None = None) -> tuple[np.ndarray, float]:
        """The rotary inverse frequencies (head_dim / 2 of them, float64) and the attention (cos/sin) scale.
        `context`: the positions the model runs over (its KV cache), which picks LongRoPE's factors (Phi-3): the
        long ones past the original context, like llama.cpp (transformers picks per call, by the sequence's length:
        the same choice for every sequence within the original context, and for a cache past it, every sequence
        reaching past it)."""
        half = np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim
        base = 1.0 / self.rope_theta**half
        kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
        factor = float(self.rope_scaling.get("factor", 1.0))
        if kind is None:
            return base, 1.0
        if kind == "factors":  # GGUF rope_freqs: a divisor per frequency
            return base / np.asarray(self.rope_scaling["factors"], np.float64), 1.0
        if kind == "linear":
            return base / factor, 1.0
        original = float(self.rope_scaling.get("original_max_position_embeddings", self.context_length))
        if kind == "longrope":
            long = context is not None and context > original
            factors = np.asarray(self.rope_scaling["long_factor" if long else "short_factor"], np.float64)
            attention = self.rope_scaling.get("attention_factor")
            if attention is None:
                stretch = float(self.rope_scaling.get("factor") or self.context_length / original)
                attention = 1.0 if stretch <= 1 else math.sqrt(1 + math.log(stretch) / math.log(original))
            return base / factors, float(attention)
        if kind == "llama3":
            low, high = float(self.rope_scaling["low_freq_factor"]), float(self.rope_scaling["high_freq_factor"])
            wavelength = 2 * math.pi / base
            smooth = np.clip((original / wavelength - low) / (high - low), 0.0, 1.0)
            return (1 - smooth) * base / factor + smooth * base, 1.0
        if kind == "yarn":
            fast, slow = float(self.rope_scaling.get("beta_fast", 32)), float(self.rope_scaling.get("beta_slow", 1))

            def dim_of(rotations: float) -> float:
                return self.head_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(self.rope_theta))

            low_dim = max(math.floor(dim_of(fast)), 0)
            high_dim = min(math.ceil(dim_of(slow)), self.head_dim - 1)
            span = (high_dim - low_dim) or 0.001
            ramp = np.clip((np.arange(self.head_dim // 2) - low_dim) / span, 0.0, 1.0)
            keep = 1 - ramp  # share of the unscaled (extrapolated) frequency
            scale = float(self.rope_scaling.get("attention_factor") or 0.1 * math.log(factor) + 1.0)
            return base / factor * (1 - keep) + base * keep, scale
        raise NotImplementedError(
            f"rope scaling type {kind!r} is not supported; kiln has linear, llama3, yarn and longrope"
        )
