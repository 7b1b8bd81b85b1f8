"""Lazy modules: `LazyLinear`, `LazyConv1d/2d/3d`, `LazyConvTranspose1d/2d/3d`, `LazyBatchNorm1d/2d/3d` and
`LazyInstanceNorm1d/2d/3d`, like torch.nn's.

A lazy module is built without its input size (in_features / in_channels / num_features). The first call reads
that size from its input, initialises the parameters as the regular module does (same distributions and fans) and
turns the module into that regular module (`type(m)` becomes `Linear`, `Conv2d`, ...), so its state dict, repr and
later calls are the regular module's. Before the first call it holds no tensors: `parameters()` and `state_dict()`
are empty (torch lists uninitialized placeholders there, which hold no values either), and `load_state_dict` of a
regular module's state dict sizes the module from the loaded weight first, as torch's does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kiln.tensor.nn.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from kiln.tensor.nn.instance_norm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from kiln.tensor.nn.linear import Linear
from kiln.tensor.nn.module import Module
from kiln.tensor.nn.normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d
from kiln.tensor.state.state_dict import IncompatibleKeys
from kiln.tensor.tensor import Tensor

__all__ = [
    "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyConv1d", "LazyConv2d", "LazyConv3d",
    "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d",
    "LazyInstanceNorm3d", "LazyLinear",
]  # fmt: skip


class _LazyModule(Module):
    """Holds the regular module's arguments but the first; `_materialize(size)` builds the regular module with
    `size` as that first argument and becomes it."""

    cls_to_become: type[Module] = Module

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        # the arguments are checked at the first call, when the regular module is built (building a stand-in now
        # would draw from the random generator, which torch's lazy constructors leave alone)
        self._lazy_args, self._lazy_kwargs = args, kwargs

    def has_uninitialized_params(self) -> bool:
        """True until the first call (or a load_state_dict) sizes the module, like torch's LazyModuleMixin."""
        return True

    def _input_size(self, x: Tensor) -> int:
        raise NotImplementedError

    def _size_from_state(self, state_dict: Mapping[str, Any]) -> int | None:
        raise NotImplementedError

    def _materialize(self, size: int) -> None:
        build: Callable[..., Module] = self.cls_to_become  # the regular module's constructor
        regular = build(size, *self._lazy_args, **self._lazy_kwargs)
        kept = {key: value for key, value in self.__dict__.items() if key.startswith("_forward") or key == "training"}
        self.__dict__.clear()
        self.__dict__.update(regular.__dict__)
        self.__dict__.update(kept)
        self.__class__ = self.cls_to_become  # type: ignore[assignment]

    def forward(self, x: Tensor) -> Any:
        """Sizes the module from x, becomes the regular module and returns its output for x."""
        if not isinstance(x, Tensor):
            raise TypeError(f"{type(self).__name__} expects a Tensor input, got {type(x).__name__}")
        self._materialize(self._input_size(x))
        return self.forward(x)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> IncompatibleKeys:
        """Sizes the module from the loaded weight (or running_mean) when that is there, then loads as the regular
        module does; with neither, the module stays lazy and the regular module's rules report the keys."""
        size = self._size_from_state(state_dict)
        if size is not None:
            self._materialize(size)
            return self.load_state_dict(state_dict, strict, assign)
        return super().load_state_dict(state_dict, strict, assign)


def _shape_of(state_dict: Mapping[str, Any], key: str) -> tuple[int, ...] | None:
    value = state_dict.get(key)
    return tuple(value.shape) if value is not None and hasattr(value, "shape") else None


class LazyLinear(_LazyModule):
    """`Linear` whose in_features is the last dim of its first input, like `torch.nn.LazyLinear`.

    Example:
        >>> layer = LazyLinear(4)
        >>> layer(Tensor.ones(2, 3)).shape, type(layer).__name__, layer.in_features
        ((2, 4), 'Linear', 3)
    """

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device: str | None = None) -> None:
        super().__init__(out_features, bias, device)

    def _input_size(self, x: Tensor) -> int:
        if x.ndim == 0:
            raise ValueError("LazyLinear expects an input with at least 1 dim, got a 0-d tensor")
        return x.shape[-1]

    def _size_from_state(self, state_dict: Mapping[str, Any]) -> int | None:
        shape = _shape_of(state_dict, "weight")
        return shape[1] if shape is not None and len(shape) == 2 else None


class _LazyConvNd(_LazyModule):
    dims = 0
    transposed = False

    def _groups(self) -> Any:
        return self._lazy_kwargs.get("groups", 1)

    def _input_size(self, x: Tensor) -> int:
        if x.ndim not in (self.dims + 1, self.dims + 2):
            raise RuntimeError(
                f"{type(self).__name__} expects a {self.dims + 1}D (unbatched) or {self.dims + 2}D (batched) input, "
                f"got shape {list(x.shape)}"
            )
        return x.shape[0] if x.ndim == self.dims + 1 else x.shape[1]

    def _size_from_state(self, state_dict: Mapping[str, Any]) -> int | None:
        shape = _shape_of(state_dict, "weight")
        if shape is None or len(shape) != self.dims + 2:
            return None
        groups = self._groups()
        return shape[0] if self.transposed else shape[1] * groups


