"""`dimensioned`: torch's 1-d / 2-d / 3-d siblings of a spatial Tensor method (`max_unpool1d`, `max_unpool2d`, ...)
from one implementation `function(x, dims, *arguments)`: each is a method with the implementation's other parameters,
which mypy checks at every call (`Concatenate` and `ParamSpec` keep them) and `inspect.signature` shows."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

__all__ = ["dimensioned"]

P = ParamSpec("P")
SelfT = TypeVar("SelfT")
ResultT = TypeVar("ResultT")


def dimensioned(
    function: Callable[Concatenate[SelfT, int, P], ResultT], dims: int, doc: str
) -> Callable[Concatenate[SelfT, P], ResultT]:
    """The method `function(self, dims, ...)` for `dims` spatial dims, named after `function` (`_max_unpool_nd` ->
    `max_unpool1d`), documented by `doc`."""
    if not function.__name__.endswith("_nd"):
        raise ValueError(f"dimensioned needs a function named '<method>_nd', got {function.__name__!r}")

    def method(self: SelfT, /, *args: P.args, **kwargs: P.kwargs) -> ResultT:
        return function(self, dims, *args, **kwargs)

    signature = inspect.signature(function)
    first, _, *rest = signature.parameters.values()
    method.__signature__ = signature.replace(parameters=[first.replace(name="self"), *rest])  # type: ignore[attr-defined]
    method.__name__ = method.__qualname__ = f"{function.__name__.removeprefix('_').removesuffix('_nd')}{dims}d"
    method.__module__, method.__doc__ = function.__module__, doc
    return method
