"""Out-of-range index tensors and zero divisors: IndexError / RuntimeError naming the bad value with CHECK on (the
test suite's default, like PyTorch's messages), the documented safe result with CHECK off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes
from kiln.tensor.ops.elementwise import IntegerDivisionByZero
from kiln.uops import Context


def _setitem(index: Any, value: Any = 9) -> Callable[[], Tensor]:
    def run() -> Tensor:
        x = Tensor([1, 2, 3]).contiguous().realize()
        x[index] = value
        return x

    return run


CHECKED: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("getitem", lambda: Tensor([1, 2, 3])[Tensor([10])], IndexError, "index 10 is out of bounds for dimension 0"),
    ("getitem_negative", lambda: Tensor([1, 2, 3])[Tensor([-4])], IndexError, "index -4 is out of bounds"),
    ("getitem_2d", lambda: Tensor.zeros(2, 3)[:, Tensor([0, 3])], IndexError, "index 3 .* dimension 1 with size 3"),
    ("getitem_two", lambda: Tensor.zeros(2, 3)[Tensor([2]), Tensor([0])], IndexError, "index 2 .* size 2"),
    ("getitem_int64", lambda: Tensor([1, 2])[Tensor([2**32], dtype=dtypes.int64)], IndexError, "4294967296"),
    ("setitem", _setitem(Tensor([10])), IndexError, "index 10 is out of bounds for dimension 0 with size 3"),
    ("setitem_negative", _setitem(Tensor([-5])), IndexError, "index -5"),
    ("gather", lambda: Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 2], [1, 0]])), RuntimeError, "index 2 .*dim"),
    ("gather_negative", lambda: Tensor([1, 2]).gather(0, Tensor([-1])), RuntimeError, "index -1"),
    ("scatter", lambda: Tensor.zeros(3).scatter(0, Tensor([5]), 1.0), RuntimeError, "index 5"),
    ("scatter_add", lambda: Tensor.zeros(3).scatter_add(0, Tensor([3]), Tensor([1.0])), RuntimeError, "index 3"),
    ("one_hot", lambda: Tensor([0, 5]).one_hot(3), RuntimeError, "index 5"),
    ("one_hot_negative", lambda: Tensor([0, -1]).one_hot(3), RuntimeError, "index -1"),
    ("cross_entropy", lambda: Tensor.zeros(2, 3).cross_entropy(Tensor([0, 3])), IndexError, "index 3"),
    ("nll_loss", lambda: Tensor.zeros(2, 3).nll_loss(Tensor([-2, 0])), IndexError, "index -2"),
    ("floor_divide", lambda: Tensor([7, 1]) // Tensor([1, 0]), IntegerDivisionByZero, r"position \(1,\)"),
    ("remainder", lambda: Tensor([7, 1]) % Tensor([0, 1]), IntegerDivisionByZero, r"position \(0,\)"),
    ("div_trunc", lambda: Tensor([[7]]).div(Tensor([[0]]), rounding_mode="trunc"), IntegerDivisionByZero, "zero"),
    ("rfloordiv", lambda: 5 // Tensor([0, 1]), IntegerDivisionByZero, "zero"),
]


@pytest.mark.parametrize(("name", "run", "error", "words"), CHECKED, ids=[case[0] for case in CHECKED])
def test_checked_mode_raises_naming_the_bad_value(
    name: str, run: Callable[[], Any], error: type[Exception], words: str
) -> None:
    with Context(CHECK=True), pytest.raises(error, match=words):
        run()


UNCHECKED: list[tuple[str, Callable[[], Tensor], Any]] = [
    # an out-of-range index selects nothing: reads 0, writes nothing (the README's rule)
    ("getitem", lambda: Tensor([1, 2, 3])[Tensor([10, -1, -4])], [0, 3, 0]),
    ("getitem_int64_no_wrap", lambda: Tensor([1, 2])[Tensor([2**32 + 1], dtype=dtypes.int64)], [0]),
    ("setitem", _setitem(Tensor([10])), [1, 2, 3]),
    ("setitem_mixed", _setitem(Tensor([10, 1])), [1, 9, 3]),
    ("setitem_negative", _setitem(Tensor([-4, -1])), [1, 2, 9]),
    ("gather", lambda: Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 2], [1, 0]])), [[1, 0], [4, 3]]),
    ("scatter", lambda: Tensor.zeros(3).scatter(0, Tensor([5, 1]), Tensor([1.0, 2.0])), [0.0, 2.0, 0.0]),
    ("one_hot", lambda: Tensor([0, 5]).one_hot(3), [[1, 0, 0], [0, 0, 0]]),
    # integer division by a zero in a tensor gives 0, numpy's result
    ("floor_divide", lambda: Tensor([7, -7, 5]) // Tensor([0, 2, 0]), [0, -4, 0]),
    ("remainder", lambda: Tensor([7, -7, 5]) % Tensor([0, 2, 0]), [0, 1, 0]),
    ("div_trunc", lambda: Tensor([7, -7]).div(Tensor([0, 2]), rounding_mode="trunc"), [0, -3]),
    ("uint_floor_divide", lambda: Tensor([7, 8], dtype=dtypes.uint8) // Tensor([0, 3], dtype=dtypes.uint8), [0, 2]),
]


@pytest.mark.parametrize(("name", "run", "expected"), UNCHECKED, ids=[case[0] for case in UNCHECKED])
def test_unchecked_default_is_safe_and_documented(name: str, run: Callable[[], Tensor], expected: Any) -> None:
    with Context(CHECK=False):
        assert run().tolist() == expected


@pytest.mark.parametrize(
    ("dividend", "divisor"),
    [([7, -7, 5, 0], [0, 2, 0, 0]), ([-(2**31), 9], [0, -2])],
)
def test_unchecked_integer_division_by_zero_matches_numpy(dividend: list[int], divisor: list[int]) -> None:
    a, b = np.array(dividend, np.int32), np.array(divisor, np.int32)
    with np.errstate(all="ignore"), Context(CHECK=False):
        assert (Tensor(dividend) // Tensor(divisor)).tolist() == (a // b).tolist()
        assert (Tensor(dividend) % Tensor(divisor)).tolist() == (a % b).tolist()


def test_in_range_indices_pass_the_check() -> None:
    with Context(CHECK=True):
        assert Tensor([1, 2, 3])[Tensor([-3, 2])].tolist() == [1, 3]
        assert Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[1], [0]])).tolist() == [[2], [3]]
        assert Tensor.zeros(2, 3).cross_entropy(Tensor([2, -100])).item() == pytest.approx(np.log(3))


@pytest.mark.parametrize(
    ("index", "error", "words"),
    [
        (3, IndexError, "3"),
        (-4, IndexError, "-4"),
        ([0, 5], IndexError, "5"),
        (np.array([7]), IndexError, "7"),
        ((0, 0), IndexError, "2"),
        (1.5, TypeError, "float"),
        ("a", TypeError, "str"),
        (Tensor([0.5]), IndexError, "float32"),
        ([True, False], IndexError, "2"),
    ],
)
def test_bad_literal_indices_always_raise(index: Any, error: type[Exception], words: str) -> None:
    with Context(CHECK=False), pytest.raises(error, match=words):
        Tensor([1, 2, 3])[index]


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda x: x.gather(2, Tensor([[0]])), IndexError, "2"),
        (lambda x: x.gather(0, Tensor([0])), ValueError, r"\(1,\)"),
        (lambda x: x.gather(0, Tensor([[0.0]])), TypeError, "float32"),
        (lambda x: x.gather(0, [[0]]), TypeError, "list"),
        (lambda x: x.scatter(0, Tensor([[0]]), 1.0, reduce="max"), ValueError, "max"),
        (lambda x: x[0, 0, 0], IndexError, "3"),
    ],
)
def test_bad_gather_scatter_arguments(call: Callable[[Tensor], Any], error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        call(Tensor.zeros(2, 2))
