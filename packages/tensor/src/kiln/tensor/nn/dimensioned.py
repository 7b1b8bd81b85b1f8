"""`Dimensioned`: the base of the layer families torch spells once per number of spatial dims (`MaxPool1d/2d/3d`,
`ZeroPad1d/2d/3d`, ...). A member of a family is one line, its dims a class keyword:

    class MaxPool2d(_MaxPool, dims=2): ...

and its docstring is the family's `summary` with `{dims}` and `{last_dims}` ("the last dim", "the last 2 dims")
filled, then ", like `torch.nn.<name>`.", unless it writes its own (one with an example)."""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["Dimensioned"]


class Dimensioned:
    """A family's base sets `summary` (a class keyword too); each member sets `dims`."""

    dims: ClassVar[int] = 0
    summary: ClassVar[str] = ""

    def __init_subclass__(cls, dims: int = 0, summary: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if summary:
            cls.summary = summary
        if dims:
            cls.dims = dims
            if cls.__doc__ is None:
                last_dims = "the last dim" if dims == 1 else f"the last {dims} dims"
                described = cls.summary.format(dims=dims, last_dims=last_dims)
                cls.__doc__ = f"{described}, like `torch.nn.{cls.__name__}`."
