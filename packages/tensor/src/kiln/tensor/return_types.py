"""Named `(values, indices)` results, like `torch.return_types`: what `max(dim)`, `min(dim)`, `sort`, `topk`,
`cummax` (and the other ops that return a value with its position) give back.

Each result is a tuple, so `values, indices = x.max(1)` unpacks it, and has the fields `.values` and `.indices`.
Using the pair as if it were a tensor (`x.max(1) * 2`, `x.max(1).sum()`) raises a TypeError / AttributeError that
says to pick `.values`: a plain tuple would silently repeat itself under `* 2`.
"""

from __future__ import annotations

from typing import Any, Generic, NamedTuple

from kiln.tensor.core import TensorT

__all__ = ["ValuesIndices", "cummax", "cummin", "kthvalue", "max", "median", "min", "mode", "sort", "topk"]


class ValuesIndices(NamedTuple, Generic[TensorT]):
    """`(values, indices)` of a reduction or selection along one dim (torch.return_types' fields).

    Example:
        >>> values, indices = Tensor([[1, 5], [7, 2]]).max(dim=1)
        >>> values.tolist(), indices.tolist()
        ([5, 7], [1, 0])
    """

    values: TensorT
    indices: TensorT

    def _misuse(self, what: str) -> TypeError:
        return TypeError(
            f"{what}: this is a ({type(self).__name__} values, indices) pair like torch.return_types, not a Tensor; "
            "use .values (or unpack: values, indices = ...)"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(str(self._misuse(f"attribute {name!r}")))

    def __add__(self, other: object) -> Any:
        raise self._misuse("+")

    def __radd__(self, other: object) -> Any:
        raise self._misuse("+")

    def __mul__(self, other: object) -> Any:
        raise self._misuse("*")

    def __rmul__(self, other: object) -> Any:
        raise self._misuse("*")


def _named(name: str) -> type[ValuesIndices[Any]]:
    return type(name, (ValuesIndices,), {"__slots__": (), "__doc__": f"`(values, indices)` of `Tensor.{name}`."})


max = _named("max")
min = _named("min")
sort = _named("sort")
topk = _named("topk")
cummax = _named("cummax")
cummin = _named("cummin")
kthvalue = _named("kthvalue")
median = _named("median")
mode = _named("mode")
