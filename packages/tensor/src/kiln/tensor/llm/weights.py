"""`load_model`: a llama-family model from a GGUF file or Hugging Face safetensors (sharded, with the index).

Both formats are read into memory kiln owns (kiln.tensor.state's copy-on-load: nothing done to the file afterwards
reaches the model). GGUF tensors keep their encoding: F32 / F16 / BF16 as their bytes behind a lazy decode,
block-quantized ones (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, ...) as `QuantizedWeight`s decoded inside the matmul kernels.
Safetensors names are mapped to the GGUF names the model uses; per-expert matrices are stacked. The model is built
from its config (kiln.tensor.llm.model, .layers) and takes the weights through `load_state_dict`, which names a
missing, unexpected or wrongly shaped weight.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.families import adapt_weights, hf_layer_names
from kiln.tensor.llm.model import Transformer
from kiln.tensor.llm.quantized import QuantizedWeight, Weight
from kiln.tensor.state.gguf import gguf_load_raw
from kiln.tensor.state.quantization import GGMLType, dequantize
from kiln.tensor.state.safetensors import safe_load
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["LoadedModel", "load_model"]

_PLAIN = {GGMLType.F32, GGMLType.F16, GGMLType.BF16}

# Hugging Face per-layer names -> GGUF names
_HF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
_EXPERT = re.compile(r"(?:block_sparse_moe|mlp)\.experts\.(\d+)\.(w1|w2|w3|gate_proj|up_proj|down_proj)\.weight")
_EXPERT_KIND = {"w1": "gate", "gate_proj": "gate", "w3": "up", "up_proj": "up", "w2": "down", "down_proj": "down"}


@dataclass
class LoadedModel:
    """A loaded model: its config, the Transformer, the raw metadata and a display name."""

    config: LlamaConfig
    model: Transformer
    metadata: dict[str, Any]
    name: str


def load_model(path: str | os.PathLike[str], *, max_context: int | None = None) -> LoadedModel:
    """Loads a .gguf file, a folder with config.json and *.safetensors, or a .safetensors with config.json beside.

    `max_context` sizes the KV cache in positions (None: min(the trained context, 4096)); a prompt plus its
    generation cannot run past it.

    Raises:
        FileNotFoundError: the path (or its config.json / a shard the index names) does not exist.
        ValueError: a corrupt or unsupported file, naming it, or a max_context outside [1, trained context].
    """
    where = Path(path)
    if not where.exists():
        raise FileNotFoundError(f"model path {str(where)!r} does not exist")
    if where.is_file() and where.suffix == ".gguf":
        return _load_gguf(where, max_context)
    if where.is_dir() or where.suffix == ".safetensors":
        return _load_safetensors(where, max_context)
    raise ValueError(f"{where}: expected a .gguf file, a .safetensors file or a folder holding config.json")


def _load_gguf(path: Path, max_context: int | None) -> LoadedModel:
    metadata, raw = gguf_load_raw(path)
    config = LlamaConfig.from_gguf_metadata(metadata)
    weights: dict[str, Weight] = {}
    for name, (data, kind, shape) in raw.items():
        if len(shape) == 1:  # norms, biases: small, decoded once
            weights[name] = dequantize(data, kind, shape).realize()
        elif kind in _PLAIN:  # a lazy decode of the mapped bytes, fused into each kernel that reads the matrix
            weights[name] = dequantize(data, kind, shape)
        else:
            weights[name] = QuantizedWeight(data, kind, shape)
    if "rope_freqs.weight" in weights:  # Llama 3 scaling as per-frequency divisors
        factors = weights.pop("rope_freqs.weight")
        assert isinstance(factors, Tensor)
        config.rope_scaling = {"rope_type": "factors", "factors": factors.numpy().astype("float64").tolist()}
    if "rope_factors_long.weight" in weights:  # Phi-3's LongRoPE: per-frequency divisors for long and short contexts
        config.rope_scaling = _longrope(metadata, weights)
    config.tie_embeddings = "output.weight" not in weights  # llama.cpp leaves a tied head out of the file
    if config.kv_lora_rank and any(name.endswith(".attn_k_b.weight") for name in weights):
        config.kv_b_split = True  # llama.cpp's absorbed-MLA layout (a file may keep attn_kv_b as well: unused)
        for name in [n for n in weights if n.endswith(".attn_kv_b.weight")]:
            del weights[name]
    adapt_weights(weights, config.architecture, from_hf=False, sizes=_fused_sizes(config))
    model = _build(config, weights, max_context, path)
    name = metadata.get("general.name") or path.stem
    return LoadedModel(config, model, metadata, str(name))


def _longrope(metadata: dict[str, Any], weights: dict[str, Weight]) -> dict[str, Any]:
    """Phi-3's LongRoPE scaling from its GGUF tensors rope_factors_long / _short (taken out of the weights) and keys."""
    arch = metadata["general.architecture"]
    factors = {}
    for kind in ("long", "short"):
        tensor = weights.pop(f"rope_factors_{kind}.weight", None)
        if not isinstance(tensor, Tensor):
            raise ValueError(f"GGUF {arch} model: rope_factors_{kind}.weight is missing or not a float tensor")
        factors[f"{kind}_factor"] = tensor.numpy().astype("float64").tolist()
    original = metadata.get(f"{arch}.rope.scaling.original_context_length")
    if original is None:
        raise ValueError(f"GGUF metadata lacks {arch}.rope.scaling.original_context_length, which LongRoPE needs")
    attention = metadata.get(f"{arch}.rope.scaling.attn_factor")
    return {
        "rope_type": "longrope",
        **factors,
        "original_max_position_embeddings": int(original),
        "attention_factor": None if attention is None else float(attention),
    }


