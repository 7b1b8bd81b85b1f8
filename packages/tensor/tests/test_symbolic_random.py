"""Random and uninitialized creation with a shape of bound Variables (issue 37).

A random tensor of a symbolic shape draws the stream of its largest shape and keeps the leading part of each dim
(kiln.tensor.ops.random): values in range, the same values as the int shape at the variables' upper bounds, prefixes
consistent between two values of a variable, and one compile for every value."""

from __future__ import annotations

import numpy as np

from kiln.tensor import Tensor, Variable, dtypes
from kiln.tensor.realize.engine import Engine

N = Variable("n", 1, 10)
VALUES = (3, 7, 10, 1)


def _draw(value: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    Tensor.manual_seed(37)
    v = N.bind(value)
    uniform = Tensor.rand(v, 4).numpy()
    normal = Tensor.randn(3, v).numpy()
    integers = Tensor.randint(v, 2, low=-3, high=4).numpy()
    return uniform, normal, integers


def test_random_values_of_a_symbolic_shape_are_in_range_one_compile(engine: Engine) -> None:
    built = None
    for value in VALUES:
        uniform, normal, integers = _draw(value)
        assert uniform.shape == (value, 4) and normal.shape == (3, value) and integers.shape == (value, 2)
        assert uniform.dtype == np.float32 and ((uniform >= 0) & (uniform < 1)).all()
        assert np.isfinite(normal).all() and integers.dtype == np.int32
        assert ((integers >= -3) & (integers < 4)).all()
        if built is None:
            built = engine.programs_built
    assert engine.programs_built == built, "a new value of the variable compiled a new kernel"


def test_two_values_of_a_variable_draw_consistent_prefixes() -> None:
    small, large = _draw(3), _draw(7)
    np.testing.assert_array_equal(small[0], large[0][:3])  # rows of rand(n, 4)
    np.testing.assert_array_equal(small[1], large[1][:, :3])  # columns of randn(3, n)
    np.testing.assert_array_equal(small[2], large[2][:3])


def test_a_symbolic_shape_draws_the_stream_of_its_largest_shape() -> None:
    Tensor.manual_seed(37)
    largest = Tensor.rand(10, 4).numpy(), Tensor.randn(3, 10).numpy(), Tensor.randint(10, 2, low=-3, high=4).numpy()
    for value in (4, 10):
        drawn = _draw(value)
        np.testing.assert_array_equal(drawn[0], largest[0][:value])
        np.testing.assert_array_equal(drawn[1], largest[1][:, :value])
        np.testing.assert_array_equal(drawn[2], largest[2][:value])


def test_the_uniform_stream_of_a_symbolic_shape_is_not_constant() -> None:
    uniform = _draw(10)[0]
    assert len(np.unique(uniform)) == uniform.size
    assert 0.3 < uniform.mean() < 0.7


def test_empty_and_like_constructors_of_a_symbolic_tensor(engine: Engine) -> None:
    source = Tensor(np.arange(40, dtype=np.float32).reshape(10, 4)).realize()
    built = None
    for value in VALUES:
        rows = source[: N.bind(value)]
        assert Tensor.empty(N.bind(value), 4).numpy().shape == (value, 4)
        np.testing.assert_array_equal(Tensor.full_like(rows, 2.5).numpy(), np.full((value, 4), 2.5, np.float32))
        np.testing.assert_array_equal(Tensor.zeros_like(rows).numpy(), np.zeros((value, 4), np.float32))
        np.testing.assert_array_equal(rows.ones_like().numpy(), np.ones((value, 4), np.float32))
        np.testing.assert_array_equal(Tensor.zeros_like(rows, dtype=dtypes.int32).numpy(), np.zeros((value, 4)))
        Tensor.manual_seed(1)
        like = Tensor.rand_like(rows).numpy()
        assert like.shape == (value, 4) and ((like >= 0) & (like < 1)).all()
        assert Tensor.randn_like(rows).numpy().shape == (value, 4)
        integers = Tensor.randint_like(rows, 5).numpy()
        assert integers.shape == (value, 4) and ((integers >= 0) & (integers < 5)).all()
        if built is None:
            built = engine.programs_built
    assert engine.programs_built == built, "a new value of the variable compiled a new kernel"
