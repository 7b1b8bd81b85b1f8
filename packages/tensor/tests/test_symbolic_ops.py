"""More op families over a dim of bound-Variable size (issue 37): roll, split, median / kthvalue, attention,
cross-entropy, one-hot, layernorm and writes through a Variable slice. Each against numpy at several bound values
with one compile (the engine's program counter), and the ops that cannot follow a variable raise naming it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from kiln.tensor import Tensor, Variable
from kiln.tensor.realize.engine import Engine

EachValue = Callable[[Callable[[int], None], Sequence[int]], None]
N = Variable("n", 1, 10)
VALUES = (3, 4, 7, 10)
AT_LEAST_THREE = Variable("m", 3, 10)
START = Variable("s", 0, 9)
DATA = np.random.default_rng(37).standard_normal((10, 6)).astype(np.float32)
CLOSE = {"rtol": 1e-5, "atol": 1e-5}


def _softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - values.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def test_roll_and_split_along_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()

    def run(value: int) -> None:
        rows, want = x[: N.bind(value)], DATA[:value]
        np.testing.assert_array_equal(rows.roll(1, 0).numpy(), np.roll(want, 1, 0))
        np.testing.assert_array_equal(rows.roll(-1, 0).numpy(), np.roll(want, -1, 0))
        np.testing.assert_array_equal(rows.roll(2).numpy(), np.roll(want, 2))  # flattened: n * 6 >= 6
        m = AT_LEAST_THREE.bind(value)
        np.testing.assert_array_equal(x[:m].roll(3, 0).numpy(), np.roll(want, 3, 0))
        head, tail = x[:m].split([2, m - 2], 0)
        np.testing.assert_array_equal(head.numpy(), want[:2])
        np.testing.assert_array_equal(tail.numpy(), want[2:])

    each_value(run, VALUES)


def test_median_and_kthvalue_along_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()

    def run(value: int) -> None:
        rows, want = x[: N.bind(value)], DATA[:value]
        lower = (value - 1) // 2
        values, positions = rows.median(0)
        np.testing.assert_array_equal(values.numpy(), np.sort(want, 0)[lower])
        np.testing.assert_array_equal(positions.numpy(), np.argsort(want, 0, kind="stable")[lower])
        assert rows.median(1, keepdim=True)[0].numpy().shape == (value, 1)
        assert rows.median().item() == np.sort(want.reshape(-1))[(value * 6 - 1) // 2]
        values, _ = x[: AT_LEAST_THREE.bind(value)].kthvalue(3, 0)
        np.testing.assert_array_equal(values.numpy(), np.sort(want, 0)[2])

    each_value(run, VALUES)


def test_causal_attention_over_a_variable_length(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA[:, :4].copy()).realize()

    def run(value: int) -> None:
        v = N.bind(value)
        q = x[:v].reshape(1, v, 4)
        got = Tensor.scaled_dot_product_attention(q, q, q, is_causal=True).numpy()
        values = DATA[:value, :4]
        scores = np.where(np.tril(np.ones((value, value))) > 0, values @ values.T / 2, -np.inf)
        np.testing.assert_allclose(got, (_softmax(scores) @ values)[None], **CLOSE)
        # one query at position s over the keys 0..s: the decode step's shape
        s = START.bind(value - 1)
        got = Tensor.scaled_dot_product_attention(x[s : s + 1], x[: s + 1], x[: s + 1]).numpy()
        expected = _softmax(values[-1:] @ values.T / 2) @ values
        np.testing.assert_allclose(got, expected, **CLOSE)

    each_value(run, VALUES)


def test_cross_entropy_one_hot_and_layernorm_over_a_variable_batch(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()
    labels = Tensor(np.arange(10, dtype=np.int32) % 6).realize()

    def run(value: int) -> None:
        v, want = N.bind(value), DATA[:value]
        targets = np.arange(value) % 6
        loss = x[:v].cross_entropy(labels[:v]).item()
        assert loss == pytest.approx(-np.log(_softmax(want)[np.arange(value), targets]).mean(), rel=1e-5)
        np.testing.assert_array_equal(labels[:v].one_hot(6).numpy(), np.eye(6, dtype=np.int32)[targets])
        normalized = (want.T - want.T.mean(-1, keepdims=True)) / np.sqrt(want.T.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(x[:v].T.layernorm().numpy(), normalized, rtol=1e-4, atol=1e-4)

    each_value(run, VALUES)


def test_writes_through_a_variable_slice(engine: Engine, each_value: EachValue) -> None:
    def run(value: int) -> None:
        cache = Tensor.zeros(10, 4).contiguous().realize()
        s = START.bind(value - 1)
        cache[s : s + 1] = Tensor.full((1, 4), 2.0)  # a KV cache write at the position
        cache[: N.bind(value)] += 1.0
        expected = np.zeros((10, 4), np.float32)
        expected[value - 1] = 2.0
        expected[:value] += 1.0
        np.testing.assert_array_equal(cache.numpy(), expected)

    each_value(run, VALUES)


def test_ops_whose_result_would_change_shape_with_the_variable_raise() -> None:
    rows = Tensor(DATA)[: N.bind(3)]
    with pytest.raises(ValueError, match=r"roll by 2 along dim 0 of size n=3 \('n' in \[1, 10\]"):
        rows.roll(2, 0)  # n = 1 has no two positions to shift by
    with pytest.raises(ValueError, match=r"chunk of dim 0 of size n=3 \('n' in \[1, 10\]"):
        rows.chunk(2, 0)
    with pytest.raises(ValueError, match=r"split of dim 0 of size n=3 .*number of pieces would change"):
        rows.split(2, 0)
    with pytest.raises(ValueError, match=r"split sizes \(2, 1\) must sum to the dim size n=3"):
        rows.split([2, 1], 0)
    with pytest.raises(IndexError, match=r"kthvalue k = 2 is out of range for a dim of n=3"):
        rows.kthvalue(2, 0)


IMAGES = np.random.default_rng(39).standard_normal((10, 2, 5, 5)).astype(np.float32)
KERNEL = np.random.default_rng(40).standard_normal((3, 2, 3, 3)).astype(np.float32)


def _conv2d(images: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(images, kernel.shape[2:], axis=(2, 3))  # (n, c, h, w, kh, kw)
    return np.einsum("nchwij,ocij->nohw", windows, kernel)


def test_convolution_and_pooling_over_a_variable_batch(engine: Engine, each_value: EachValue) -> None:
    images, kernel = Tensor(IMAGES).realize(), Tensor(KERNEL).realize()

    def run(value: int) -> None:
        batch, want = images[: N.bind(value)], IMAGES[:value]
        np.testing.assert_allclose(batch.conv2d(kernel).numpy(), _conv2d(want, KERNEL), rtol=1e-4, atol=1e-4)
        cut = want[:, :, :4, :4].reshape(value, 2, 2, 2, 2, 2)
        np.testing.assert_array_equal(batch.max_pool2d(2).numpy(), cut.max((3, 5)))
        np.testing.assert_allclose(batch.avg_pool2d(2).numpy(), cut.mean((3, 5)), **CLOSE)

    each_value(run, VALUES)


def test_scatter_diff_eye_einsum_and_cov_over_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()
    zeros = Tensor(np.zeros((1, 6), np.int32)).realize()

    def run(value: int) -> None:
        v, want = N.bind(value), DATA[:value]
        scattered = want.copy()
        scattered[0] = 1.0
        np.testing.assert_array_equal(x[:v].scatter(0, zeros, 1.0).numpy(), scattered)
        np.testing.assert_allclose(x[:v].diff(dim=0).numpy(), np.diff(want, axis=0), **CLOSE)
        np.testing.assert_array_equal(Tensor.eye(v).numpy(), np.eye(value, dtype=np.float32))
        np.testing.assert_allclose(Tensor.einsum("ij,kj->ik", x[:v], x[:v]).numpy(), want @ want.T, **CLOSE)
        np.testing.assert_allclose(x[:v].T.cov().numpy(), np.cov(want.T), rtol=1e-4, atol=1e-5)

    each_value(run, VALUES)


def test_nonzero_of_a_tensor_with_a_variable_first_dim(engine: Engine) -> None:
    x = Tensor(DATA).realize()
    for value in (3, 7, 10):
        np.testing.assert_array_equal(x[: N.bind(value)].gt(0).nonzero().numpy(), np.argwhere(DATA[:value] > 0))
    with pytest.raises(ValueError, match=r"nonzero of a tensor of shape \(6, n=3\): only its first dim"):
        x[: N.bind(3)].T.nonzero()
    with pytest.raises(ValueError, match=r"quantile along dim 0 of size n=3 \('n' in \[1, 10\]"):
        x[: N.bind(3)].quantile(0.5, dim=0)


def test_diagonal_trace_and_corrcoef_of_variable_matrices(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()
    few = Variable("r", 1, 6)  # at most the 6 columns: the diagonal runs down the rows

    def run(value: int) -> None:
        rows = min(value, 6)
        narrow, want = x[: few.bind(rows)], DATA[:rows]
        np.testing.assert_array_equal(narrow.diagonal().numpy(), np.diagonal(want))
        np.testing.assert_array_equal(narrow.diagonal(-1).numpy(), np.diagonal(want, -1))
        assert narrow.trace().item() == pytest.approx(np.trace(want), rel=1e-6, abs=1e-6)
        if value > 1:
            tall = x[: N.bind(value)]
            np.testing.assert_allclose(tall.cov().numpy(), np.cov(DATA[:value]), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(tall.corrcoef().numpy(), np.corrcoef(DATA[:value]), rtol=1e-4, atol=1e-5)

    each_value(run, (2, 4, 6, 10))
    with pytest.raises(ValueError, match=r"diagonal 0 of a \(n=3, 6\) matrix: its length would switch"):
        x[: N.bind(3)].diagonal()
    with pytest.raises(ValueError, match=r"unfold along dim 0 of size n=3 \('n' in \[1, 10\]"):
        x[: N.bind(3)].unfold(0, 2, 1)


def test_matmul_of_variable_rows_by_a_large_matrix(engine: Engine, each_value: EachValue) -> None:
    # a large right operand is copied into column panels first: rows of bound-Variable size count at their largest
    rows = Variable("rows", 1, 96)
    left = np.random.default_rng(41).standard_normal((96, 1024)).astype(np.float32)
    right = np.random.default_rng(42).standard_normal((1024, 520)).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()

    def run(value: int) -> None:
        got = (a[: rows.bind(value)] @ b).numpy()
        np.testing.assert_allclose(got, left[:value] @ right, rtol=1e-4, atol=1e-3)

    each_value(run, (70, 1, 96, 33))
