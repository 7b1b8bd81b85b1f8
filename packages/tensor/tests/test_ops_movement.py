"""Movement methods (reshape, expand, permute, flip, shrink, pad in every mode, cat, stack, split, chunk, repeat,
tril / triu, squeeze, flatten ...) against numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

DEVICE = "PYTHON"
Array = np.ndarray[Any, Any]


pytestmark = pytest.mark.default_device(DEVICE)


def _arange(*shape: int) -> Array:
    return np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)


def _assert_all(pairs: list[tuple[Tensor, Array]]) -> None:
    Tensor.realize_all(*(tensor for tensor, _ in pairs))
    for position, (tensor, expected) in enumerate(pairs):
        assert tensor.shape == expected.shape, f"case {position}: {tensor.shape} != {expected.shape}"
        np.testing.assert_array_equal(tensor.numpy(), expected, err_msg=f"case {position}")


def test_reshape_view_flatten_unflatten() -> None:
    a = _arange(2, 3, 4)
    x = Tensor(a)
    _assert_all(
        [
            (x.reshape(6, 4), a.reshape(6, 4)),
            (x.reshape(-1), a.reshape(-1)),
            (x.reshape((4, -1, 2)), a.reshape(4, -1, 2)),
            (x.view(3, 8), a.reshape(3, 8)),
            (x.flatten(), a.reshape(-1)),
            (x.flatten(1), a.reshape(2, 12)),
            (x.flatten(0, 1), a.reshape(6, 4)),
            (x.flatten(-2, -1), a.reshape(2, 12)),
            (x.unflatten(2, (2, 2)), a.reshape(2, 3, 2, 2)),
            (x.unflatten(-1, (-1, 1)), a.reshape(2, 3, 4, 1)),
            (Tensor(np.int32(5).reshape(1)).reshape(()).flatten(), np.array([5], np.int32)),
        ]
    )


def test_squeeze_unsqueeze() -> None:
    a = _arange(1, 3, 1, 2)
    x = Tensor(a)
    _assert_all(
        [
            (x.squeeze(), a.squeeze()),
            (x.squeeze(0), a.squeeze(0)),
            (x.squeeze(-2), a.squeeze(-2)),
            (x.squeeze((0, 2)), a.squeeze((0, 2))),
            (x.squeeze(1), a),  # a dim of another size is kept, like PyTorch
            (x.unsqueeze(0), a[None]),
            (x.unsqueeze(-1), a[..., None]),
            (x.unsqueeze(2), np.expand_dims(a, 2)),
        ]
    )


def test_expand_permute_transpose() -> None:
    a = _arange(3, 1)
    b = _arange(2, 3, 4)
    _assert_all(
        [
            (Tensor(a).expand(3, 4), np.broadcast_to(a, (3, 4))),
            (Tensor(a).expand(2, -1, 5), np.broadcast_to(a, (2, 3, 5))),
            (Tensor(a).broadcast_to((2, 3, 2)), np.broadcast_to(a, (2, 3, 2))),
            (Tensor(b).permute(2, 0, 1), b.transpose(2, 0, 1)),
            (Tensor(b).permute((-1, -3, -2)), b.transpose(2, 0, 1)),
            (Tensor(b).transpose(0, 2), b.swapaxes(0, 2)),
            (Tensor(b).transpose(-1, -2), b.swapaxes(-1, -2)),
            (Tensor(b).T, b.T),
            (Tensor(a).transpose(), a.T),
        ]
    )


def test_flip_and_shrink() -> None:
    a = _arange(3, 4, 5)
    x = Tensor(a)
    _assert_all(
        [
            (x.flip(0), a[::-1]),
            (x.flip(-1), a[..., ::-1]),
            (x.flip(0, 2), a[::-1, :, ::-1]),
            (x.flip((1, 2)), a[:, ::-1, ::-1]),
            (x.shrink(((1, 3), None, (0, 2))), a[1:3, :, 0:2]),
        ]
    )


PAD_CASES = [
    # (shape, torch-style flat padding)
    ((5,), (2, 1)),
    ((5,), (0, 4)),
    ((3, 4), (1, 2)),
    ((3, 4), (1, 2, 2, 0)),
    ((2, 3, 4), (1, 1, 0, 2, 1, 0)),
    ((2, 3, 4), (3, 0)),
]


def _numpy_pad_width(shape: tuple[int, ...], flat: tuple[int, ...]) -> list[tuple[int, int]]:
    width = [(0, 0)] * len(shape)
    for k in range(len(flat) // 2):
        width[len(shape) - 1 - k] = (flat[2 * k], flat[2 * k + 1])
    return width


@pytest.mark.parametrize(("shape", "padding"), PAD_CASES)
def test_pad_modes_match_numpy(shape: tuple[int, ...], padding: tuple[int, ...]) -> None:
    a = _arange(*shape)
    x = Tensor(a)
    width = _numpy_pad_width(shape, padding)
    pairs = [
        (x.pad(padding), np.pad(a, width)),
        (x.pad(padding, value=-7), np.pad(a, width, constant_values=-7)),
        (x.pad(padding, mode="replicate"), np.pad(a, width, mode="edge")),
        (x.pad(padding, mode="circular"), np.pad(a, width, mode="wrap")),
        (x.pad(tuple(width)), np.pad(a, width)),  # the per-dim form
    ]
    if all(before < size and after < size for (before, after), size in zip(width, shape)):
        pairs.append((x.pad(padding, mode="reflect"), np.pad(a, width, mode="reflect")))
    _assert_all(pairs)


def test_pad_negative_amounts_crop_and_float_values() -> None:
    a = _arange(4, 5).astype(np.float32)
    x = Tensor(a)
    _assert_all(
        [
            (x.pad((-1, 2)), np.pad(a[:, 1:], [(0, 0), (0, 2)])),
            (x.pad((1, -2, -1, 0)), np.pad(a[1:, :-2], [(0, 0), (1, 0)])),
            (x.pad(((1, 0), None), value=float("inf")), np.pad(a, [(1, 0), (0, 0)], constant_values=np.inf)),
            (Tensor(a > 5).pad((1, 1), value=True), np.pad(a > 5, [(0, 0), (1, 1)], constant_values=True)),
        ]
    )


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    data=st.data(),
)
def test_pad_property(shape: tuple[int, ...], data: st.DataObject) -> None:
    a = _arange(*shape)
    width = [(data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in shape]
    mode = data.draw(st.sampled_from(["constant", "replicate", "circular", "reflect"]))
    if mode == "circular":
        width = [(min(b, s), min(e, s)) for (b, e), s in zip(width, shape)]
    if mode == "reflect":
        width = [(min(b, s - 1), min(e, s - 1)) for (b, e), s in zip(width, shape)]
    numpy_mode: Any = {"constant": "constant", "replicate": "edge", "circular": "wrap", "reflect": "reflect"}[mode]
    np.testing.assert_array_equal(Tensor(a).pad(tuple(width), mode=mode).numpy(), np.pad(a, width, mode=numpy_mode))


def test_cat_and_stack() -> None:
    a, b, c = _arange(2, 3), _arange(4, 3) + 100, _arange(2, 5) - 50
    _assert_all(
        [
            (Tensor(a).cat(Tensor(b)), np.concatenate([a, b])),
            (Tensor.cat(Tensor(a), Tensor(c), dim=1), np.concatenate([a, c], axis=1)),
            (Tensor(a).cat(Tensor(c), Tensor(a), dim=-1), np.concatenate([a, c, a], axis=-1)),
            (Tensor(a).cat(Tensor(np.zeros((0, 3), np.int32)), Tensor(b)), np.concatenate([a, b])),
            (Tensor(a).cat(), a),
            (Tensor(a).stack(Tensor(a + 1)), np.stack([a, a + 1])),
            (Tensor.stack(Tensor(a), Tensor(a + 1), Tensor(a + 2), dim=1), np.stack([a, a + 1, a + 2], axis=1)),
            (Tensor(a).stack(Tensor(a), dim=-1), np.stack([a, a], axis=-1)),
            (Tensor(a > 2).cat(Tensor(b > 104)), np.concatenate([a > 2, b > 104])),
        ]
    )


def test_cat_promotes_dtypes() -> None:
    joined = Tensor([1, 2], dtype=dtypes.int8).cat(Tensor([0.5], dtype=dtypes.float16), Tensor([True]))
    assert joined.dtype is dtypes.float16
    assert joined.tolist() == [1.0, 2.0, 0.5, 1.0]
    assert Tensor(5).stack(Tensor(6)).tolist() == [5, 6]


def test_split_and_chunk() -> None:
    a = _arange(7, 2)
    x = Tensor(a)
    pieces = x.split(3)
    assert [piece.shape for piece in pieces] == [(3, 2), (3, 2), (1, 2)]
    sized = x.split([2, 5])
    columns = x.split(1, dim=1)
    chunks = x.chunk(3)
    assert [piece.shape for piece in chunks] == [(3, 2), (3, 2), (1, 2)]
    assert len(Tensor(_arange(6)).chunk(4)) == 3  # ceil(6 / 4) = 2 per chunk, like PyTorch
    pairs = [(p, e) for p, e in zip(pieces, np.split(a, [3, 6]))]
    pairs += [(p, e) for p, e in zip(sized, np.split(a, [2]))]
    pairs += [(p, e) for p, e in zip(columns, np.split(a, 2, axis=1))]
    _assert_all(pairs)


def test_repeat_matches_tile() -> None:
    a = _arange(2, 3)
    _assert_all(
        [
            (Tensor(a).repeat(2, 1), np.tile(a, (2, 1))),
            (Tensor(a).repeat(1, 3), np.tile(a, (1, 3))),
            (Tensor(a).repeat(2, 2, 2), np.tile(a, (2, 2, 2))),
            (Tensor(a).repeat((3, 1)), np.tile(a, (3, 1))),
            (Tensor([1, 2]).repeat(3), np.tile([1, 2], 3).astype(np.int32)),
        ]
    )
    assert Tensor(a).repeat(0, 1).shape == (0, 3)


@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1, 3])
def test_tril_triu(diagonal: int) -> None:
    square, wide, batch = _arange(4, 4), _arange(3, 5), _arange(2, 3, 4)
    _assert_all(
        [
            (Tensor(square).tril(diagonal), np.tril(square, diagonal)),
            (Tensor(wide).triu(diagonal), np.triu(wide, diagonal)),
            (Tensor(batch).tril(diagonal), np.tril(batch, diagonal)),
            (Tensor(batch > 5).triu(diagonal), np.triu(batch > 5, diagonal)),
        ]
    )


def test_movement_keeps_values_of_every_dtype() -> None:
    values = np.array([[1.5, -2.0], [3.25, 0.0]])
    for dtype in (dtypes.float16, dtypes.float64, dtypes.int64, dtypes.uint8, dtypes.bfloat16):
        x = Tensor(values.astype(np.float32)).cast(dtype)
        moved = x.T.flip(0).pad((1, 0)).reshape(-1)
        expected = np.pad(values.astype(np.float32).astype(np.float64).T[::-1], [(0, 0), (1, 0)]).reshape(-1)
        if dtype in (dtypes.int64, dtypes.uint8):
            expected = np.pad(values.astype(np.float32).T[::-1], [(0, 0), (1, 0)]).reshape(-1).astype(dtype.name)
        assert moved.dtype is dtype
        np.testing.assert_array_equal(moved.numpy().astype(np.float64), expected.astype(np.float64))


def test_contiguous_keeps_values() -> None:
    a = _arange(3, 4)
    x = Tensor(a).T.contiguous()
    np.testing.assert_array_equal(x.realize().numpy(), a.T)


def test_zero_size_movement() -> None:
    a = _arange(3, 4, 5)
    x = Tensor(a)
    pieces = x.split([2, 0, 1])
    _assert_all(
        [
            (x.shrink((None, (2, 2), None)), a[:, 2:2, :]),
            (pieces[1], a[2:2]),
            (Tensor(a).repeat(0, 1, 1), np.tile(a, (0, 1, 1))),
            (Tensor(np.zeros((0, 2), np.int32)).pad((1, 1)), np.zeros((0, 4), np.int32)),
        ]
    )