class _LazyConv(_LazyConvNd):
    def __init__(
        self, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] | str = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1,
        bias: bool = True, device: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(
            out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias,
            device=device,
        )  # fmt: skip


class _LazyConvTranspose(_LazyConvNd):
    transposed = True

    def __init__(
        self, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0, groups: int = 1,
        bias: bool = True, dilation: int | tuple[int, ...] = 1, device: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(
            out_channels, kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups,
            bias=bias, dilation=dilation, device=device,
        )  # fmt: skip


class LazyConv1d(_LazyConv):
    """`Conv1d` whose in_channels is read from its first input, like `torch.nn.LazyConv1d`."""

    dims, cls_to_become = 1, Conv1d


class LazyConv2d(_LazyConv):
    """`Conv2d` whose in_channels is read from its first input, like `torch.nn.LazyConv2d`.

    Example:
        >>> conv = LazyConv2d(8, 3)
        >>> conv(Tensor.ones(1, 2, 5, 5)).shape, conv.weight.shape
        ((1, 8, 3, 3), (8, 2, 3, 3))
    """

    dims, cls_to_become = 2, Conv2d


class LazyConv3d(_LazyConv):
    """`Conv3d` whose in_channels is read from its first input, like `torch.nn.LazyConv3d`."""

    dims, cls_to_become = 3, Conv3d


class LazyConvTranspose1d(_LazyConvTranspose):
    """`ConvTranspose1d` whose in_channels is read from its first input, like `torch.nn.LazyConvTranspose1d`."""

    dims, cls_to_become = 1, ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose):
    """`ConvTranspose2d` whose in_channels is read from its first input, like `torch.nn.LazyConvTranspose2d`."""

    dims, cls_to_become = 2, ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose):
    """`ConvTranspose3d` whose in_channels is read from its first input, like `torch.nn.LazyConvTranspose3d`."""

    dims, cls_to_become = 3, ConvTranspose3d


class _LazyNorm(_LazyModule):
    """Batch / instance norm: num_features is dim 1 of a batched input (dim 0 of an unbatched instance-norm one)."""

    unbatched_dims: tuple[int, ...] = ()
    batched_dims: tuple[int, ...] = ()

    def __init__(
        self, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True, track_running_stats: bool = True,
        device: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(eps, momentum, affine, track_running_stats, device)

    def _input_size(self, x: Tensor) -> int:
        if x.ndim in self.batched_dims:
            return x.shape[1]
        if x.ndim in self.unbatched_dims:
            return x.shape[0]
        dims = " or ".join(f"{count}D" for count in (*self.unbatched_dims, *self.batched_dims))
        raise ValueError(f"{type(self).__name__} expects a {dims} input, got shape {list(x.shape)}")

    def _size_from_state(self, state_dict: Mapping[str, Any]) -> int | None:
        for key in ("weight", "bias", "running_mean", "running_var"):
            shape = _shape_of(state_dict, key)
            if shape is not None and len(shape) == 1:
                return shape[0]
        return None


class LazyBatchNorm1d(_LazyNorm):
    """`BatchNorm1d` whose num_features is dim 1 of its first input, like `torch.nn.LazyBatchNorm1d`."""

    cls_to_become, batched_dims = BatchNorm1d, (2, 3)


class LazyBatchNorm2d(_LazyNorm):
    """`BatchNorm2d` whose num_features is dim 1 of its first input, like `torch.nn.LazyBatchNorm2d`."""

    cls_to_become, batched_dims = BatchNorm2d, (4,)


class LazyBatchNorm3d(_LazyNorm):
    """`BatchNorm3d` whose num_features is dim 1 of its first input, like `torch.nn.LazyBatchNorm3d`."""

    cls_to_become, batched_dims = BatchNorm3d, (5,)


class _LazyInstanceNorm(_LazyNorm):
    """torch's lazy instance norms default to affine=True and track_running_stats=True, unlike the regular ones.
    An unbatched first input (C, *spatial) is sized from dim 0 (torch reads dim 1 of any input, then refuses it)."""


class LazyInstanceNorm1d(_LazyInstanceNorm):
    """`InstanceNorm1d` whose num_features is read from its first input, like `torch.nn.LazyInstanceNorm1d`."""

    cls_to_become, unbatched_dims, batched_dims = InstanceNorm1d, (2,), (3,)


class LazyInstanceNorm2d(_LazyInstanceNorm):
    """`InstanceNorm2d` whose num_features is read from its first input, like `torch.nn.LazyInstanceNorm2d`."""

    cls_to_become, unbatched_dims, batched_dims = InstanceNorm2d, (3,), (4,)


class LazyInstanceNorm3d(_LazyInstanceNorm):
    """`InstanceNorm3d` whose num_features is read from its first input, like `torch.nn.LazyInstanceNorm3d`."""

    cls_to_become, unbatched_dims, batched_dims = InstanceNorm3d, (4,), (5,)