def _load_safetensors(path: Path, max_context: int | None) -> LoadedModel:
    folder = path if path.is_dir() else path.parent
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found: a safetensors model needs its config.json beside it")
    try:
        hf_config = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{config_path}: not valid JSON: {error}") from None
    config = LlamaConfig.from_hf_config(hf_config)
    if path.is_file():
        files = [path]
    elif (folder / "model.safetensors.index.json").is_file():
        index_path = folder / "model.safetensors.index.json"
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as error:
            raise ValueError(f"{index_path}: not a safetensors index ({error})") from None
        files = [folder / name for name in sorted(set(weight_map.values()))]
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors files")
    tensors: dict[str, Tensor] = {}
    for file in files:
        if not file.is_file():
            raise FileNotFoundError(f"{file} not found (named by the safetensors index)")
        try:
            tensors |= safe_load(file)
        except ValueError as error:
            raise ValueError(f"{file}: {error}") from None
    weights = _gguf_names(tensors, config.architecture)
    adapt_weights(weights, config.architecture, from_hf=True, sizes=_fused_sizes(config))
    if config.tie_embeddings:  # some checkpoints store the tied head anyway: it is the embedding table
        weights.pop("output.weight", None)
    model = _build(config, weights, max_context, folder)
    return LoadedModel(config, model, {"hf_config": hf_config, "dir": str(folder)}, folder.name)


def _build(config: LlamaConfig, weights: dict[str, Weight], max_context: int | None, where: Path) -> Transformer:
    """The model of `config`, loaded with `weights` (GGUF names) through `load_state_dict`."""
    for name, weight in list(weights.items()):
        if not isinstance(weight, Tensor):
            continue
        if name.endswith("ffn_gate_inp_shexp.weight") and weight.shape == (config.dim,):
            weights[name] = weight.reshape(1, config.dim)  # the shared expert's 1-row gate, stored as a vector
        elif weight.ndim == 1 and weight.dtype != dtypes.float32:
            weights[name] = weight.float().realize()  # norms and biases: small, computed in float32
    model = Transformer(config, max_context=max_context)
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        raise ValueError(f"{where}: {error}") from None
    return model


def _fused_sizes(config: LlamaConfig) -> tuple[int, int, int, int]:
    """The rows of q, k, v in a fused q/k/v matrix and the feed-forward's hidden size (Phi-3's fused matrices)."""
    kv_rows = config.n_kv_heads * config.head_dim
    return config.n_heads * config.head_dim, kv_rows, kv_rows, config.hidden_dim


def _gguf_names(tensors: dict[str, Tensor], architecture: str) -> dict[str, Weight]:
    out: dict[str, Weight] = {}
    layer_names = _HF_LAYER | hf_layer_names(architecture)  # the family's own names where they differ
    experts: dict[tuple[int, str], dict[int, Tensor]] = {}
    for name, tensor in tensors.items():
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = tensor
        elif name == "model.norm.weight":
            out["output_norm.weight"] = tensor
        elif name == "lm_head.weight":
            out["output.weight"] = tensor
        elif name.startswith("model.layers."):
            layer, rest = name[len("model.layers.") :].split(".", 1)
            found = _EXPERT.fullmatch(rest)
            if found:
                experts.setdefault((int(layer), _EXPERT_KIND[found[2]]), {})[int(found[1])] = tensor
                continue
            for hf, short in layer_names.items():
                if rest == hf or rest.startswith(hf + "."):
                    out[f"blk.{layer}.{short}{rest[len(hf) :]}"] = tensor
                    break
    for (layer_index, kind), by_index in experts.items():
        stacked = Tensor.stack(*[by_index[e] for e in sorted(by_index)]).realize()
        out[f"blk.{layer_index}.ffn_{kind}_exps.weight"] = stacked
    return out
