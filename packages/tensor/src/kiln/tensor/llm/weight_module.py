"""`WeightModule`: a `kiln.tensor.nn` Module whose weights may be `QuantizedWeight`s, named by the walk
`named_weights` (public attributes, submodules, lists of submodules by index), so that `state_dict()` lists them
under the GGUF tensor names (`blk.0.attn_q.weight`) and `load_state_dict` puts the given objects in place (torch's
`assign=True`): a half-precision or quantized weight stays encoded. The llama family's layers
(kiln.tensor.llm.layers) are WeightModules."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kiln.tensor.llm.quantized import QuantizedWeight, Weight
from kiln.tensor.nn import Module
from kiln.tensor.state.state_dict import IncompatibleKeys
from kiln.tensor.tensor import Tensor

__all__ = ["WeightModule", "named_weights"]


def named_weights(module: Module, prefix: str = "") -> Iterator[tuple[str, Module, str, Weight]]:
    """(dotted name, holding module, attribute, weight) for every Tensor or QuantizedWeight below `module`: public
    attributes, submodules, and lists of submodules named by index (`blk.3.attn_q.weight`)."""
    for key, value in vars(module).items():
        if key.startswith("_"):
            continue
        name = prefix + key
        if isinstance(value, (Tensor, QuantizedWeight)):
            yield name, module, key, value
        elif isinstance(value, Module):
            yield from named_weights(value, name + ".")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, Module):
                    yield from named_weights(item, f"{name}.{index}.")


class WeightModule(Module):
    """A Module whose weights may be `QuantizedWeight`s: its state dict holds them as leaves under their names."""

    accepts_quantized = False
    """Whether this module's own weights may be QuantizedWeights (a norm's vector must be a float Tensor)."""

    def state_dict(self, prefix: str = "") -> dict[str, Weight]:  # type: ignore[override]  # quantized leaves too
        """Name -> weight (Tensor or QuantizedWeight) for every weight of this module and its submodules."""
        return {name: weight for name, _holder, _key, weight in named_weights(self, prefix)}

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = True
    ) -> IncompatibleKeys:
        """Puts the weights of `state_dict` in place of this module's (the objects themselves, like torch's
        `load_state_dict(..., assign=True)`: an encoded weight stays encoded and nothing is copied; `assign` is
        accepted for the base class's signature and always holds).

        Returns:
            (missing_keys, unexpected_keys).

        Raises:
            RuntimeError: naming every missing or unexpected weight (strict), every weight of another shape than
                the module's, and every value that is neither a Tensor nor a QuantizedWeight, at once.
        """
        targets = {name: (holder, key, weight) for name, holder, key, weight in named_weights(self)}
        missing = [name for name in targets if name not in state_dict]
        unexpected = [name for name in state_dict if name not in targets]
        errors: list[str] = []
        if strict and missing:
            errors.append(f"the model lacks weights {_listed(missing)}")
        if strict and unexpected:
            errors.append(f"unexpected weights {_listed(unexpected)} (this model has no such layer)")
        loads: list[tuple[Module, str, Weight]] = []
        for name, (holder, key, current) in targets.items():
            if name not in state_dict:
                continue
            value = state_dict[name]
            quantizable = isinstance(holder, WeightModule) and holder.accepts_quantized
            if not isinstance(value, Tensor) and not (isinstance(value, QuantizedWeight) and quantizable):
                expected = "a Tensor or a QuantizedWeight" if quantizable else "a float Tensor"
                errors.append(f"weight {name} must be {expected}, got {type(value).__name__}")
            elif tuple(value.shape) != tuple(current.shape):
                errors.append(f"weight {name} has shape {tuple(value.shape)}, the model expects {tuple(current.shape)}")
            else:
                loads.append((holder, key, value))
        if errors:
            raise RuntimeError(f"Error(s) in loading the weights of {type(self).__name__}: " + "; ".join(errors))
        for holder, key, value in loads:
            setattr(holder, key, value)
        return IncompatibleKeys(missing, unexpected)

    def parameter_bytes(self) -> int:
        """The bytes the weights hold (quantized ones at their encoded size)."""
        total = 0
        for weight in self.state_dict().values():
            total += weight.nbytes if isinstance(weight, QuantizedWeight) else weight.numel() * weight.dtype.itemsize
        return total


def _listed(names: list[str]) -> str:
    return f"{names[:8]}{f' and {len(names) - 8} more' if len(names) > 8 else ''}"
