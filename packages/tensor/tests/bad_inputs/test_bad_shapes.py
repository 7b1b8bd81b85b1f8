"""Wrong shapes and dims for every shape-taking op: the error names the shapes / dims involved.

PyTorch raises RuntimeError for shape mismatches and IndexError for a dim out of range. kiln raises ShapeError (a
RuntimeError and a ValueError) when operands do not broadcast or multiply, ValueError for the other bad shape
arguments (reshape, expand, permute, cat, ...), and AxisError (a ValueError and an IndexError) for dims.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kiln.tensor import Tensor


def z(*shape: int) -> Tensor:
    return Tensor.zeros(*shape)


CASES: list[tuple[str, Callable[[], Any], type[Exception], list[str]]] = [
    ("add", lambda: z(3) + z(2), RuntimeError, ["(3,)", "(2,)"]),
    ("add_2d", lambda: z(2, 3) + z(3, 2), RuntimeError, ["(2, 3)", "(3, 2)"]),
    ("mul_3d", lambda: z(4, 1, 3) * z(2, 4), RuntimeError, ["(4, 1, 3)", "(2, 4)"]),
    ("sub", lambda: z(2) - z(3, 3), RuntimeError, ["(2,)", "(3, 3)"]),
    ("truediv", lambda: z(5) / z(4), RuntimeError, ["(5,)", "(4,)"]),
    ("pow", lambda: z(2) ** z(3), RuntimeError, ["(2,)", "(3,)"]),
    ("eq", lambda: z(2) == z(3), RuntimeError, ["(2,)", "(3,)"]),
    ("lt", lambda: z(2, 2) < z(3), RuntimeError, ["(2, 2)", "(3,)"]),
    ("maximum", lambda: z(2).maximum(z(3)), RuntimeError, ["(2,)", "(3,)"]),
    ("where", lambda: (z(3) > 0).where(z(2), z(3)), RuntimeError, ["(3,)", "(2,)"]),
    ("matmul", lambda: z(2, 3) @ z(2, 3), RuntimeError, ["(2, 3)"]),
    ("matmul_1d", lambda: z(3) @ z(4), RuntimeError, ["(3,)", "(4,)"]),
    ("matmul_0d", lambda: z() @ z(3), RuntimeError, ["()", "(3,)"]),
    ("matmul_batch", lambda: z(2, 2, 3) @ z(3, 3, 4), RuntimeError, ["(2, 2, 3)", "(3, 3, 4)"]),
    ("dot", lambda: z(3).dot(z(4)), RuntimeError, ["(3,)", "(4,)"]),
    ("linear", lambda: z(2, 3).matmul(z(4, 5)), RuntimeError, ["(2, 3)", "(4, 5)"]),
    ("cat", lambda: z(2, 3).cat(z(2, 4)), ValueError, ["(2, 3)", "(2, 4)"]),
    ("cat_ndim", lambda: z(2, 3).cat(z(3)), ValueError, ["(2, 3)", "(3,)"]),
    ("cat_dim", lambda: z(2).cat(z(2), dim=1), IndexError, ["1"]),
    ("stack", lambda: z(2).stack(z(3)), ValueError, ["(2,)", "(3,)"]),
    ("stack_dim", lambda: z(2).stack(z(2), dim=3), IndexError, ["3"]),
    ("reshape", lambda: z(6).reshape(4, 2), ValueError, ["(4, 2)", "6"]),
    ("reshape_two_inferred", lambda: z(6).reshape(-1, -1), ValueError, ["-1"]),
    ("reshape_negative", lambda: z(6).reshape(-2, 3), ValueError, ["-2"]),
    ("reshape_infer_zero", lambda: z(6).reshape(-1, 0), ValueError, ["0"]),
    ("view", lambda: z(6).view(7), ValueError, ["7", "6"]),
    ("expand", lambda: z(3).expand(4), ValueError, ["(3,)", "4"]),
    ("expand_fewer", lambda: z(2, 3).expand(3), ValueError, ["(2, 3)", "(3,)"]),
    ("permute_short", lambda: z(2, 3).permute(0), ValueError, ["(0,)", "2"]),
    ("permute_duplicate", lambda: z(2, 3).permute(0, 0), ValueError, ["(0, 0)"]),
    ("permute_range", lambda: z(2, 3).permute(0, 2), IndexError, ["2"]),
    ("transpose", lambda: z(2, 3).transpose(0, 2), IndexError, ["2", "(2, 3)"]),
    ("squeeze", lambda: z(2, 3).squeeze(2), IndexError, ["2"]),
    ("unsqueeze", lambda: z(2, 3).unsqueeze(4), IndexError, ["4"]),
    ("flatten", lambda: z(2, 3).flatten(1, 0), ValueError, ["1", "0"]),
    ("sum_dim", lambda: z(2, 3).sum(2), IndexError, ["2", "(2, 3)"]),
    ("sum_duplicate", lambda: z(2, 3).sum((0, 0)), ValueError, ["(0, 0)"]),
    ("mean_dim", lambda: z(2).mean(-2), IndexError, ["-2"]),
    ("max_dim", lambda: z(2, 2).max(dim=5), IndexError, ["5"]),
    ("argmax_dim", lambda: z(2, 2).argmax(2), IndexError, ["2"]),
    ("softmax_dim", lambda: z(2, 2).softmax(3), IndexError, ["3"]),
    ("flip_duplicate", lambda: z(2, 3).flip((0, 0)), ValueError, ["0"]),
    ("repeat_fewer", lambda: z(2, 3).repeat(2), ValueError, ["(2,)", "(2, 3)"]),
    ("chunk_zero", lambda: z(4).chunk(0), ValueError, ["0"]),
    ("split_zero", lambda: z(4).split(0), ValueError, ["0"]),
    ("pad_too_negative", lambda: z(3).pad((-4, 0)), ValueError, ["-4"]),
    ("max_empty", lambda: z(0).max(), RuntimeError, ["(0,)"]),
    ("argmax_empty", lambda: z(0, 3).argmax(0), IndexError, ["(0, 3)"]),
]


@pytest.mark.parametrize(("name", "run", "error", "words"), CASES, ids=[case[0] for case in CASES])
def test_bad_shapes_raise_naming_them(
    name: str, run: Callable[[], Any], error: type[Exception], words: list[str]
) -> None:
    with pytest.raises(error) as info:
        run()
    message = str(info.value)
    missing = [word for word in words if word not in message]
    assert not missing, f"{name}: message {message!r} does not name {missing}"


@pytest.mark.parametrize(
    ("run", "shape"),
    [
        (lambda: z(0, 3) + z(1, 3), (0, 3)),
        (lambda: z(0, 3).sum(0), (3,)),
        (lambda: z(0, 3) @ z(3, 2), (0, 2)),
        (lambda: z(2, 0) @ z(0, 3), (2, 3)),
        (lambda: z(0).reshape(0, 5), (0, 5)),
        (lambda: z(0, 2).cat(z(3, 2)), (3, 2)),
        (lambda: z(3)[3:], (0,)),
        (lambda: z(2, 3)[:, 5:], (2, 0)),
    ],
)
def test_empty_tensors_follow_numpy_shapes(run: Callable[[], Tensor], shape: tuple[int, ...]) -> None:
    result = run()
    assert result.shape == shape and result.numpy().shape == shape


def test_empty_matmul_is_zeros_like_numpy() -> None:
    assert (z(2, 0) @ z(0, 3)).tolist() == [[0.0] * 3] * 2
    assert z(0, 3).sum(0).tolist() == [0.0, 0.0, 0.0]
