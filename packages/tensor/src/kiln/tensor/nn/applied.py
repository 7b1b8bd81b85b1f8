"""`AppliedFunction`: the base of the layers that apply one function of `kiln.tensor.nn.functional` to their input
with the arguments they were built with (activations, shuffles, folds), like the torch.nn modules of those names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["AppliedFunction"]


class AppliedFunction(Module):
    """A layer whose forward is `function(x, *arguments)`: subclasses name, as class keywords, `function` (the
    functional form) and `arguments` (the names of the attributes passed after the input, in order), and store
    those attributes in their typed `__init__`; a subclass that adds neither can give `doc`, its formula, for the
    docstring "<doc>, like `torch.nn.<name>`.". `extra_repr` shows the arguments as name=value, `inplace` only when
    it is set (as torch's reprs do)."""

    _function: ClassVar[Callable[..., Tensor]]
    _arguments: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(
        cls, function: Callable[..., Tensor] | None = None, arguments: tuple[str, ...] | None = None, doc: str = "",
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init_subclass__(**kwargs)
        if function is not None:
            cls._function = function  # read through the class (`type(self)._function`): never bound to the layer
        if arguments is not None:
            cls._arguments = arguments
        if doc:
            cls.__doc__ = f"{doc}, like `torch.nn.{cls.__name__}`."

    def forward(self, x: Tensor) -> Tensor:
        """`_function` of x and the layer's arguments."""
        return type(self)._function(x, *(getattr(self, name) for name in self._arguments))

    def extra_repr(self) -> str:
        shown = [f"{name}={getattr(self, name)}" for name in self._arguments if name != "inplace"]
        if getattr(self, "inplace", False):
            shown.append("inplace=True")
        return ", ".join(shown)
