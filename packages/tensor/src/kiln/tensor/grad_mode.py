"""Gradient recording mode: `no_grad`, `enable_grad`, `set_grad_enabled` (and `inference_mode`, an alias of
`no_grad`), each a context manager and a function decorator, like PyTorch's.

While recording is off (`Tensor.no_grad`, read-only, is True) new tensors record no gradient requirement, so
updates such as an optimizer step do not become part of the next backward pass. Gradients of graphs built before
can still be computed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import ParamSpec, TypeVar

from kiln.tensor.tensor import Tensor

__all__ = ["enable_grad", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled"]

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


def is_grad_enabled() -> bool:
    """Whether new tensors record a gradient requirement (False inside `no_grad`)."""
    return not Tensor._grad_disabled


class _GradMode:
    """Sets gradient recording to `enabled` for a `with` block or a decorated function, then restores it."""

    enabled: bool

    def __init__(self) -> None:
        self._saved: list[bool] = []

    def __enter__(self) -> None:
        self._saved.append(Tensor._grad_disabled)
        Tensor._grad_disabled = not self.enabled

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        Tensor._grad_disabled = self._saved.pop()

    def __call__(self, function: Callable[_Params, _Result]) -> Callable[_Params, _Result]:
        @functools.wraps(function)
        def wrapped(*args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
            with type(self)():
                return function(*args, **kwargs)

        return wrapped


class no_grad(_GradMode):
    """Turns gradient recording off: `with no_grad(): ...` or `@no_grad()` on a function.

    Example:
        >>> w = Tensor([1.0, 2.0], requires_grad=True)
        >>> with no_grad():
        ...     updated = w * 2
        >>> updated.requires_grad is None
        True
    """

    enabled = False


class enable_grad(_GradMode):
    """Turns gradient recording back on inside a `no_grad` region: `with enable_grad(): ...` or `@enable_grad()`."""

    enabled = True


class set_grad_enabled(_GradMode):
    """Sets gradient recording to `mode`: at once when called (`set_grad_enabled(False)`, like PyTorch), and back
    to the previous setting at the end of a `with set_grad_enabled(mode):` block.

    Example:
        >>> with set_grad_enabled(False):
        ...     is_grad_enabled()
        False
    """

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled takes a bool, got {mode!r} of type {type(mode).__name__}")
        super().__init__()
        self.enabled = mode
        self._saved.append(Tensor._grad_disabled)
        Tensor._grad_disabled = not mode

    def __enter__(self) -> None:
        pass  # the setting changed when the object was made

    def __call__(self, function: Callable[_Params, _Result]) -> Callable[_Params, _Result]:
        raise TypeError("set_grad_enabled(mode) is not a decorator; use @no_grad() or @enable_grad()")


inference_mode = no_grad
"""PyTorch's `inference_mode`: here the same as `no_grad` (kiln keeps no version counters to skip)."""
