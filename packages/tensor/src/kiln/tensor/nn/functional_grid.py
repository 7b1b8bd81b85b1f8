"""Spatial transformer functions of `kiln.tensor.nn.functional`: `affine_grid` (the sampling grid of an affine map)
and `grid_sample` (reading an image at grid positions), with `torch.nn.functional`'s signatures, for 2-d images and
3-d volumes.

Grid coordinates are in [-1, 1] (-1 the left / top edge); `align_corners` says whether they name the centres of the
corner pixels (True) or the outer edges of the image (False, torch's default). `grid_sample` turns each coordinate
into a pixel position, folds it back with the padding mode, and reads the nearest or the 2**dims surrounding pixels
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
    """The grid of positions that the affine maps `theta` send the output pixels of `size` to: (N, H, W, 2) of (x, y)
    for theta (N, 2, 3) and size (N, C, H, W), or (N, D, H, W, 3) of (x, y, z) for theta (N, 3, 4) and size
    (N, C, D, H, W), like `torch.nn.functional.affine_grid`.

    Example:
        >>> affine_grid(Tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]), (1, 1, 1, 2), align_corners=True).tolist()
        [[[[-1.0, 0.0], [1.0, 0.0]]]]
    """
    aligned = _default_align(align_corners, "affine_grid")
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if len(size) not in (4, 5):
        raise NotImplementedError(
            "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, respectively. "
            f"Got size {list(size)}."
        )
    spatial = len(size) - 2
    if theta.ndim != 3 or theta.shape[-2:] != (spatial, spatial + 1):
        raise ValueError(
            f"Expected a batch of {spatial}D affine matrices of shape Nx{spatial}x{spatial + 1} for size "
            f"{list(size)}. Got {list(theta.shape)}."
        )
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {list(size)}")
    batch, sizes = size[0], tuple(size[2:])
    if theta.shape[0] != batch:
        raise ValueError(f"affine_grid: theta holds {theta.shape[0]} matrices for a batch of {batch}")
    # one column per coordinate, x first (it runs along the last dim), then the constant 1
    columns = []
    for axis in reversed(range(spatial)):
        view = [1] * spatial + [1]
        view[axis] = sizes[axis]
        columns.append(_base_coordinates(sizes[axis], aligned, theta).reshape(*view).expand(*sizes, 1))
    columns.append(Tensor.ones(*sizes, 1, dtype=theta.dtype, device=theta.device))
    points = 1
    for extent in sizes:
        points *= extent
    base = columns[0].cat(*columns[1:], dim=-1).reshape(1, points, spatial + 1)
    return (base @ theta.transpose(1, 2)).reshape(batch, *sizes, spatial)


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


def _read(flat: Tensor, corner: list[Tensor], sizes: tuple[int, ...]) -> Tensor:
    """flat (N, C, prod(sizes)) read at integer positions `corner` (x first; each (N, L)) as (N, C, L); a position
    outside the image reads 0."""
    inside: Tensor | None = None
    index: Tensor | None = None
    for axis, extent in enumerate(sizes):
        position = corner[len(sizes) - 1 - axis]  # sizes run (D, H, W), corners (x, y, z)
        within = (position >= 0) & (position <= extent - 1)
        inside = within if inside is None else inside & within
        clamped = position.clamp(0, extent - 1)
        index = clamped if index is None else index * extent + clamped
    assert inside is not None and index is not None
    batch, channels, _ = flat.shape
    offsets = index.cast(dtypes.int32)
    picked = flat.gather(2, offsets.unsqueeze(1).expand(batch, channels, offsets.shape[-1]))
    return inside.unsqueeze(1).where(picked, 0.0)._cast(flat.dtype)


def grid_sample(
    input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool | None = None
) -> Tensor:
    """The image `input` (N, C, H, W) read at the (x, y) positions of `grid` (N, H_out, W_out, 2) in [-1, 1]:
    (N, C, H_out, W_out); or the volume (N, C, D, H, W) at the (x, y, z) of (N, D_out, H_out, W_out, 3), like
    `torch.nn.functional.grid_sample` ('bilinear' (trilinear for volumes) or 'nearest'; padding 'zeros', 'border'
    or 'reflection'; no 'bicubic')."""
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
    spatial = input.ndim - 2
    if spatial not in (2, 3) or grid.ndim != input.ndim or grid.shape[-1] != spatial:
        raise RuntimeError(
            "grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, the grid's last dim "
            f"the number of spatial dims, but got input with sizes {list(input.shape)} and grid with sizes "
            f"{list(grid.shape)}"
        )
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input with sizes "
            f"{list(input.shape)} and grid with sizes {list(grid.shape)}"
        )
    batch, channels, *image = input.shape
    sizes = tuple(image)
    out_sizes = tuple(grid.shape[1:-1])
    count = 1
    for extent in out_sizes:
        count *= extent
    points = grid.reshape(batch, count, spatial).cast(input.dtype)
    # positions in pixels, x first: coordinate k runs along image dim (spatial - 1 - k)
    positions = [
        _source_position(points[..., k], sizes[spatial - 1 - k], padding_mode, aligned) for k in range(spatial)
    ]
    flat = input.reshape(batch, channels, -1)
    sampled: Tensor | None = None
    if mode == "nearest":
        sampled = _read(flat, [position.round().detach() for position in positions], sizes)
    else:
        lows = [position.floor().detach() for position in positions]
        fractions = [position - low for position, low in zip(positions, lows)]
        for corner in range(1 << spatial):
            # bit k of `corner` picks the upper neighbour along coordinate k, weighted by its fraction
            picks = [(corner >> k) & 1 for k in range(spatial)]
            weight = None
            for k, upper in enumerate(picks):
                factor = fractions[k] if upper else 1 - fractions[k]
                weight = factor if weight is None else weight * factor
            assert weight is not None
            term = _read(flat, [lows[k] + picks[k] for k in range(spatial)], sizes) * weight.unsqueeze(1)
            sampled = term if sampled is None else sampled + term
    assert sampled is not None
    return sampled.reshape(batch, channels, *out_sizes)
