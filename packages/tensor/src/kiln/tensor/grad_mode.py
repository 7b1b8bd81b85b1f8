"""Gradient recording mode: `no_grad` and `enable_grad`, each a context manager and a function decorator.

While recording is off (`Tensor.no_grad` is True) new tensors record no gradient requirement, so updates such as
an optimizer step do not become part of the next backward pass. Gradients of graphs built before can still be
computed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import ParamSpec, TypeVar

from kiln.tensor.tensor import Tensor

__all__ = ["enable_grad", "is_grad_enabled", "no_grad"]

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


def is_grad_enabled() -> bool:
    """Whether new tensors record a gradient requirement (False inside `no_grad`)."""
    return not Tensor.no_grad


class _GradMode:
    """Sets gradient recording to `enabled` for a `with` block or a decorated function, then restores it."""

    enabled: bool

    def __init__(self) -> None:
        self._saved: list[bool] = []

    def __enter__(self) -> None:
        self._saved.append(Tensor.no_grad)
        Tensor.no_grad = not self.enabled

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        Tensor.no_grad = self._saved.pop()

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
