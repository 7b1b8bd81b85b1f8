"""Spatial transformer functions of `kiln.tensor.nn.functional`: `affine_grid` (the sampling grid of an affine map)
and `grid_sample` (reading an image at grid positions), with `torch.nn.functional`'s signatures for 2-d images.

Grid coordinates are in [-1, 1] (-1 the left / top edge); `align_corners` says whether they name the centres of the
corner pixels (True) or the outer edges of the image (False, torch's default). `grid_sample` turns each coordinate
into a pixel position, folds it back with the padding mode, and reads the 1 (nearest) or 4 (bilinear) neighbours
with `Tensor.gather`; a neighbour outside the image reads 0 ('zeros'). Its gradient reaches both the image and the
grid (through the bilinear weights), like torch's. Import them from `kiln.tensor.nn.functional`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["affine_grid", "grid_sample"]

_MODES = ("bilinear", "nearest", "bicubic")
_PADDINGS = ("zeros", "border", "reflection")


def _default_align(align_corners: bool | None, name: str) -> bool:
    if align_corners is None:
        warnings.warn(
            f"Default {name} behavior has changed to align_corners=False since 1.3.0. Please specify "
            "align_corners=True if the old behavior is desired.",
            stacklevel=3,
        )
        return False
    return align_corners


def _base_coordinates(steps: int, align_corners: bool, like: Tensor) -> Tensor:
    if steps <= 1:
        return Tensor.zeros(max(steps, 0), dtype=like.dtype, device=like.device)
    points = Tensor.linspace(-1.0, 1.0, steps, dtype=like.dtype, device=like.device)
    # with align_corners=False the points are the pixel centres, (steps - 1) / steps of the way to each edge
    return points if align_corners else points * ((steps - 1) / steps)


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """The (N, H, W, 2) grid of (x, y) positions that the affine maps `theta` (N, 2, 3) send the output pixels of
    `size` (N, C, H, W) to, like `torch.nn.functional.affine_grid` (2-d only).

    Example:
        >>> affine_grid(Tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]), (1, 1, 1, 2), align_corners=True).tolist()
        [[[[-1.0, 0.0], [1.0, 0.0]]]]
    """
    aligned = _default_align(align_corners, "affine_grid")
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if len(size) != 4:
        raise NotImplementedError(
            f"affine_grid only supports 4D sizes, for 2D affine transformations in kiln. Got size {list(size)}."
        )
    if theta.ndim != 3 or theta.shape[-2:] != (2, 3):
        raise ValueError(
            f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {list(size)}. Got {list(theta.shape)}."
        )
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {list(size)}")
    batch, _channels, height, width = size
    if theta.shape[0] != batch:
        raise ValueError(f"affine_grid: theta holds {theta.shape[0]} matrices for a batch of {batch}")
    xs = _base_coordinates(width, aligned, theta).reshape(1, width, 1).expand(height, width, 1)
    ys = _base_coordinates(height, aligned, theta).reshape(height, 1, 1).expand(height, width, 1)
    ones = Tensor.ones(height, width, 1, dtype=theta.dtype, device=theta.device)
    base = xs.cat(ys, ones, dim=-1).reshape(1, height * width, 3)
    return (base @ theta.transpose(1, 2)).reshape(batch, height, width, 2)


def _reflect(position: Tensor, twice_low: int, twice_high: int) -> Tensor:
    # torch's reflect_coordinates: fold `position` back into [low, high] by mirroring at each end
    if twice_low == twice_high:
        return position * 0
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    distance = (position - low).abs()
    flips = (distance / span).floor()
    extra = distance - flips * span
    return ((flips % 2) == 0).where(extra + low, span - extra + low)


def _source_position(coordinate: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    if align_corners:
        position = (coordinate + 1) / 2 * (size - 1)
    else:
        position = ((coordinate + 1) * size - 1) / 2
    if padding_mode == "border":
        return position.clamp(0, size - 1)
    if padding_mode == "reflection":
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _reflect(position, *twice).clamp(0, size - 1)
    return position


def _read(flat: Tensor, x: Tensor, y: Tensor, width: int, height: int) -> Tensor:
    """flat (N, C, H W) read at integer positions x, y (N, L) as (N, C, L); positions outside the image read 0."""
    inside = (x >= 0) & (x <= width - 1) & (y >= 0) & (y <= height - 1)
    index = (y.clamp(0, height - 1) * width + x.clamp(0, width - 1)).cast(dtypes.int32)
    batch, channels, _ = flat.shape
    picked = flat.gather(2, index.unsqueeze(1).expand(batch, channels, index.shape[-1]))
    return inside.unsqueeze(1).where(picked, 0.0)._cast(flat.dtype)


def grid_sample(
    input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool | None = None
) -> Tensor:
    """The image `input` (N, C, H, W) read at the (x, y) positions of `grid` (N, H_out, W_out, 2) in [-1, 1]:
    (N, C, H_out, W_out), like `torch.nn.functional.grid_sample` ('bilinear' or 'nearest'; padding 'zeros',
    'border' or 'reflection'; 2-d only, no 'bicubic')."""
    if mode not in _MODES:
        raise ValueError(
            f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: '{mode}'"
        )
    if padding_mode not in _PADDINGS:
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or 'reflection', but got: "
            f"'{padding_mode}'"
        )
    if mode == "bicubic":
        raise NotImplementedError("grid_sample(mode='bicubic') is not supported by kiln; use 'bilinear' or 'nearest'")
    aligned = _default_align(align_corners, "grid_sample")
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2:
        raise RuntimeError(
            "grid_sample(): kiln supports 4-D input (N, C, H, W) with a grid (N, H_out, W_out, 2), got input "
            f"{list(input.shape)} and grid {list(grid.shape)}"
        )
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input with sizes "
            f"{list(input.shape)} and grid with sizes {list(grid.shape)}"
        )
    batch, channels, height, width = input.shape
    out_height, out_width = grid.shape[1], grid.shape[2]
    points = grid.reshape(batch, out_height * out_width, 2).cast(input.dtype)
    x = _source_position(points[..., 0], width, padding_mode, aligned)
    y = _source_position(points[..., 1], height, padding_mode, aligned)
    flat = input.reshape(batch, channels, height * width)
    if mode == "nearest":
        sampled = _read(flat, x.round().detach(), y.round().detach(), width, height)
    else:
        left, top = x.floor().detach(), y.floor().detach()
        right, bottom = left + 1, top + 1
        east, south = x - left, y - top  # the weights of the right and bottom neighbours
        west, north = 1 - east, 1 - south
        sampled = (
            _read(flat, left, top, width, height) * (west * north).unsqueeze(1)
            + _read(flat, right, top, width, height) * (east * north).unsqueeze(1)
            + _read(flat, left, bottom, width, height) * (west * south).unsqueeze(1)
            + _read(flat, right, bottom, width, height) * (east * south).unsqueeze(1)
        )
    return sampled.reshape(batch, channels, out_height, out_width)
