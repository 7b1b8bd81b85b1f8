"""The weight initialisers: shape, dtype, support and the first two moments against the exact distribution.

Each distribution's parameter is written here from the formula (tinygrad's for its names, PyTorch's xavier_*), not
read back from the implementation. Moments must lie within 5 standard errors of the exact ones: the standard error of
the mean is sqrt(var / n); that of the sample variance is sqrt((mu4 - var^2) / n), with mu4 = b^4 / 5 for U(-b, b)
and 3 * std^4 for N(0, std). Seeds are fixed, so the draws are reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.uops import dtypes

SHAPE = (64, 16, 3, 3)  # out, in, kernel: 9216 values
FAN_IN = 16 * 9

UNIFORM: list[tuple[str, Callable[[], Tensor], float]] = [
    ("scaled_uniform", lambda: Tensor.scaled_uniform(*SHAPE), 1.0 / math.sqrt(64 * 16 * 9)),
    ("glorot_uniform", lambda: Tensor.glorot_uniform(*SHAPE), math.sqrt(6.0 / (64 + FAN_IN))),
    (
        "kaiming_uniform",
        lambda: Tensor.kaiming_uniform(*SHAPE),
        math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.01**2)) / math.sqrt(FAN_IN),
    ),
    (
        "kaiming_uniform_a",
        lambda: Tensor.kaiming_uniform(SHAPE, a=math.sqrt(5)),
        math.sqrt(3.0) * math.sqrt(2.0 / 6.0) / math.sqrt(FAN_IN),
    ),
    ("xavier_uniform", lambda: Tensor.xavier_uniform(*SHAPE, gain=2.0), 2.0 * math.sqrt(6.0 / (FAN_IN + 64 * 9))),
]
NORMAL: list[tuple[str, Callable[[], Tensor], float]] = [
    ("kaiming_normal", lambda: Tensor.kaiming_normal(*SHAPE), math.sqrt(2.0 / (1 + 0.01**2)) / math.sqrt(FAN_IN)),
    ("kaiming_normal_a", lambda: Tensor.kaiming_normal(*SHAPE, a=0.2), math.sqrt(2.0 / 1.04) / math.sqrt(FAN_IN)),
    ("xavier_normal", lambda: Tensor.xavier_normal(*SHAPE), math.sqrt(2.0 / (FAN_IN + 64 * 9))),
]


def _check_moments(values: np.ndarray, variance: float, fourth_moment: float) -> None:
    count = values.size
    mean = float(values.astype(np.float64).mean())
    sample_variance = float(values.astype(np.float64).var())
    assert abs(mean) <= 5 * math.sqrt(variance / count), (mean, variance)
    spread = math.sqrt((fourth_moment - variance**2) / count)
    assert abs(sample_variance - variance) <= 5 * spread, (sample_variance, variance)


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize(("name", "draw", "bound"), UNIFORM, ids=[case[0] for case in UNIFORM])
def test_uniform_initialisers(name: str, draw: Callable[[], Tensor], bound: float, seed: int) -> None:
    Tensor.manual_seed(seed)
    weight = draw()
    assert weight.shape == SHAPE and weight.dtype == dtypes.float32
    values = weight.numpy()
    assert values.min() >= -bound and values.max() <= bound
    # not a narrower distribution: the extremes reach near both ends
    assert values.min() < -0.99 * bound and values.max() > 0.99 * bound
    _check_moments(values, bound**2 / 3, bound**4 / 5)


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize(("name", "draw", "std"), NORMAL, ids=[case[0] for case in NORMAL])
def test_normal_initialisers(name: str, draw: Callable[[], Tensor], std: float, seed: int) -> None:
    Tensor.manual_seed(seed)
    weight = draw()
    assert weight.shape == SHAPE and weight.dtype == dtypes.float32
    _check_moments(weight.numpy(), std**2, 3 * std**4)


def test_initialiser_dtype_device_and_grad() -> None:
    weight = Tensor.kaiming_uniform(4, 3, dtype=dtypes.float64, requires_grad=True)
    assert weight.dtype == dtypes.float64 and weight.requires_grad and weight.shape == (4, 3)
    assert Tensor.glorot_uniform((5,)).shape == (5,)


def test_initialiser_errors() -> None:
    with pytest.raises(ValueError, match=r"xavier_uniform needs a shape with at least 2 dims .* got \(5,\)"):
        Tensor.xavier_uniform(5)
    with pytest.raises(ValueError, match=r"kaiming_normal needs a non-empty fan, got shape \(4, 0\)"):
        Tensor.kaiming_normal(4, 0)
    with pytest.raises(ValueError, match=r"scaled_uniform needs a non-empty fan, got shape \(2, 0\)"):
        Tensor.scaled_uniform(2, 0)
    with pytest.raises(TypeError, match="kaiming_uniform a must be a number, got 'x'"):
        Tensor.kaiming_uniform(3, 3, a="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"scaled_uniform shape must not have negative sizes, got \(-1,\)"):
        Tensor.scaled_uniform(-1)
