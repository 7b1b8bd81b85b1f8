"""`TensorOptions`, the keyword arguments (dtype, device, requires_grad) of every function that makes a tensor, and
`torch_keywords`, which shows them in a function's signature as PyTorch's keyword-only parameters."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypedDict, TypeVar, cast

from kiln.uops import DType

__all__ = ["TensorOptions", "torch_keywords"]


class TensorOptions(TypedDict, total=False):
    """The keyword arguments of every function that makes a tensor, PyTorch's: the dtype (None or absent: the
    function's default), the device (the default device) and whether the result requires a gradient."""

    dtype: DType | None
    device: str | tuple[str, ...] | None
    requires_grad: bool | None


FunctionT = TypeVar("FunctionT", bound=Callable[..., Any])


def torch_keywords(function: FunctionT) -> FunctionT:
    """`function`, whose `**options: Unpack[TensorOptions]` take PyTorch's keyword-only `dtype=None, device=None,
    requires_grad=None`: `inspect.signature` (and `help`) shows them, and any other keyword is a TypeError, as for a
    named parameter (mypy reads the TypedDict itself)."""
    signature = inspect.signature(function)
    parameters = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    for name, annotation in TensorOptions.__annotations__.items():
        spelled = getattr(annotation, "__forward_arg__", annotation)  # the text, as the other parameters show theirs
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=spelled))
    accepted = frozenset(parameter.name for parameter in parameters)

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name in kwargs:
            if name not in accepted:
                raise TypeError(f"{function.__name__}() got an unexpected keyword argument {name!r}")
        return function(*args, **kwargs)

    checked.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return cast(FunctionT, checked)
