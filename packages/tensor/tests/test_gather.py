"""One-hot reductions become gathers (codegen's pm_gather, pm_iota folding arange's digit sums): an embedding lookup
or a tensor index reads the selected rows only. Values are checked against numpy, traffic against the table size."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor, nn
from kiln.uops import Context


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 100, 1000, 4097, 32000])
def test_arange_values(size: int) -> None:
    np.testing.assert_array_equal(Tensor.arange(size).numpy(), np.arange(size))
    np.testing.assert_array_equal((Tensor.arange(size) * 3 + 1).numpy(), np.arange(size) * 3 + 1)


@pytest.mark.parametrize(
    ("vocab", "dim", "ids"),
    [(100, 8, [[4, 9, 0, 99]]), (32000, 16, [[5, 31999, 7], [0, 1, 2]]), (10, 3, [[-1, 10, 3, 9]]), (2, 5, [[1, 0]])],
)
def test_embedding_matches_numpy_and_zero_rows_out_of_range(vocab: int, dim: int, ids: list[list[int]]) -> None:
    rng = np.random.default_rng(vocab)
    table = rng.standard_normal((vocab, dim)).astype(np.float32)
    layer = nn.Embedding(vocab, dim)
    layer.weight = Tensor(table)
    index = np.array(ids, np.int32)
    expected = np.where(((index >= 0) & (index < vocab))[..., None], table[np.clip(index, 0, vocab - 1)], 0.0)
    with Context(CHECK=False):  # unchecked (the default): an out-of-range id selects a row of zeros
        np.testing.assert_array_equal(layer(Tensor(index)).numpy(), expected)


def test_embedding_reads_the_picked_rows_not_the_table() -> None:
    vocab, dim = 32000, 256
    layer = nn.Embedding(vocab, dim)
    layer.weight.realize()
    ids = Tensor(np.array([[3, 17]], np.int32)).realize()
    layer(ids).realize()  # compile once
    GlobalCounters.reset()
    out = layer(Tensor(np.array([[8, 31000]], np.int32))).numpy()
    np.testing.assert_array_equal(out[0, 1], layer.weight.numpy()[31000])
    assert GlobalCounters.mem_bytes < vocab * dim * 4 // 100  # the table is 32 MB: a gather touches 2 rows


def test_embedding_gradient_still_accumulates_repeated_ids() -> None:
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    layer = nn.Embedding(4, 3)
    layer.weight = Tensor(table, requires_grad=True)
    out = layer(Tensor(np.array([[1, 1, 3]], np.int32)))
    (out * Tensor(np.array([1.0, 2.0, 3.0], np.float32))).sum().backward()
    expected = np.zeros((4, 3), np.float32)
    expected[1] = 2 * np.array([1.0, 2.0, 3.0])
    expected[3] = np.array([1.0, 2.0, 3.0])
    assert layer.weight.grad is not None
    np.testing.assert_array_equal(layer.weight.grad.numpy(), expected)


def test_tensor_index_with_a_tensor_gathers() -> None:
    x = np.random.default_rng(1).standard_normal((50, 6)).astype(np.float32)
    idx = np.array([0, 49, 7, 7], np.int32)
    np.testing.assert_array_equal(Tensor(x)[Tensor(idx)].numpy(), x[idx])
