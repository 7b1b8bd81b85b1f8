"""What sets the families beyond llama / qwen apart, read from a Hugging Face config.json or GGUF metadata: Phi-3,
OLMo 2, Gemma 2, Gemma 3, Mistral's sliding window and DeepSeek-V2 (multi-head latent attention and its MoE).

`hf_overrides` / `gguf_overrides` give the `LlamaConfig` fields that differ from what the shared reading finds;
`hf_layer_names` is a family's safetensors layer names -> GGUF names; `adapt_weights` puts a file's weights in the
layout the model takes (Phi-3's fused q/k/v and gate/up matrices split by rows, Gemma's zero-centred norms as
1 + weight, which is how llama.cpp's converter stores them).
"""

from __future__ import annotations

import math
from typing import Any

from kiln.tensor.llm.quantized import QuantizedWeight, Weight
from kiln.tensor.tensor import Tensor

__all__ = ["adapt_weights", "gguf_overrides", "hf_layer_names", "hf_overrides", "split_rows"]

GEMMA_HF = ("gemma2", "gemma3_text")
GEMMA_GGUF = ("gemma2", "gemma3")


def hf_overrides(hf: dict[str, Any], model_type: str) -> dict[str, Any]:
    """The config fields of `model_type` that the shared reading of config.json does not find."""
    dim, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
    if model_type == "olmo2":
        return {"pre_norm": False, "post_norm": True, "qk_norm": True, "qk_norm_full": True}
    if model_type in ("mistral", "mixtral"):
        return {"sliding_window": int(hf.get("sliding_window") or 0)}
    if model_type == "phi3":
        rope = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
        partial = float(rope.pop("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)))
        if partial != 1.0:
            raise NotImplementedError(f"phi3 with partial_rotary_factor {partial} is not supported (only 1.0)")
        rope.pop("rope_theta", None)
        if rope.get("rope_type", rope.get("type")) not in ("longrope", "su"):
            return {}
        original = rope.get("original_max_position_embeddings", hf.get("original_max_position_embeddings"))
        if original is None:
            raise ValueError("config.json lacks 'original_max_position_embeddings', which LongRoPE needs")
        return {"rope_scaling": rope | {"rope_type": "longrope", "original_max_position_embeddings": int(original)}}
    if model_type in GEMMA_HF:
        head_dim = int(hf.get("head_dim") or dim // heads)
        layers = int(hf["num_hidden_layers"])
        pattern = int(hf.get("sliding_window_pattern") or (2 if model_type == "gemma2" else 6))
        kinds = hf.get("layer_types") or [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)
        ]
        out: dict[str, Any] = {
            "post_norm": True,
            "activation": _activation(hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"),
            "embedding_scale": math.sqrt(dim),
            "attention_scale": float(hf.get("query_pre_attn_scalar") or head_dim) ** -0.5,
            "attn_softcap": float(hf.get("attn_logit_softcapping") or 0.0),
            "final_softcap": float(hf.get("final_logit_softcapping") or 0.0),
            "sliding_window": int(hf.get("sliding_window") or 0),
            "sliding_layers": tuple(kind == "sliding_attention" for kind in kinds),
            "tie_embeddings": bool(hf.get("tie_word_embeddings", True)),
        }
        if model_type == "gemma3_text":
            out["qk_norm"] = True
            rope = hf.get("rope_parameters") or {}
            full = dict(rope.get("full_attention") or {})
            local = rope.get("sliding_attention") or {}
            out["rope_theta"] = float(full.pop("rope_theta", hf.get("rope_theta", 1_000_000.0)))
            out["rope_local_theta"] = float(local.get("rope_theta", hf.get("rope_local_base_freq", 10_000.0)))
            scaling = full or dict(hf.get("rope_scaling") or {})
            out["rope_scaling"] = {} if scaling.get("rope_type", scaling.get("type")) in (None, "default") else scaling
        return out
    if model_type == "deepseek_v2":
        return _deepseek_hf(hf)
    return {}


def _deepseek_hf(hf: dict[str, Any]) -> dict[str, Any]:
    method = hf.get("topk_method", "greedy")
    if method not in ("greedy", "group_limited_greedy"):
        raise NotImplementedError(f"deepseek_v2 topk_method {method!r} is not supported (greedy, group_limited_greedy)")
    groups = int(hf.get("n_group") or 0) if method == "group_limited_greedy" else 0
    groups_used = int(hf.get("topk_group") or 0) if groups else 0
    experts = int(hf["n_routed_experts"])
    if groups and (experts % groups or not 1 <= groups_used <= groups):
        raise ValueError(
            f"group-limited routing needs n_group dividing the {experts} experts and 1 <= topk_group <= n_group, "
            f"got n_group={groups}, topk_group={groups_used}"
        )
    rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    rope.pop("rope_theta", None)
    kind = rope.get("rope_type", rope.get("type"))
    nope, rotated = int(hf["qk_nope_head_dim"]), int(hf["qk_rope_head_dim"])
    scale = (nope + rotated) ** -0.5
    if kind == "yarn":  # DeepSeek-V2-Lite: YaRN whose mscale_all_dim also scales the scores (of every dim)
        factor = float(rope["factor"])
        mscale, mscale_all = float(rope.get("mscale") or 0), float(rope.get("mscale_all_dim") or 0)
        if rope.get("attention_factor") is None and mscale and mscale_all:
            rope["attention_factor"] = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
        if mscale_all:
            scale *= _yarn_mscale(factor, mscale_all) ** 2
    elif kind not in (None, "default"):
        raise NotImplementedError(f"deepseek_v2 rope scaling {kind!r} is not supported (yarn only)")
    expert_ff = int(hf["moe_intermediate_size"])
    return {
        "rope_scaling": rope if kind == "yarn" else {},
        "n_kv_heads": int(hf["num_attention_heads"]),
        "head_dim": rotated,
        "rope_interleaved": True,  # DeepSeek rotates pairs (2i, 2i+1) (complex multiplication)
        "q_lora_rank": int(hf.get("q_lora_rank") or 0),
        "kv_lora_rank": int(hf["kv_lora_rank"]),
        "qk_rope_head_dim": rotated,
        "qk_nope_head_dim": nope,
        "v_head_dim": int(hf["v_head_dim"]),
        "attention_scale": scale,
        "n_experts": experts,
        "expert_groups": groups,
        "expert_groups_used": groups_used,
        "hidden_dim": expert_ff,
        "dense_hidden_dim": int(hf["intermediate_size"]),
        "leading_dense_layers": int(hf.get("first_k_dense_replace") or 0),
        "shared_expert_dim": int(hf.get("n_shared_experts") or 0) * expert_ff,
        "shared_expert_gated": False,
        "norm_topk_prob": bool(hf.get("norm_topk_prob", False)),
        "expert_weights_scale": float(hf.get("routed_scaling_factor", 1.0)),
    }


def _yarn_mscale(factor: float, mscale: float) -> float:
    """YaRN's magnitude correction 0.1 * mscale * ln(factor) + 1 (1 for a factor of 1 or less)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _activation(name: str) -> str:
    if name in ("gelu_pytorch_tanh", "gelu_tanh"):
        return "gelu_tanh"
    if name == "silu":
        return "silu"
    raise NotImplementedError(f"hidden activation {name!r} is not supported (silu, gelu_pytorch_tanh)")


def gguf_overrides(meta: dict[str, Any], arch: str) -> dict[str, Any]:
    """The config fields of GGUF architecture `arch` that the shared reading of the metadata does not find (llama.cpp's
    keys, and its defaults where a key is optional)."""

    def key(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    dim, heads, layers = int(key("embedding_length")), int(key("attention.head_count")), int(key("block_count"))
    if arch == "olmo2":
        return {"pre_norm": False, "post_norm": True, "qk_norm": True, "qk_norm_full": True}
    if arch == "llama" and key("attention.sliding_window"):
        return {"sliding_window": int(key("attention.sliding_window"))}
    if arch in GEMMA_GGUF:
        head_dim = int(key("attention.key_length", dim // heads))
        big = layers in (46, 62)  # the 27B models scale by dim / heads (llama.cpp), the others by the head size
        default_scale = (dim / heads if big else head_dim) ** -0.5
        pattern = key("attention.sliding_window_pattern", 2 if arch == "gemma2" else 6)
        if isinstance(pattern, list):
            sliding = tuple(bool(p) for p in pattern)
        else:
            sliding = tuple(bool((i + 1) % int(pattern)) for i in range(layers))
        out: dict[str, Any] = {
            "post_norm": True,
            "activation": "gelu_tanh",
            "embedding_scale": math.sqrt(dim),
            "attention_scale": float(key("attention.scale", default_scale)),
            "attn_softcap": float(key("attn_logit_softcapping", 50.0 if arch == "gemma2" else 0.0)),
            "final_softcap": float(key("final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0)),
            "sliding_window": int(key("attention.sliding_window", 4096)),
            "sliding_layers": sliding,
        }
        if arch == "gemma3":
            out["qk_norm"] = True
            out["rope_local_theta"] = float(key("rope.freq_base_swa", 10_000.0))
        return out
    if arch == "deepseek2":
        return _deepseek_gguf(meta, arch, heads)
    return {}


def _deepseek_gguf(meta: dict[str, Any], arch: str, heads: int) -> dict[str, Any]:
    def key(name: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise ValueError(f"GGUF metadata lacks {arch}.{name}, which a {arch} model needs")
        return value

    kind = key("rope.scaling.type", "none")
    if kind not in ("none", "yarn"):
        raise NotImplementedError(f"deepseek2 rope scaling {kind!r} is not supported (yarn only)")
    if int(key("expert_gating_func", 1)) != 1:
        raise NotImplementedError("deepseek2 with sigmoid expert gating (DeepSeek-V3) is not supported (softmax only)")
    # llama.cpp's converter since 2025 writes the cached widths under key_length / value_length (kv_lora_rank +
    # rope, kv_lora_rank) and a head's under key_length_mla / value_length_mla; older files, a head's under the former
    rotated = int(key("rope.dimension_count"))
    key_length = int(meta.get(f"{arch}.attention.key_length_mla") or key("attention.key_length"))
    value_length = int(meta.get(f"{arch}.attention.value_length_mla") or key("attention.value_length"))
    expert_ff = int(key("expert_feed_forward_length"))
    out: dict[str, Any] = {}
    scale = key_length**-0.5
    if kind == "yarn":  # llama.cpp: the rope keeps its magnitude; the scores scale by (1 + log_mul * ln(factor))^2
        factor = float(key("rope.scaling.factor"))
        out["rope_scaling"] = {
            "rope_type": "yarn",
            "factor": factor,
            "original_max_position_embeddings": int(key("rope.scaling.original_context_length")),
            "attention_factor": 1.0,
        }
        scale *= (1.0 + float(key("rope.scaling.yarn_log_multiplier", 0.0)) * math.log(factor)) ** 2
    return out | {
        "n_kv_heads": heads,
        "head_dim": rotated,
        "rope_interleaved": True,
        "q_lora_rank": int(key("attention.q_lora_rank", 0)),
        "kv_lora_rank": int(key("attention.kv_lora_rank")),
        "qk_rope_head_dim": rotated,
        "qk_nope_head_dim": key_length - rotated,
        "v_head_dim": value_length,
        "attention_scale": scale,
        "dense_hidden_dim": int(key("feed_forward_length")),
        "leading_dense_layers": int(key("leading_dense_block_count", 0)),
        "shared_expert_dim": int(key("expert_shared_count", 0)) * expert_ff,
        "shared_expert_gated": False,
        "norm_topk_prob": bool(key("expert_weights_norm", False)),
        "expert_weights_scale": float(key("expert_weights_scale", 1.0)),
    }


def hf_layer_names(model_type: str) -> dict[str, str]:
    """The safetensors layer names of `model_type` that differ from llama's, -> their GGUF names."""
    if model_type in ("olmo2", *GEMMA_HF):
        return {
            "post_attention_layernorm.weight": "post_attention_norm.weight",
            "pre_feedforward_layernorm.weight": "ffn_norm.weight",
            "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
        }
    if model_type == "phi3":
        return {"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight"}
    if model_type == "deepseek_v2":
        return {
            "self_attn.q_proj.weight": "attn_q.weight",
            "self_attn.q_a_proj.weight": "attn_q_a.weight",
            "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight",
            "self_attn.q_b_proj.weight": "attn_q_b.weight",
            "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
            "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
            "self_attn.kv_b_proj.weight": "attn_kv_b.weight",
            "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
            "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
            "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
        }
    return {}


def adapt_weights(weights: dict[str, Weight], architecture: str, *, from_hf: bool, sizes: tuple[int, ...]) -> None:
    """Puts `weights` (GGUF names) in the model's layout in place: fused matrices split by rows (`sizes`: the
    q, k, v rows then the feed-forward's hidden size), and for Gemma read from safetensors, norms as 1 + weight."""
    q_rows, k_rows, v_rows, hidden = sizes
    for name in [n for n in weights if n.endswith(".attn_qkv.weight")]:
        prefix = name[: -len("attn_qkv.weight")]
        parts = split_rows(weights.pop(name), (q_rows, k_rows, v_rows), name)
        for part, value in zip(("attn_q", "attn_k", "attn_v"), parts, strict=True):
            weights[f"{prefix}{part}.weight"] = value
    if architecture in ("phi3",):
        for name in [n for n in weights if n.endswith(".ffn_up.weight")]:
            prefix = name[: -len("ffn_up.weight")]
            gate, up = split_rows(weights[name], (hidden, hidden), name)
            weights[f"{prefix}ffn_gate.weight"], weights[name] = gate, up
    if from_hf and architecture in GEMMA_HF:
        for name, value in list(weights.items()):
            if name.endswith("norm.weight") and isinstance(value, Tensor):
                weights[name] = (value.float() + 1.0).realize()


def split_rows(weight: Weight, rows: tuple[int, ...], name: str) -> list[Weight]:
    """A (sum(rows), cols) matrix as matrices of `rows` rows each (a quantized one as byte ranges of its blocks)."""
    total = sum(rows)
    if len(weight.shape) != 2 or weight.shape[0] != total:
        raise ValueError(f"weight {name} has shape {tuple(weight.shape)}, expected ({total}, cols): {rows} rows fused")
    out: list[Weight] = []
    start = 0
    for count in rows:
        if isinstance(weight, QuantizedWeight):
            size = weight.raw.numel() // total
            raw = weight.raw[start * size : (start + count) * size]
            out.append(QuantizedWeight(raw, weight.ggml_type, (count, weight.shape[1])))
        else:
            out.append(weight[start : start + count])
        start += count
    return out
