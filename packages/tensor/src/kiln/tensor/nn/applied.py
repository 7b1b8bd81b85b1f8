"""`AppliedFunction`: the base of the layers that apply one function of `kiln.tensor.nn.functional` to their input
with the arguments they were built with (activations, shuffles, folds), like the torch.nn modules of those names."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["AppliedFunction"]


class AppliedFunction(Module):
    """A layer whose forward is `_function(x, *arguments)`: subclasses set `_function` (a staticmethod of the
    functional form) and `_arguments` (the names of the attributes passed after the input, in order), and store
    those attributes in their typed `__init__`. `extra_repr` shows the arguments as name=value, `inplace` only when
    it is set (as torch's reprs do)."""

    _function: ClassVar[Callable[..., Tensor]]
    _arguments: ClassVar[tuple[str, ...]] = ()

    def forward(self, x: Tensor) -> Tensor:
        """`_function` of x and the layer's arguments."""
        return type(self)._function(x, *(getattr(self, name) for name in self._arguments))

    def extra_repr(self) -> str:
        shown = [f"{name}={getattr(self, name)}" for name in self._arguments if name != "inplace"]
        if getattr(self, "inplace", False):
            shown.append("inplace=True")
        return ", ".join(shown)
