"""matmul / @ / dot / linear / einsum (kiln.tensor.ops.linalg) against numpy's matmul and einsum, plus the errors
they raise at the call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor.counters import GlobalCounters
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(1234)


pytestmark = pytest.mark.default_device("PYTHON")


def _random(shape: tuple[int, ...], dtype: Any = np.float32) -> Array:
    return RNG.standard_normal(shape).astype(dtype)


def _tolerance(dtype: Any) -> dict[str, float]:
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((4,), (4,)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((2, 1, 3, 4), (5, 4, 2)),  # batch dims broadcast: (2, 1) with (5,)
    ((2, 3, 4), (4,)),
    ((3,), (2, 3, 4)),
    ((0, 4), (4, 3)),
    ((3, 0), (0, 2)),  # empty inner dim: zeros
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("left_shape", "right_shape"), MATMUL_SHAPES)
def test_matmul_matches_numpy(left_shape: tuple[int, ...], right_shape: tuple[int, ...], dtype: Any) -> None:
    left, right = _random(left_shape, dtype), _random(right_shape, dtype)
    result = Tensor(left) @ Tensor(right)
    expected = left @ right
    assert result.shape == expected.shape
    assert result.dtype == (dtypes.float32 if dtype == np.float32 else dtypes.float64)
    if expected.size:  # an empty result is all shape
        np.testing.assert_allclose(result.numpy(), expected, **_tolerance(dtype))


def test_matmul_integers_are_exact_and_keep_their_dtype() -> None:
    left = RNG.integers(-50, 50, (3, 5)).astype(np.int32)
    right = RNG.integers(-50, 50, (5, 2)).astype(np.int32)
    result = Tensor(left).matmul(Tensor(right))
    assert result.dtype == dtypes.int32
    np.testing.assert_array_equal(result.numpy(), left @ right)


def test_matmul_promotes_mixed_dtypes() -> None:
    left = RNG.integers(-5, 5, (2, 3)).astype(np.int32)
    right = _random((3, 2), np.float64)
    result = Tensor(left) @ Tensor(right)
    assert result.dtype == dtypes.float64
    np.testing.assert_allclose(result.numpy(), left @ right, rtol=1e-12)


def test_rmatmul_converts_the_left_operand() -> None:
    right = _random((2, 3))
    result = [[1.0, 2.0]] @ Tensor(right)
    np.testing.assert_allclose(result.numpy(), np.array([[1.0, 2.0]], dtype=np.float32) @ right, rtol=1e-6)


def test_matmul_with_bias_and_relu_is_one_kernel() -> None:
    x, w, b = Tensor(_random((4, 6))).realize(), Tensor(_random((6, 3))).realize(), Tensor(_random((3,))).realize()
    GlobalCounters.reset()
    result = (x @ w + b).relu().realize()
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_allclose(result.numpy(), np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0), rtol=1e-5, atol=1e-6)


def test_dot() -> None:
    left, right = _random((7,), np.float64), _random((7,), np.float64)
    result = Tensor(left).dot(Tensor(right))
    assert result.shape == ()
    assert result.item() == pytest.approx(float(left @ right), rel=1e-12)
    assert Tensor([1, 2, 3]).dot(Tensor([4, 5, 6])).item() == 32


@pytest.mark.parametrize("weight_shape", [(3, 4), (4,)])
def test_linear(weight_shape: tuple[int, ...]) -> None:
    x, weight = _random((2, 5, 4)), _random(weight_shape)
    bias = _random(weight_shape[:1]) if len(weight_shape) == 2 else None
    result = Tensor(x).linear(Tensor(weight), Tensor(bias) if bias is not None else None)
    expected = x @ weight.T + (bias if bias is not None else 0)
    assert result.shape == expected.shape
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 2)]),
    ("ij,jk", [(3, 4), (4, 2)]),  # implicit output
    ("ba", [(2, 3)]),  # implicit output sorts the letters: a transpose
    ("ii", [(4, 4)]),  # trace
    ("ii->i", [(4, 4)]),  # diagonal
    ("iij->ji", [(3, 3, 2)]),
    ("bii->b", [(2, 3, 3)]),
    ("ij->", [(3, 4)]),
    ("i,j->ij", [(3,), (2,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ij,jk", [(2, 3, 4), (4, 2)]),
    ("i...->...", [(3, 2, 2)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("Ab,bC->AC", [(2, 3), (3, 4)]),
    ("i j , j k -> i k", [(2, 3), (3, 2)]),
    ("ij,jk->ik", [(0, 3), (3, 2)]),
    ("ij,j->i", [(2, 1), (3,)]),  # size-1 dims broadcast within a subscript
]


@pytest.mark.parametrize(("formula", "shapes"), EINSUM_CASES)
def test_einsum_matches_numpy(formula: str, shapes: list[tuple[int, ...]]) -> None:
    operands = [_random(shape, np.float64) for shape in shapes]
    result = Tensor.einsum(formula, *[Tensor(operand) for operand in operands])
    if formula == "ij,j->i":  # numpy refuses to broadcast a subscript's size-1 dim; PyTorch allows it
        expected = (operands[0] * operands[1]).sum(1)
    else:
        expected = np.einsum(formula.replace(" ", ""), *operands)
    assert result.shape == expected.shape
    if expected.size:  # an empty result is all shape
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_einsum_accepts_a_list_of_operands_and_sums_dropped_ellipsis_dims() -> None:
    a = _random((2, 3, 4), np.float64)
    result = Tensor.einsum("i...->i", [Tensor(a)])  # PyTorch sums the ellipsis dims the output leaves out
    np.testing.assert_allclose(result.numpy(), a.sum((1, 2)), rtol=1e-12)


def test_einsum_float32_and_integers() -> None:
    a, b = _random((3, 4)), _random((4, 5))
    np.testing.assert_allclose(
        Tensor.einsum("ij,jk->ki", Tensor(a), Tensor(b)).numpy(), (a @ b).T, rtol=1e-5, atol=1e-5
    )
    ints = RNG.integers(-9, 9, (3, 3)).astype(np.int64)
    result = Tensor.einsum("ij,jk->ik", Tensor(ints), Tensor(ints))
    assert result.dtype == dtypes.int64
    np.testing.assert_array_equal(result.numpy(), ints @ ints)


# ---------------------------------------------------------------------------------------------------------------
# errors at the call
# ---------------------------------------------------------------------------------------------------------------


def test_matmul_inner_dim_mismatch_names_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"matmul: shapes \(2, 3\) and \(4, 5\) do not line up.*\(3\).*\(4\)"):
        Tensor.zeros(2, 3) @ Tensor.zeros(4, 5)


def test_matmul_vector_mismatch() -> None:
    with pytest.raises(ValueError, match=r"shapes \(3,\) and \(4,\)"):
        Tensor.zeros(3) @ Tensor.zeros(4)


def test_matmul_batch_dims_must_broadcast() -> None:
    with pytest.raises(ValueError, match=r"batch dims of shapes \(2, 3, 4\) and \(3, 4, 5\) do not broadcast"):
        Tensor.zeros(2, 3, 4) @ Tensor.zeros(3, 4, 5)


def test_matmul_rejects_0_dim_operands() -> None:
    with pytest.raises(ValueError, match=r"at least 1 dim, got shapes \(\) and \(3,\)"):
        Tensor(2.0) @ Tensor.zeros(3)


def test_matmul_rejects_bools_and_non_tensors() -> None:
    with pytest.raises(TypeError, match="matmul is not defined for bool tensors"):
        Tensor([[True]]) @ Tensor([[False]])
    with pytest.raises(TypeError, match="matmul takes Tensors, got list"):
        Tensor.zeros(2, 2).matmul([[1.0, 2.0]])  # type: ignore[arg-type]


def test_dot_of_vectors_needs_one_length_and_of_matrices_is_matmul() -> None:
    with pytest.raises(ValueError, match=r"got shapes \(3,\) and \(2,\)"):
        Tensor.zeros(3).dot(Tensor.zeros(2))
    # tinygrad's N-d dot: matmul semantics
    left = np.arange(6, dtype=np.float32).reshape(2, 3)
    right = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(Tensor(left).dot(Tensor(right)).numpy(), left @ right)
    np.testing.assert_array_equal(Tensor(left).dot(Tensor(left.T)).numpy(), left @ left.T)


def test_linear_checks_weight_and_bias() -> None:
    with pytest.raises(
        ValueError, match=r"linear weight must be \(out_features, in_features\) or 1-D, got shape \(1, 2, 3\)"
    ):
        Tensor.zeros(2, 3).linear(Tensor.zeros(1, 2, 3))
    with pytest.raises(ValueError, match=r"input shape \(2, 3\) must end with in_features = 4"):
        Tensor.zeros(2, 3).linear(Tensor.zeros(5, 4))
    with pytest.raises(ValueError, match=r"linear bias of shape \(4,\) does not broadcast to the output \(2, 5\)"):
        Tensor.zeros(2, 3).linear(Tensor.zeros(5, 3), Tensor.zeros(4))


@pytest.mark.parametrize(
    ("formula", "shapes", "message"),
    [
        ("ij,jk->ik", [(2, 3)], r"has 2 operand terms but 1 operands were given"),
        ("ij->ik", [(2, 3)], r"output letter 'k' does not appear in any operand"),
        ("ij->ii", [(2, 2)], r"output letter 'i' appears more than once"),
        ("ijk->i", [(2, 3)], r"term 'ijk' names 3 dims but its operand has shape \(2, 3\)"),
        ("i->i", [(2, 3)], r"term 'i' names 1 dims but its operand has shape \(2, 3\)"),
        ("ij,jk->ik", [(2, 3), (4, 5)], r"subscript 'j' has size 3 in one operand and 4 in another"),
        ("ii->i", [(2, 3)], r"repeated subscript 'i' needs equal dims, got sizes 2 and 3"),
        ("i1->i", [(2, 3)], r"subscripts must be letters a-z / A-Z or '...', got '1'"),
        ("i->j->k", [(2,)], r"at most one '->' is allowed"),
        ("......->", [(2,)], r"may hold one '...' and no other '.'"),
        ("i.j->i", [(2, 3)], r"may hold one '...' and no other '.'"),
    ],
)
def test_einsum_bad_formulas(formula: str, shapes: list[tuple[int, ...]], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        Tensor.einsum(formula, *[Tensor.zeros(*shape) for shape in shapes])
    assert repr(formula) in str(caught.value) or "operands were given" in str(caught.value)


def test_einsum_argument_types() -> None:
    with pytest.raises(TypeError, match="einsum formula must be a str"):
        Tensor.einsum(3, Tensor.zeros(2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="einsum operands must be Tensors, got ndarray at position 0"):
        Tensor.einsum("i->i", np.zeros(2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="einsum needs at least one operand"):
        Tensor.einsum("->")
    with pytest.raises(TypeError, match="einsum is not defined for bool tensors"):
        Tensor.einsum("i->i", Tensor([True]))


@pytest.mark.parametrize(("rows", "inner", "columns"), [(64, 1024, 512), (70, 1024, 1000), (96, 4096, 130)])
def test_a_large_matmul_copies_its_right_operand_into_panels(rows: int, inner: int, columns: int) -> None:
    # from PACKED_MINIMUM_ELEMENTS the right operand is first copied into contiguous column panels (zero-filled up
    # to a whole panel): two kernels, numpy's product, and the gradient of both operands through the copy
    from kiln.tensor.ops.linalg import PACKED_MINIMUM_ELEMENTS, PACKED_MINIMUM_ROWS

    assert inner * columns >= PACKED_MINIMUM_ELEMENTS and rows >= PACKED_MINIMUM_ROWS
    generator = np.random.default_rng(rows + columns)
    a = generator.integers(-3, 4, (rows, inner)).astype(np.float32)  # small integers: every sum is exact
    b = generator.integers(-3, 4, (inner, columns)).astype(np.float32)
    left, right = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    GlobalCounters.reset()
    product = (left @ right).realize()
    assert GlobalCounters.kernel_count == 2
    np.testing.assert_array_equal(product.numpy(), a @ b)
    weights = generator.integers(-2, 3, (rows, columns)).astype(np.float32)
    left_grad, right_grad = (product * Tensor(weights)).sum().gradient(left, right)
    np.testing.assert_array_equal(left_grad.numpy(), weights @ b.T)
    np.testing.assert_array_equal(right_grad.numpy(), a.T @ weights)


@pytest.mark.parametrize(
    ("rows", "cast", "kernels"),
    [(64, False, 1), (256, True, 1), (511, False, 1), (512, False, 2), (64, None, 2)],
)
def test_a_prompt_times_a_transposed_weight_reads_it_in_place(rows: int, cast: bool | None, kernels: int) -> None:
    # x @ W.T (nn.Linear's form) with W stored reads W in place below TRANSPOSED_PACKED_MINIMUM_ROWS rows: one kernel;
    # from it, or when W is computed on the way (cast None: W + 0 is not stored), the panel copy comes first
    from kiln.tensor.ops.linalg import PACKED_MINIMUM_ELEMENTS, TRANSPOSED_PACKED_MINIMUM_ROWS

    generator = np.random.default_rng(rows)
    a = generator.integers(-3, 4, (rows, 768)).astype(np.float32)
    w = generator.integers(-3, 4, (1000, 768)).astype(np.float32)
    assert w.size >= PACKED_MINIMUM_ELEMENTS
    assert (rows < TRANSPOSED_PACKED_MINIMUM_ROWS) == (kernels == 1 or cast is None)
    weight = Tensor(w.astype(np.float16) if cast else w).realize()
    right = weight.float().T if cast else (weight + 0).T if cast is None else weight.T
    left = Tensor(a).realize()
    GlobalCounters.reset()
    product = (left @ right).realize()
    assert GlobalCounters.kernel_count == kernels
    np.testing.assert_array_equal(product.numpy(), a @ w.T)


def _round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bfloat16 (ties to even), as float32: the top 16 bits, rounded."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_a_large_16_bit_matmul_widens_its_operands_once(dtype: Any) -> None:
    # the left operand and the panels are widened to float32 by copies (three kernels); the products and sums are
    # those of float32 (exact here: small integers) and the result is rounded to the 16-bit dtype once
    generator = np.random.default_rng(5)
    a = generator.integers(-3, 4, (64, 1024)).astype(np.float32)
    b = generator.integers(-3, 4, (1024, 512)).astype(np.float32)
    left, right = Tensor(a).cast(dtype).realize(), Tensor(b).cast(dtype).realize()
    GlobalCounters.reset()
    product = (left @ right).realize()
    assert GlobalCounters.kernel_count == 3 and product.dtype == dtype
    exact = a @ b  # |sums| <= 9216: exact in float32, not all of them in 16 bits
    expected = exact.astype(np.float16).astype(np.float32) if dtype == dtypes.float16 else _round_to_bfloat16(exact)
    np.testing.assert_array_equal(product.float().numpy(), expected)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ((3,), (3,)),
        ((3,), (3, 4)),
        ((2, 3), (3,)),
        ((5, 2, 3), (3, 4)),
        ((2, 3), (5, 3, 4)),
        ((2, 1, 2, 3), (5, 3, 4)),
        ((1, 2, 3), (4, 1, 3, 2)),
        ((7, 1, 3), (3,)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_matmul_shapes_and_dtypes_match_numpy_exactly(
    left: tuple[int, ...], right: tuple[int, ...], dtype: Any
) -> None:
    # 1-D operands, broadcast batch dims of every rank, integer and 16-bit products (small integers: exact)
    rng = np.random.default_rng(len(left) * 10 + len(right))
    a, b = rng.integers(-3, 4, left).astype(dtype), rng.integers(-3, 4, right).astype(dtype)
    result = (Tensor(a) @ Tensor(b)).numpy()
    expected = a @ b
    assert result.shape == expected.shape and result.dtype == expected.dtype
    np.testing.assert_array_equal(result, expected)
