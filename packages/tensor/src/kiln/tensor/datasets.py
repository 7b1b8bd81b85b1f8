"""Small datasets for examples and tests, read from local files only (no downloads), and a batch iterator.

- `digits()`: scikit-learn's bundled 8x8 handwritten digits (1797 images; needs the `kiln-tensor[datasets]` extra).
- `mnist(path)` / `fashion_mnist(path)`: the four standard IDX files (optionally gzipped) from a local folder.
- `read_idx(file)`: one IDX file as a numpy array.
- `DataLoader`: batches of arrays, shuffled with a fixed seed, optionally dropping the last short batch.
"""

from __future__ import annotations

import gzip
import math
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kiln.tensor.tensor import Tensor

__all__ = ["DataLoader", "digits", "fashion_mnist", "mnist", "read_idx"]

Array = np.ndarray[Any, Any]

# IDX type codes (the third magic byte) -> big-endian numpy dtypes (LeCun et al., "THE MNIST DATABASE" file format)
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def read_idx(file: str | Path) -> Array:
    """The array stored in IDX file `file` (gzip-compressed when its name ends in .gz), in native byte order.

    Raises:
        ValueError: when the header is not an IDX header or the data is shorter / longer than it says.
    """
    path = Path(file)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path} is not an IDX file: its magic bytes are {raw[:4].hex()} (expected 0000 tt nn)")
    dims = raw[3]
    header = 4 + 4 * dims
    if len(raw) < header:
        raise ValueError(f"{path}: the IDX header announces {dims} dims but the file has only {len(raw)} bytes")
    shape = struct.unpack(f">{dims}I", raw[4:header])
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(
            f"{path}: the header says shape {shape} of {dtype} ({expected} bytes), the file holds {len(raw) - header}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _find(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _idx_dataset(path: str | Path, what: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    folder = Path(path)
    found = [_find(folder, name) for name in _MNIST_FILES]
    missing = [name for name, file in zip(_MNIST_FILES, found) if file is None]
    if missing:
        raise FileNotFoundError(
            f"{what}: missing {', '.join(missing)} (each may be .gz) in {folder.resolve()}; put the four standard "
            f"IDX files {', '.join(_MNIST_FILES)} there (kiln downloads nothing)"
        )
    arrays = [read_idx(file) for file in found if file is not None]
    train_images, train_labels, test_images, test_labels = arrays
    for images, labels, split in ((train_images, train_labels, "train"), (test_images, test_labels, "t10k")):
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(
                f"{what}: {split} images {images.shape} and labels {labels.shape} do not form (N, rows, cols) / (N,)"
            )

    def images_tensor(images: Array) -> Tensor:
        return Tensor((images.astype(np.float32) / 255.0)[:, None])

    return (
        images_tensor(train_images),
        Tensor(train_labels.astype(np.int64)),
        images_tensor(test_images),
        Tensor(test_labels.astype(np.int64)),
    )


def mnist(path: str | Path) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """MNIST from the four IDX files in folder `path`: (train images (N, 1, 28, 28) float32 in [0, 1], train labels
    int64, test images, test labels).

    Raises:
        FileNotFoundError: naming the missing files and the folder they belong in.
    """
    return _idx_dataset(path, "mnist")


def fashion_mnist(path: str | Path) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Fashion-MNIST (the same four IDX file names as MNIST) from folder `path`; see `mnist`."""
    return _idx_dataset(path, "fashion_mnist")


def digits(test_size: int = 360, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """scikit-learn's 8x8 digits as (train images (N, 1, 8, 8) float32 in [0, 1], train labels int64, test images,
    test labels), split by a fixed permutation (`seed`) with `test_size` test images.

    Raises:
        ModuleNotFoundError: without scikit-learn (install the `kiln-tensor[datasets]` extra).
    """
    try:
        from sklearn.datasets import load_digits  # type: ignore[import-untyped]
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "kiln.tensor.datasets.digits() reads scikit-learn's bundled digits: install the extra "
            "`kiln-tensor[datasets]` (pip install scikit-learn)"
        ) from error
    bunch = load_digits()
    images = (np.asarray(bunch.images, dtype=np.float32) / 16.0)[:, None]
    labels = np.asarray(bunch.target, dtype=np.int64)
    if not 0 < test_size < len(labels):
        raise ValueError(f"digits test_size must be in (0, {len(labels)}), got {test_size}")
    order = np.random.default_rng(seed).permutation(len(labels))
    test, train = order[:test_size], order[test_size:]
    return Tensor(images[train]), Tensor(labels[train]), Tensor(images[test]), Tensor(labels[test])


class DataLoader:
    """Batches of equal-length arrays (or Tensors, read once): each iteration yields one tuple of Tensors per batch.

    Args:
        data: arrays / Tensors with the same first dim.
        batch_size: items per batch.
        shuffle: a new permutation every epoch, from a generator seeded once with `seed` (reproducible).
        drop_last: leave out the last batch when it is short (keeps every batch's shape, which TinyJit needs).

    Example:
        >>> [x.shape for (x,) in DataLoader([np.arange(5)], batch_size=2)]
        [(2,), (2,), (1,)]
    """

    def __init__(
        self,
        data: Sequence[Array | Tensor],
        batch_size: int,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        device: str | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        arrays = [item.numpy() if isinstance(item, Tensor) else np.asarray(item) for item in data]
        if not arrays:
            raise ValueError("DataLoader needs at least one array")
        lengths = {len(array) for array in arrays}
        if len(lengths) != 1:
            raise ValueError(f"DataLoader arrays must have the same length, got {[len(a) for a in arrays]}")
        self.arrays, self.batch_size, self.shuffle, self.drop_last = arrays, batch_size, shuffle, drop_last
        self.device = device
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        count = len(self.arrays[0])
        return count // self.batch_size if self.drop_last else math.ceil(count / self.batch_size)

    def __iter__(self) -> Iterator[tuple[Tensor, ...]]:
        count = len(self.arrays[0])
        order = self.rng.permutation(count) if self.shuffle else np.arange(count)
        for batch in range(len(self)):
            picked = order[batch * self.batch_size : (batch + 1) * self.batch_size]
            yield tuple(Tensor(np.ascontiguousarray(array[picked]), device=self.device) for array in self.arrays)
