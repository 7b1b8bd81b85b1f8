"""kiln.tensor.datasets: IDX files built here byte by byte (plain and gzipped), MNIST / Fashion-MNIST folders and
their missing-file errors, scikit-learn's digits against scikit-learn itself, and DataLoader batching."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.datasets import DataLoader, digits, fashion_mnist, mnist, read_idx

RNG = np.random.default_rng(8)


pytestmark = pytest.mark.default_device("PYTHON")


def idx_bytes(array: np.ndarray[Any, Any], type_code: int, big_endian_format: str) -> bytes:
    """An IDX file: two zero bytes, the type code, the dim count, big-endian uint32 dims, big-endian data."""
    header = bytes([0, 0, type_code, array.ndim]) + b"".join(struct.pack(">I", size) for size in array.shape)
    return header + array.astype(big_endian_format).tobytes()


@pytest.mark.parametrize(
    ("type_code", "dtype", "big_endian"),
    [
        (0x08, np.uint8, ">u1"),
        (0x09, np.int8, ">i1"),
        (0x0B, np.int16, ">i2"),
        (0x0C, np.int32, ">i4"),
        (0x0D, np.float32, ">f4"),
        (0x0E, np.float64, ">f8"),
    ],
)
@pytest.mark.parametrize("compressed", [False, True])
def test_read_idx_every_type(tmp_path: Path, type_code: int, dtype: Any, big_endian: str, compressed: bool) -> None:
    array = (RNG.standard_normal((3, 4, 2)) * 50).astype(dtype)
    raw = idx_bytes(array, type_code, big_endian)
    path = tmp_path / ("data.gz" if compressed else "data")
    path.write_bytes(gzip.compress(raw) if compressed else raw)
    result = read_idx(path)
    assert result.dtype == np.dtype(dtype) and result.shape == (3, 4, 2)
    np.testing.assert_array_equal(result, array)


def test_read_idx_rejects_bad_files(tmp_path: Path) -> None:
    bad_magic = tmp_path / "bad"
    bad_magic.write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(bad_magic)
    short = tmp_path / "short"
    short.write_bytes(idx_bytes(np.arange(6, dtype=np.uint8), 0x08, ">u1")[:-2])
    with pytest.raises(ValueError, match=r"shape \(6,\).*holds 4"):
        read_idx(short)


def _write_mnist(folder: Path, compressed: bool) -> tuple[np.ndarray[Any, Any], ...]:
    arrays = (
        RNG.integers(0, 256, (5, 28, 28)).astype(np.uint8),
        RNG.integers(0, 10, 5).astype(np.uint8),
        RNG.integers(0, 256, (3, 28, 28)).astype(np.uint8),
        RNG.integers(0, 10, 3).astype(np.uint8),
    )
    names = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    for name, array in zip(names, arrays):
        raw = idx_bytes(array, 0x08, ">u1")
        (folder / (name + (".gz" if compressed else ""))).write_bytes(gzip.compress(raw) if compressed else raw)
    return arrays


@pytest.mark.parametrize("loader", [mnist, fashion_mnist])
@pytest.mark.parametrize("compressed", [False, True])
def test_mnist_folders(tmp_path: Path, loader: Any, compressed: bool) -> None:
    train_images, train_labels, test_images, test_labels = _write_mnist(tmp_path, compressed)
    x_train, y_train, x_test, y_test = loader(tmp_path)
    assert x_train.shape == (5, 1, 28, 28) and x_test.shape == (3, 1, 28, 28)
    np.testing.assert_allclose(x_train.numpy()[:, 0], train_images / 255.0, rtol=1e-6)
    np.testing.assert_allclose(x_test.numpy()[:, 0], test_images / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y_train.numpy(), train_labels)
    np.testing.assert_array_equal(y_test.numpy(), test_labels)
    assert y_train.numpy().dtype == np.int64


def test_missing_files_say_which_and_where(tmp_path: Path) -> None:
    _write_mnist(tmp_path, compressed=True)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    (tmp_path / "train-images-idx3-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError) as error:
        fashion_mnist(tmp_path)
    message = str(error.value)
    assert "fashion_mnist" in message and str(tmp_path.resolve()) in message
    assert "missing train-images-idx3-ubyte, t10k-labels-idx1-ubyte" in message
    with pytest.raises(FileNotFoundError, match="missing train-images"):
        mnist(tmp_path / "nowhere")


def test_digits_is_scikit_learns_with_a_fixed_split() -> None:
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    reference = load_digits()
    x_train, y_train, x_test, y_test = digits()
    assert x_train.shape == (1437, 1, 8, 8) and x_test.shape == (360, 1, 8, 8)
    images = np.concatenate([x_train.numpy(), x_test.numpy()])[:, 0] * 16
    labels = np.concatenate([y_train.numpy(), y_test.numpy()])
    # the split is a permutation of scikit-learn's rows: sort both by (label, pixels) and compare
    ours = sorted(zip(labels.tolist(), images.reshape(len(labels), -1).round().astype(int).tolist()))
    theirs = sorted(zip(reference.target.tolist(), reference.data.astype(int).tolist()))
    assert ours == theirs
    again = digits()
    np.testing.assert_array_equal(again[3].numpy(), y_test.numpy())
    assert not np.array_equal(digits(seed=1)[3].numpy(), y_test.numpy())
    with pytest.raises(ValueError, match="test_size"):
        digits(test_size=0)


def test_dataloader_batches_shuffles_reproducibly_and_drops_last() -> None:
    x, y = np.arange(10) * 10, np.arange(10)
    batches = [(bx.numpy(), by.numpy()) for bx, by in DataLoader([x, Tensor(y)], batch_size=4)]
    assert [len(b[0]) for b in batches] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)
    loader = DataLoader([x, y], batch_size=3, shuffle=True, drop_last=True, seed=4)
    assert len(loader) == 3
    first_epoch = [by.numpy() for _bx, by in loader]
    second_epoch = [by.numpy() for _bx, by in loader]
    assert all(len(batch) == 3 for batch in first_epoch)
    assert len(set(np.concatenate(first_epoch).tolist())) == 9  # distinct items, one left out
    assert not np.array_equal(np.concatenate(first_epoch), np.concatenate(second_epoch))
    for bx, by in DataLoader([x, y], batch_size=3, shuffle=True, seed=4):
        np.testing.assert_array_equal(bx.numpy(), by.numpy() * 10)  # rows stay paired
    replay = [by.numpy() for _bx, by in DataLoader([x, y], batch_size=3, shuffle=True, drop_last=True, seed=4)]
    for got, expected in zip(replay, first_epoch):
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="same length"):
        DataLoader([x, y[:5]], batch_size=2)
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader([x], batch_size=0)
