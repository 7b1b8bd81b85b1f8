"""Text embeddings from a loaded model: its final hidden states (after the last norm), pooled per the model's config.

`read_pooling(loaded)` finds how the model pools, in order: a sentence-transformers layout beside the weights
(`modules.json` listing a `Pooling` module, whose `config.json` picks `pooling_mode_mean_tokens`,
`pooling_mode_lasttoken` or `pooling_mode_cls_token`, and maybe a `Normalize` module), GGUF `<arch>.pooling_type`
(1 mean, 2 cls, 3 last, as llama.cpp writes it; normalized, as llama.cpp does by default), else the decoder
embedding models' convention: the last token's state, L2-normalized.

`Embedder` runs its own copy of the model (the same weight objects, nothing copied, but its own KV cache of one
sequence, so a generation's cache rows are never touched) with a forward hook on the final norm: the hidden states
are read there and the vocabulary projection is never computed (kiln evaluates lazily).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kiln.tensor.llm.weights import LoadedModel
from kiln.tensor.tensor import Tensor

__all__ = ["Embedder", "Pooling", "read_pooling"]

_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_lasttoken": "last", "pooling_mode_cls_token": "first"}
_GGUF_MODES = {1: "mean", 2: "first", 3: "last"}


@dataclass(frozen=True)
class Pooling:
    """How token states become one vector: "mean", "last" or "first" (the CLS position), and whether the vector is
    L2-normalized."""

    mode: str = "last"
    normalize: bool = True
    source: str = "the decoder default (last token, normalized)"

    def __post_init__(self) -> None:
        if self.mode not in ("mean", "last", "first"):
            raise ValueError(f"pooling mode must be 'mean', 'last' or 'first', got {self.mode!r}")

    def pool(self, states: np.ndarray) -> np.ndarray:
        """The vector of `states` (tokens, dim)."""
        if states.ndim != 2 or not states.shape[0]:
            raise ValueError(f"token states must be (tokens, dim) with at least one token, got {states.shape}")
        states = states.astype(np.float64)
        vector = states.mean(0) if self.mode == "mean" else states[-1] if self.mode == "last" else states[0]
        if self.normalize:
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        result: np.ndarray = vector.astype(np.float32)
        return result


def read_pooling(loaded: LoadedModel) -> Pooling:
    """The model's pooling (see the module docstring); ValueError for a sentence-transformers pooling mode that is
    not supported (max, weighted mean, ...)."""
    metadata = loaded.metadata
    if "dir" in metadata:
        found = _sentence_transformers(Path(str(metadata["dir"])))
        if found is not None:
            return found
    for key, value in metadata.items():
        if str(key).endswith(".pooling_type") and int(value) in _GGUF_MODES:
            return Pooling(_GGUF_MODES[int(value)], True, f"GGUF {key}")
    return Pooling()


def _sentence_transformers(folder: Path) -> Pooling | None:
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return None
    modules: list[dict[str, Any]] = json.loads(modules_file.read_text(encoding="utf-8"))
    kinds = {str(module.get("type", "")).rsplit(".", 1)[-1]: module for module in modules}
    if "Pooling" not in kinds:
        return None
    config_file = folder / str(kinds["Pooling"].get("path", "")) / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    chosen = [mode for key, mode in _MODES.items() if config.get(key)]
    others = [key for key, value in config.items() if key.startswith("pooling_mode_") and value and key not in _MODES]
    if others or len(chosen) != 1:
        raise ValueError(f"{config_file}: pooling {others or chosen} is not supported (one of {sorted(_MODES)})")
    return Pooling(chosen[0], "Normalize" in kinds, f"sentence-transformers {config_file.parent.name}")


class Embedder:
    """Embeddings of token id lists from `loaded`'s final hidden states, pooled by `pooling` (default: the model's,
    `read_pooling`)."""

    def __init__(self, loaded: LoadedModel, pooling: Pooling | None = None) -> None:
        self.loaded = loaded
        self.pooling = read_pooling(loaded) if pooling is None else pooling
        model = loaded.model
        self.model = type(model)(loaded.config, model.weights, max_context=model.max_context)
        self._states: list[Tensor] = []
        self.model.output_norm.register_forward_hook(lambda module, args, output: self._states.append(output))

    @property
    def context_length(self) -> int:
        return int(self.model.max_context)

    def hidden_states(self, ids: list[int]) -> np.ndarray:
        """The final hidden states (tokens, dim) float32 of `ids` (after the model's last norm).

        Raises:
            ValueError: no ids, more than the context, or an id outside the vocabulary.
        """
        vocab = self.loaded.config.vocab_size
        if not ids or len(ids) > self.context_length:
            raise ValueError(f"an input must have 1 to {self.context_length} tokens, got {len(ids)}")
        if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab for i in ids):
            raise ValueError(f"token ids must be integers in [0, {vocab}), got {ids!r:.80}")
        self._states.clear()
        self.model(Tensor(np.array([ids], np.int32)), 0)  # the logits are never realized
        states = self._states.pop().numpy()[0]
        return np.asarray(states, np.float32)

    def embed(self, ids: list[int]) -> np.ndarray:
        """The pooled (and maybe normalized) vector (dim,) float32 of `ids`."""
        return self.pooling.pool(self.hidden_states(ids))
