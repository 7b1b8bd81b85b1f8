"""tinygrad's spellings kiln keeps with tinygrad's results: batched `svd(full_matrices=...)` with tinygrad's (and
torch.linalg.svd's) shapes (U, S, Vh), `qr(mode="complete")` with tinygrad's shapes (Q m x m, R m x n), and
einops-style `rearrange` with an ellipsis; numpy is the oracle (np.linalg.svd has tinygrad's shapes and order)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor

Array = np.ndarray[Any, Any]

pytestmark = pytest.mark.default_device("PYTHON")


def _orthonormal_columns(m: Array) -> None:
    k = m.shape[-1]
    np.testing.assert_allclose(np.swapaxes(m, -1, -2) @ m, np.broadcast_to(np.eye(k), (*m.shape[:-2], k, k)), atol=1e-9)


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 2, 6), (4, 4), (2, 1, 4, 1), (1, 3)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_full_matrices_has_tinygrads_shapes_and_reconstructs(shape: tuple[int, ...], full_matrices: bool) -> None:
    values = np.random.default_rng(len(shape) + shape[-1]).standard_normal(shape)
    u, s, vh = Tensor(values).svd(full_matrices=full_matrices)
    expected_u, expected_s, expected_vh = np.linalg.svd(values, full_matrices=full_matrices)
    assert (u.shape, s.shape, vh.shape) == (expected_u.shape, expected_s.shape, expected_vh.shape)
    np.testing.assert_allclose(s.numpy(), expected_s, rtol=1e-9, atol=1e-9)
    k = min(shape[-2:])
    rebuilt = (u.numpy()[..., :, :k] * s.numpy()[..., None, :]) @ vh.numpy()[..., :k, :]
    np.testing.assert_allclose(rebuilt, values, atol=1e-9)
    _orthonormal_columns(u.numpy())
    _orthonormal_columns(np.swapaxes(vh.numpy(), -1, -2))


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 2, 4)])
def test_svd_torch_spelling_returns_v_reduced_or_full(shape: tuple[int, ...]) -> None:
    values = np.random.default_rng(3).standard_normal(shape)
    m, n = shape[-2:]
    k = min(m, n)
    u, s, v = Tensor(values).svd()
    assert u.shape == (shape[0], m, k) and v.shape == (shape[0], n, k)
    np.testing.assert_allclose(
        (u.numpy() * s.numpy()[..., None, :]) @ np.swapaxes(v.numpy(), -1, -2), values, atol=1e-9
    )
    u, s, v = Tensor(values).svd(some=False)
    assert u.shape == (shape[0], m, m) and v.shape == (shape[0], n, n)
    _orthonormal_columns(u.numpy())
    _orthonormal_columns(v.numpy())
    with pytest.raises(ValueError, match="not both"):
        Tensor(values).svd(full_matrices=True, some=True)
    with pytest.raises(ValueError, match="at least 2 dims"):
        Tensor([1.0, 2.0]).svd()


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 3, 5)])
def test_qr_complete_has_tinygrads_shapes(shape: tuple[int, ...]) -> None:
    values = np.random.default_rng(9).standard_normal(shape)
    q, r = Tensor(values).qr("complete")
    expected_q, expected_r = np.linalg.qr(values, mode="complete")
    assert q.shape == (*shape[:-2], shape[-2], shape[-2]) and r.shape == shape
    np.testing.assert_allclose(q.numpy(), expected_q, atol=1e-9)
    np.testing.assert_allclose(r.numpy(), expected_r, atol=1e-9)


def test_rearrange_with_ellipsis_matches_numpy() -> None:
    values = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    x = Tensor(values)
    np.testing.assert_array_equal(x.rearrange("b ... c -> b c ...").numpy(), np.moveaxis(values, -1, 1))
    np.testing.assert_array_equal(x.rearrange("... h w -> ... (h w)").numpy(), values.reshape(2, 3, 20))
    np.testing.assert_array_equal(x.rearrange("b ... -> b (...)").numpy(), values.reshape(2, 60))
    np.testing.assert_array_equal(x.rearrange("… h w -> w h …").numpy(), values.transpose(3, 2, 0, 1))
    np.testing.assert_array_equal(x.rearrange("... -> ...").numpy(), values)
    np.testing.assert_array_equal(
        x.rearrange("b c (h 1) w -> b 1 c h w").numpy(), values.reshape(2, 1, 3, 4, 5)
    )  # einops' length-1 axes
    np.testing.assert_array_equal(
        x.rearrange("b c ... (w2 w1) -> b (c w1) ... w2", w1=5).numpy(),
        values.reshape(2, 3, 4, 1, 5).transpose(0, 1, 4, 2, 3).reshape(2, 15, 4, 1),
    )
    np.testing.assert_array_equal(Tensor(values[0, 0]).rearrange("a b ... -> b a ...").numpy(), values[0, 0].T)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(b ...) c -> b c", "inside parentheses"),
        ("... b ... -> b", "once on the left"),
        ("a b c d e ... -> a b c d e ...", "besides '...', the tensor has 4"),
        ("a b c d -> a b c d ...", "same dims once each"),
    ],
)
def test_rearrange_ellipsis_errors(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Tensor(np.zeros((2, 3, 4, 5))).rearrange(pattern)
