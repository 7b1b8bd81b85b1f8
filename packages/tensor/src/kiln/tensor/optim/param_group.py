"""`ParamGroup`: one parameter group of an optimizer, a dict as in torch.optim (`"params"` and the hyperparameters).

The hyperparameters a schedule changes every step (the learning rate, and the momentum or beta1 that `OneCycleLR`
cycles) are also held in small device buffers that the update kernels read: writing `group["lr"] = x` writes the
buffer, so a new value changes no kernel (nothing recompiles, and a TinyJit replay reads the new value). Each buffer
holds the values and their complements 1 - value, both computed in float64 and rounded once (1 - 0.999 in float32
arithmetic would lose five digits).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from kiln.tensor.realize import engine
from kiln.tensor.tensor import Tensor

__all__ = ["ParamGroup"]


def _numbers(key: str, value: object) -> tuple[float, ...]:
    """`value` (a number or a tuple / list of numbers) as a tuple of floats; TypeError naming `key` otherwise."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise TypeError(f"parameter group value {key!r} must be a number or a tuple of numbers, got {value!r}")
    return tuple(float(item) for item in items)


class ParamGroup(dict[str, Any]):
    """A parameter group: `group["params"]` (the tensors) and the hyperparameters, with the keys named in
    `buffered` mirrored into device buffers (read them with `value` and `complement`)."""

    def __init__(self, values: Mapping[str, Any], device: str | tuple[str, ...], buffered: Iterable[str]) -> None:
        super().__init__(values)
        self.device = device
        self.buffers: dict[str, Tensor] = {}
        for key in buffered:
            if key in self:
                self.buffers[key] = Tensor(self._contents(key, self[key]), device=device)

    @staticmethod
    def _contents(key: str, value: object) -> np.ndarray[Any, Any]:
        numbers = np.array(_numbers(key, value), dtype=np.float64)
        return np.concatenate([numbers, 1.0 - numbers]).astype(np.float32)

    def __setitem__(self, key: str, value: Any) -> None:
        buffer = self.buffers.get(key)
        if buffer is not None:
            if engine.default_engine().recording is not None:
                what = "the learning rate" if key == "lr" else f"the optimizer's {key!r}"
                raise RuntimeError(
                    f"{what} was set inside a function TinyJit is capturing; a replay would not set it. Step the "
                    f"schedule outside the jitted function (replays read the value from its buffer)"
                )
            contents = self._contents(key, value)
            if contents.shape != buffer.shape:
                raise ValueError(f"parameter group value {key!r} must have {buffer.shape[0] // 2} items, got {value!r}")
            buffer.data_buffer().copyin(contents.view(np.uint8))
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """dict.update, through `__setitem__` (so buffered values reach their buffers)."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        """dict.setdefault, through `__setitem__`."""
        if key not in self:
            self[key] = default
        return self[key]

    def value(self, key: str, index: int = 0) -> Tensor:
        """The buffered value `key` (item `index` of a tuple such as betas), a 0-dim float32 tensor on the device."""
        return self.buffers[key][index]

    def complement(self, key: str, index: int = 0) -> Tensor:
        """1 - the buffered value `key` (item `index`), computed in float64 and rounded to float32 once."""
        buffer = self.buffers[key]
        return buffer[buffer.shape[0] // 2 + index]
