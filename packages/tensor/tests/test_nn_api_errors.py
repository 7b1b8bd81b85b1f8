"""Bad arguments to the nn functions raise PyTorch's exception class at the call, naming the bad value; and the few
behaviours the recorded torch cases cannot pin (random dropout in attention, exact hand-computed padding layouts).

PyTorch's classes: a mode or reduction typo is a ValueError, a dim out of range an IndexError, a wrong argument type
a TypeError.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.uops import dtypes

X3 = Tensor.zeros(1, 2, 6)
X4 = Tensor.zeros(1, 2, 6, 6)
LOGITS = Tensor.zeros(3, 4)
CLASSES = Tensor([0, 1, 2])

ERRORS: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("interpolate mode typo", lambda: X4.interpolate(size=3, mode="bicubc"), ValueError, r"got 'bicubc'"),
    ("interpolate bicubic 1-d", lambda: X3.interpolate(size=3, mode="bicubic"), ValueError, r"needs 2 spatial dims"),
    ("pad mode typo", lambda: X3.pad((1, 1), mode="reflection"), ValueError, r"got 'reflection'"),
    ("pad crop too much", lambda: X3.pad((-4, -3)), ValueError, r"crop more than the shape"),
    ("loss reduction typo", lambda: LOGITS.cross_entropy(CLASSES, reduction="avg"), ValueError, r"got 'avg'"),
    (
        "hinge reduction typo",
        lambda: LOGITS.hinge_embedding_loss(LOGITS, reduction="mena"),
        ValueError,
        r"hinge_embedding_loss reduction must be one of .* got 'mena'",
    ),
    ("cosine dim range", lambda: LOGITS.cosine_similarity(LOGITS, dim=2), IndexError, r"dim 2 is out of range"),
    ("cosine dim type", lambda: LOGITS.cosine_similarity(LOGITS, dim=1.0), TypeError, r"got 1.0"),
    ("cosine x2 type", lambda: LOGITS.cosine_similarity([1.0]), TypeError, r"x2 must be a Tensor, got list"),
    ("pairwise p negative", lambda: LOGITS.pairwise_distance(LOGITS, p=-1), ValueError, r"p must be non-negative"),
    (
        "sparse cce float target",
        lambda: LOGITS.sparse_categorical_crossentropy(Tensor([0.0, 1.0, 2.0])),
        TypeError,
        r"Y must hold integer class indices, got .*float32",
    ),
    ("margin type", lambda: LOGITS.margin_ranking_loss(LOGITS, LOGITS, margin="1"), TypeError, r"got '1'"),
    (
        "conv padding string",
        lambda: X4.conv2d(Tensor.zeros(1, 2, 3, 3), padding="full"),
        ValueError,
        r"'same' or 'valid', got 'full'",
    ),
    (
        "conv padding count",
        lambda: X4.conv2d(Tensor.zeros(1, 2, 3, 3), padding=(1, 2, 3)),
        ValueError,
        r"needs 1, 2 .* or 4 .* got \(1, 2, 3\)",
    ),
    ("conv padding type", lambda: X4.conv2d(Tensor.zeros(1, 2, 3, 3), padding=1.5), TypeError, r"got 1.5"),
    ("pool kernel type", lambda: X4.max_pool2d(2.0), TypeError, r"kernel_size must be an int, got 2.0"),
    ("avg pool int dtype", lambda: X4.int().avg_pool2d(2), TypeError, r"needs a floating-point tensor"),
    ("lp_pool zero norm", lambda: X4.lp_pool2d(0, 2), ValueError, r"norm_type must be a non-zero number, got 0"),
    ("adaptive size type", lambda: X4.adaptive_avg_pool2d(2.5), TypeError, r"output_size must be an int, got 2.5"),
    ("adaptive size count", lambda: X4.adaptive_max_pool2d((1, 2, 3)), ValueError, r"needs 1 or 2 values"),
    ("adaptive input dims", lambda: X3.adaptive_avg_pool3d(1), ValueError, r"must have 5 dims"),
    (
        "unpool index dtype",
        lambda: X4.max_unpool2d(Tensor.zeros(1, 2, 6, 6), 2),
        TypeError,
        r"indices must be an integer tensor",
    ),
    (
        "unpool index shape",
        lambda: X4.max_unpool2d(Tensor.zeros(1, 2, 6, 5, dtype=dtypes.int32), 2),
        ValueError,
        r"indices shape \(1, 2, 6, 5\) must equal the input shape \(1, 2, 6, 6\)",
    ),
    (
        "unpool output size",
        lambda: X4.max_unpool2d(Tensor.zeros(1, 2, 6, 6, dtype=dtypes.int32), 2, output_size=(14, 12)),
        ValueError,
        r"output_size \(14, 12\) must lie strictly between \(10, 10\) and \(14, 14\)",
    ),
    ("initialiser gain type", lambda: Tensor.xavier_normal(3, 3, gain=None), TypeError, r"gain must be a number"),
    ("sdpa dropout", lambda: X4.scaled_dot_product_attention(X4, X4, dropout_p=2), ValueError, r"got 2"),
]


@pytest.mark.parametrize(("what", "call", "error", "message"), ERRORS, ids=[case[0] for case in ERRORS])
def test_bad_arguments(what: str, call: Callable[[], Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_asymmetric_padding_layout() -> None:
    # tinygrad's flat (left, right, top, bottom): a 1x1 kernel of 1 shows where the zeros went
    x = Tensor(np.arange(1.0, 7.0, dtype=np.float32).reshape(1, 1, 2, 3))
    out = x.conv2d(Tensor.ones(1, 1, 1, 1), padding=(1, 0, 0, 1)).numpy()[0, 0]
    np.testing.assert_array_equal(out, [[0, 1, 2, 3], [0, 4, 5, 6], [0, 0, 0, 0]])
    cropped = x.conv2d(Tensor.ones(1, 1, 1, 1), padding=(-1, 0, 0, -1)).numpy()[0, 0]
    np.testing.assert_array_equal(cropped, [[2, 3]])
    pooled = x.max_pool2d((1, 1), padding=(0, 0, 1, 0)).numpy()[0, 0]
    np.testing.assert_array_equal(pooled, [[-np.inf, -np.inf, -np.inf], [1, 2, 3], [4, 5, 6]])


def test_attention_dropout_keeps_the_mean() -> None:
    # uniform weights 1/S over ones: each output is (kept count) / (S (1 - p)), mean 1, variance p / ((1 - p) S)
    Tensor.manual_seed(3)
    rows, keys, p = 4096, 8, 0.25
    query = Tensor.zeros(rows, 4)
    key = Tensor.zeros(keys, 4)
    value = Tensor.ones(keys, 1)
    out = query.scaled_dot_product_attention(key, value, dropout_p=p).numpy()[:, 0]
    standard_error = math.sqrt(p / ((1 - p) * keys) / rows)
    assert abs(float(out.mean()) - 1.0) <= 5 * standard_error
    assert float(out.var()) == pytest.approx(p / ((1 - p) * keys), rel=0.15)
    # every output is a multiple of 1 / (S (1 - p)): whole weights are dropped, not scaled at random
    steps = out * keys * (1 - p)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-4)


def test_nan_is_the_window_maximum() -> None:
    # torch 2.13 on this input: adaptive (nan, 5) at (1, 4); max_pool1d(2) (nan, 3) at (1, 2)
    x = Tensor([[[1.0, math.nan, 3.0, 2.0, 5.0]]])
    values, indices = x.adaptive_max_pool1d(2, return_indices=True)
    np.testing.assert_array_equal(values.numpy(), [[[np.nan, 5.0]]])
    assert indices.tolist() == [[[1, 4]]]
    values, indices = x.max_pool1d(2, return_indices=True)
    np.testing.assert_array_equal(values.numpy(), [[[np.nan, 3.0]]])
    assert indices.tolist() == [[[1, 2]]]
