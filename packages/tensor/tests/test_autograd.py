"""Tests of the Tensor autograd API (kiln.tensor.autograd_mixin, kiln.tensor.grad_mode).

Oracles: analytic gradients written with numpy (matmul, softmax, cross-entropy, broadcasting), hand-computed values,
and PyTorch's documented semantics for leaves, accumulation, no_grad and detach.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from engine_graphs import apply_numpy, movement_chain
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor import Tensor, dtypes
from kiln.tensor.grad_mode import enable_grad, is_grad_enabled, no_grad


def leaf(array: np.ndarray | list[float]) -> Tensor:
    return Tensor(np.asarray(array, dtype=np.float64), requires_grad=True)


# ---------------------------------------------------------------------------------------------------------------
# analytic gradients
# ---------------------------------------------------------------------------------------------------------------


def test_matmul_gradients_match_the_analytic_formula() -> None:
    rng = np.random.default_rng(0)
    a, b, upstream = rng.normal(size=(3, 4)), rng.normal(size=(4, 5)), rng.normal(size=(3, 5))
    x, y = leaf(a), leaf(b)
    (x @ y).backward(Tensor(upstream))
    # d(AB)/dA = G B^T, d(AB)/dB = A^T G
    np.testing.assert_allclose(x.grad.numpy(), upstream @ b.T, rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), a.T @ upstream, rtol=1e-12)


def test_batched_matmul_sums_the_broadcast_batch() -> None:
    rng = np.random.default_rng(1)
    a, b, upstream = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 5)), rng.normal(size=(2, 3, 5))
    x, y = leaf(a), leaf(b)
    (x @ y).backward(upstream)
    np.testing.assert_allclose(x.grad.numpy(), upstream @ b.T, rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), np.einsum("bij,bik->jk", a, upstream), rtol=1e-12)


def test_softmax_gradient_matches_the_analytic_formula() -> None:
    rng = np.random.default_rng(2)
    data, upstream = rng.normal(size=(3, 6)) * 3, rng.normal(size=(3, 6))
    x = leaf(data)
    (grad,) = x.softmax(-1).gradient(x, gradient=Tensor(upstream))
    shifted = np.exp(data - data.max(-1, keepdims=True))
    s = shifted / shifted.sum(-1, keepdims=True)
    # J^T g = s * (g - sum(g * s))
    np.testing.assert_allclose(grad.numpy(), s * (upstream - (upstream * s).sum(-1, keepdims=True)), rtol=1e-10)


def _cross_entropy(logits: Tensor, labels: np.ndarray) -> Tensor:
    if hasattr(Tensor, "cross_entropy"):
        return logits.cross_entropy(Tensor(labels))
    picked = logits.log_softmax(-1).gather(1, Tensor(labels.reshape(-1, 1)))
    return -picked.mean()


def test_cross_entropy_gradient_is_softmax_minus_one_hot() -> None:
    rng = np.random.default_rng(3)
    data = rng.normal(size=(5, 4)) * 2
    labels = rng.integers(0, 4, 5).astype(np.int64)
    x = leaf(data)
    _cross_entropy(x, labels).backward()
    shifted = np.exp(data - data.max(-1, keepdims=True))
    probabilities = shifted / shifted.sum(-1, keepdims=True)
    one_hot = np.eye(4)[labels]
    np.testing.assert_allclose(x.grad.numpy(), (probabilities - one_hot) / 5, rtol=1e-10, atol=1e-15)


def test_broadcast_inputs_get_gradients_summed_over_the_broadcast_dims() -> None:
    rng = np.random.default_rng(4)
    column, row, full = rng.normal(size=(3, 1)), rng.normal(size=(4,)), rng.normal(size=(2, 3, 4))
    a, b, c = leaf(column), leaf(row), leaf(full)
    upstream = rng.normal(size=(2, 3, 4))
    (a * b + c * 2.0).backward(upstream)
    np.testing.assert_allclose(a.grad.numpy(), (upstream * row).sum(axis=(0, 2))[:, None], rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), (upstream * column).sum(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(c.grad.numpy(), upstream * 2.0, rtol=1e-12)
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,)


def test_scalar_leaf_broadcast_against_a_tensor() -> None:
    scale = Tensor(3.0, dtype=dtypes.float64).requires_grad_()
    x = leaf([1.0, 2.0, 4.0])
    # the literal 3.0 is the same constant as the leaf's value: the leaf must not take its gradient
    (scale * x * 3.0).sum().backward()
    assert scale.grad.shape == () and scale.grad.item() == 21.0
    assert x.grad.tolist() == [9.0, 9.0, 9.0]


def test_scalar_leaf_from_the_constructor() -> None:
    scale = Tensor(2.0, requires_grad=True)
    (scale * Tensor([1.0, 2.0]) * 2.0).sum().backward()
    assert scale.grad.item() == 6.0


def test_constant_leaf_without_a_buffer_takes_no_gradient_of_equal_constants() -> None:
    scale = Tensor(2.0)
    scale.__dict__["_requires_grad"] = None
    del scale.__dict__["uop"]
    scale.requires_grad = True  # the order Tensor.__init__ uses: the flag is set before the graph exists
    scale.uop = Tensor(2.0).uop  # a CONST, one node with the literal 2.0 below
    x = leaf([1.0, 2.0])
    (scale * x * 2.0).sum().backward()
    assert scale.grad is None
    assert x.grad.tolist() == [4.0, 4.0]


def test_second_derivative_through_gradient() -> None:
    x = leaf([0.5, -1.0, 2.0])
    (first,) = (x * x * x).sum().gradient(x)
    (second,) = first.sum().gradient(x)
    np.testing.assert_allclose(first.numpy(), 3 * np.array([0.5, -1.0, 2.0]) ** 2)
    np.testing.assert_allclose(second.numpy(), 6 * np.array([0.5, -1.0, 2.0]))


def test_float32_gradients_stay_float32() -> None:
    x = Tensor(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.dtype == dtypes.float32
    assert x.grad.tolist() == [2.0, 4.0]


# ---------------------------------------------------------------------------------------------------------------
# backward: leaves, accumulation, errors
# ---------------------------------------------------------------------------------------------------------------


def test_backward_fills_leaves_only_and_returns_self() -> None:
    x = leaf([1.0, 2.0])
    middle = x * 3.0
    loss = (middle * middle).sum()
    assert loss.backward() is loss
    assert x.grad.tolist() == [18.0, 36.0]  # d/dx 9x^2
    assert middle.grad is None and loss.grad is None
    assert middle.requires_grad is True and x.grad.requires_grad is not True


def test_gradients_accumulate_across_backward_calls() -> None:
    x = leaf([1.0, -2.0])
    (x * x).sum().backward()
    (x * 5.0).sum().backward()
    assert x.grad.tolist() == [2.0 + 5.0, -4.0 + 5.0]
    x.grad = None
    (x * 5.0).sum().backward()
    assert x.grad.tolist() == [5.0, 5.0]


def test_backward_with_an_explicit_gradient() -> None:
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    (x * x).backward([[1.0, 0.0], [0.5, 2.0]])
    assert x.grad.tolist() == [[2.0, 0.0], [3.0, 16.0]]


def test_backward_on_a_one_element_non_scalar_needs_no_gradient() -> None:
    x = leaf([2.0])
    (x * x).backward()
    assert x.grad.tolist() == [4.0]


def test_backward_on_a_non_scalar_without_gradient_names_the_shape() -> None:
    x = leaf([[1.0, 2.0, 3.0]])
    with pytest.raises(RuntimeError, match=r"shape \(1, 3\)"):
        (x * 2.0).backward()


def test_backward_with_a_gradient_of_the_wrong_shape() -> None:
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"gradient shape \(2,\) must equal the tensor's shape \(3,\)"):
        (x * 2.0).backward(Tensor([1.0, 1.0]))


def test_backward_on_a_tensor_that_does_not_require_grad() -> None:
    with pytest.raises(RuntimeError, match="does not require grad"):
        (Tensor([1.0, 2.0]) * 2.0).sum().backward()


def test_backward_reaches_leaves_through_reshapes_of_their_data() -> None:
    # the reshapes share the leaf's buffer; the leaf gets the gradient of both uses
    data = np.arange(6, dtype=np.float64).reshape(2, 3)
    x = leaf(data)
    flat = x.reshape(6)
    (flat * x.reshape(3, 2).reshape(6)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * data)
    assert flat.grad is None  # a result, not a leaf, although it shares the leaf's buffer


def test_unused_leaf_keeps_no_gradient() -> None:
    used, unused = leaf([1.0]), leaf([2.0])
    (used * 2.0).sum().backward()
    assert used.grad.tolist() == [2.0] and unused.grad is None


def test_leaves_built_the_same_way_stay_separate() -> None:
    # equal graphs are one hash-consed node; requires_grad_() gives each leaf its own buffer
    first = Tensor.zeros(3, dtype=dtypes.float64).requires_grad_()
    second = Tensor.zeros(3, dtype=dtypes.float64).requires_grad_()
    x = Tensor([1.0, 2.0, 3.0], dtype=dtypes.float64)
    ((first + 1.0) * x + (second + 2.0) * x * x).sum().backward()
    assert first.grad.tolist() == [1.0, 2.0, 3.0]
    assert second.grad.tolist() == [1.0, 4.0, 9.0]
    assert first.tolist() == [0.0, 0.0, 0.0]


def test_leaves_made_by_requires_grad_true_stay_separate() -> None:
    first = Tensor.zeros(2, dtype=dtypes.float64, requires_grad=True)
    second = Tensor.zeros(2, dtype=dtypes.float64, requires_grad=True)
    (first * 2.0 + second).sum().backward()
    assert first.grad.tolist() == [2.0, 2.0] and second.grad.tolist() == [1.0, 1.0]


def test_leaves_sharing_one_node_are_an_error_not_a_mixed_gradient() -> None:
    data = Tensor(np.array([1.0, 2.0]))
    first, second = Tensor(data, requires_grad=True), Tensor(data, requires_grad=True)
    assert first.uop is second.uop
    with pytest.raises(RuntimeError, match="share one graph node"):
        (first * 2.0 + second).sum().backward()


# ---------------------------------------------------------------------------------------------------------------
# gradient()
# ---------------------------------------------------------------------------------------------------------------


def test_gradient_needs_no_requires_grad_and_leaves_grad_alone() -> None:
    x, y = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
    grad_x, grad_y = (x * y).sum().gradient(x, y)
    assert grad_x.tolist() == [3.0, 4.0] and grad_y.tolist() == [1.0, 2.0]
    assert x.grad is None


def test_gradient_with_respect_to_an_intermediate() -> None:
    x = leaf([1.0, 2.0])
    middle = x.exp()
    (grad,) = (middle * 3.0).sum().gradient(middle)
    assert grad.tolist() == [3.0, 3.0]


def test_gradient_of_a_target_used_only_through_comparisons_is_zero() -> None:
    x = leaf([1.0, -2.0])
    (grad,) = ((x > 0).float() * 3.0).sum().gradient(x)
    assert grad.tolist() == [0.0, 0.0]


def test_gradient_target_not_in_the_graph() -> None:
    x, other = leaf([1.0]), leaf([2.0])
    with pytest.raises(RuntimeError, match=r"target 0 .* is not in the graph"):
        (x * 2.0).sum().gradient(other)


def test_gradient_target_only_behind_detach() -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="only behind detach"):
        (x.detach() * 2.0).sum().gradient(x)


def test_gradient_argument_errors() -> None:
    x = leaf([1.0, 2.0])
    loss = (x * x).sum()
    with pytest.raises(TypeError, match="at least one target"):
        loss.gradient()
    with pytest.raises(TypeError, match="must be Tensors"):
        loss.gradient([1.0, 2.0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int32"):
        loss.gradient(Tensor([1, 2], dtype=dtypes.int32))
    with pytest.raises(RuntimeError, match=r"shape \(2,\)"):
        (x * x).gradient(x)


# ---------------------------------------------------------------------------------------------------------------
# requires_grad, no_grad, detach, assign
# ---------------------------------------------------------------------------------------------------------------


def test_requires_grad_propagates_to_results() -> None:
    x, constant = leaf([1.0]), Tensor([2.0])
    assert (x * constant).requires_grad is True
    assert (constant * constant).requires_grad is None
    assert x.exp().sum().requires_grad is True


def test_requires_grad_flag_errors() -> None:
    with pytest.raises(RuntimeError, match="only float tensors"):
        Tensor([1, 2]).requires_grad_()
    with pytest.raises(TypeError, match="bool"):
        Tensor([1.0]).requires_grad_(1)  # type: ignore[arg-type]
    x = Tensor([1.0])
    assert x.requires_grad_() is x and x.requires_grad is True
    assert x.requires_grad_(False).requires_grad is False


def test_no_grad_context_and_decorator() -> None:
    x = leaf([1.0, 2.0])
    assert is_grad_enabled()
    with no_grad():
        assert not is_grad_enabled()
        assert (x * 2.0).requires_grad is None
        with enable_grad():
            assert (x * 2.0).requires_grad is True
        assert (x * 2.0).requires_grad is None
    assert is_grad_enabled() and (x * 2.0).requires_grad is True

    @no_grad()
    def update(value: Tensor) -> Tensor:
        return value * 2.0

    assert update(x).requires_grad is None
    assert is_grad_enabled()


def test_no_grad_is_restored_after_an_exception() -> None:
    with pytest.raises(ValueError, match="boom"), no_grad():
        raise ValueError("boom")
    assert is_grad_enabled() and Tensor.no_grad is False


def test_backward_still_works_for_graphs_built_before_no_grad() -> None:
    x = leaf([3.0])
    loss = (x * x).sum()
    with no_grad():
        loss.backward()
    assert x.grad.tolist() == [6.0]


def test_detach_stops_gradients() -> None:
    x = leaf([1.0, -2.0, 3.0])
    detached = x.detach()
    assert detached.requires_grad is False
    (x * detached).sum().backward()
    assert x.grad.tolist() == [1.0, -2.0, 3.0]  # the detached factor is a constant


def test_detached_copy_made_a_leaf_is_its_own_leaf() -> None:
    x = leaf([1.0, 2.0])
    copy = x.detach().requires_grad_()
    (copy * x).sum().backward()
    assert copy.grad.tolist() == [1.0, 2.0] and x.grad.tolist() == [1.0, 2.0]


def test_gradient_flows_into_an_assigned_value() -> None:
    target = Tensor.zeros(3, dtype=dtypes.float64).contiguous().realize()
    value = leaf([1.0, 2.0, 3.0])
    target.assign(value * value)
    (grad,) = (target * 2.0).sum().gradient(value)
    assert grad.tolist() == [4.0, 8.0, 12.0]


def test_gradient_flows_into_a_setitem_value() -> None:
    target = Tensor.zeros(2, 3, dtype=dtypes.float64).contiguous().realize()
    value = leaf([1.0, 2.0, 3.0])
    target[1] = value * value
    weights = Tensor([[1.0, 1.0, 1.0], [1.0, 10.0, 100.0]], dtype=dtypes.float64)
    (grad,) = (target * weights).sum().gradient(value)
    assert grad.tolist() == [2.0, 40.0, 600.0]


def test_gradient_with_respect_to_a_reshaped_intermediate() -> None:
    x = leaf(np.arange(6.0).reshape(2, 3))
    middle = x.exp().reshape(3, 2)
    (grad,) = (middle.reshape(6) * Tensor(np.arange(6.0))).sum().gradient(middle)
    assert grad.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


# ---------------------------------------------------------------------------------------------------------------
# gradients with respect to intermediates held between two links of a movement chain
# ---------------------------------------------------------------------------------------------------------------

# each case: the input shape, the links building the held intermediate from sin(x), the links after it. A link is
# (method, arguments, numpy function doing the same)
_Link = tuple[str, tuple[object, ...], Callable[[np.ndarray], np.ndarray]]
_CHAINS: dict[str, tuple[tuple[int, ...], list[_Link], list[_Link]]] = {
    "reshape-reshape": (
        (2, 3, 4),
        [("reshape", ((6, 4),), lambda a: a.reshape(6, 4))],
        [("reshape", ((4, 6),), lambda a: a.reshape(4, 6)), ("reshape", ((24,),), lambda a: a.reshape(24))],
    ),
    "permute-permute": (
        (2, 3, 4),
        [("permute", ((2, 0, 1),), lambda a: a.transpose(2, 0, 1))],
        [("permute", ((1, 2, 0),), lambda a: a.transpose(1, 2, 0))],
    ),
    "expand-expand": (
        (3, 1, 1),
        [("expand", ((3, 2, 1),), lambda a: np.broadcast_to(a, (3, 2, 1)))],
        [("expand", ((3, 2, 4),), lambda a: np.broadcast_to(a, (3, 2, 4)))],
    ),
    "shrink-shrink": (
        (5, 6),
        [("shrink", (((1, 5), (0, 5)),), lambda a: a[1:5, 0:5])],
        [("shrink", (((1, 3), (2, 5)),), lambda a: a[1:3, 2:5])],
    ),
    "pad-pad": (
        (2, 3),
        [("pad", (((1, 0), (0, 2)),), lambda a: np.pad(a, ((1, 0), (0, 2))))],
        [("pad", (((0, 2), (1, 1)),), lambda a: np.pad(a, ((0, 2), (1, 1))))],
    ),
    "reshape-permute-reshape": (
        (4, 6),
        [
            ("reshape", ((2, 2, 6),), lambda a: a.reshape(2, 2, 6)),
            ("permute", ((2, 0, 1),), lambda a: a.transpose(2, 0, 1)),
        ],
        [("reshape", ((12, 2),), lambda a: a.reshape(12, 2)), ("permute", ((1, 0),), lambda a: a.T)],
    ),
    "shrink-pad-expand": (
        (4, 1, 5),
        [("shrink", (((1, 3), None, (0, 4)),), lambda a: a[1:3, :, 0:4])],
        [
            ("pad", (((0, 0), (0, 0), (2, 1)),), lambda a: np.pad(a, ((0, 0), (0, 0), (2, 1)))),
            ("expand", ((2, 3, 7),), lambda a: np.broadcast_to(a, (2, 3, 7))),
            ("reshape", ((6, 7),), lambda a: a.reshape(6, 7)),
        ],
    ),
}


def _apply_links(tensor: Tensor, links: list[_Link]) -> Tensor:
    for method, arguments, _ in links:
        tensor = getattr(tensor, method)(*arguments)
    return tensor


def _apply_numpy_links(array: np.ndarray, links: list[_Link]) -> np.ndarray:
    for _, _, function in links:
        array = function(array)
    return array


@pytest.mark.parametrize("name", sorted(_CHAINS))
def test_gradient_with_respect_to_an_intermediate_of_a_movement_chain(name: str) -> None:
    shape, before, after = _CHAINS[name]
    rng = np.random.default_rng(sorted(_CHAINS).index(name))
    data = rng.normal(size=shape)
    x = leaf(data)
    middle = _apply_links(x.sin(), before)
    out = _apply_links(middle, after)
    weights = rng.normal(size=out.shape)
    # loss = sum(w * out^3): non-linear, so a wrong routing of the gradient shows in the values
    loss = (out * out * out * Tensor(weights)).sum()
    middle_grad, x_grad = loss.gradient(middle, x)

    def loss_of_middle(held: np.ndarray) -> float:
        return float((_apply_numpy_links(held, after) ** 3 * weights).sum())

    # float64 central differences with the intermediate as the free variable (the oracle)
    held = _apply_numpy_links(np.sin(data), before)
    step, numeric = 1e-6, np.zeros(held.size)
    for index in range(held.size):
        bumped = held.reshape(-1).copy()
        bumped[index] += step
        plus = loss_of_middle(bumped.reshape(held.shape))
        bumped[index] -= 2 * step
        numeric[index] = (plus - loss_of_middle(bumped.reshape(held.shape))) / (2 * step)
    assert middle_grad.shape == held.shape
    np.testing.assert_allclose(middle_grad.numpy().reshape(-1), numeric, rtol=1e-6, atol=1e-8)

    def loss_of_x(values: np.ndarray) -> float:
        return loss_of_middle(_apply_numpy_links(np.sin(values), before))

    numeric_x = np.zeros(data.size)
    for index in range(data.size):
        bumped = data.reshape(-1).copy()
        bumped[index] += step
        plus = loss_of_x(bumped.reshape(shape))
        bumped[index] -= 2 * step
        numeric_x[index] = (plus - loss_of_x(bumped.reshape(shape))) / (2 * step)
    np.testing.assert_allclose(x_grad.numpy().reshape(-1), numeric_x, rtol=1e-6, atol=1e-8)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=3).flatmap(
        lambda shape: st.tuples(st.just(tuple(shape)), movement_chain(tuple(shape), 6), st.integers(0, 6))
    )
)
def test_gradient_with_respect_to_any_link_of_a_random_movement_chain(case: Any) -> None:
    shape, chain, cut = case
    rng = np.random.default_rng(len(chain) * 7 + cut)
    data = rng.normal(size=shape)
    held, held_values = leaf(data) * 1.0, data
    for movement in chain[:cut]:
        held, held_values = held._movement(*movement), apply_numpy(held_values, movement)
    out, probe = held, np.zeros(held_values.shape)
    for movement in chain[cut:]:
        out, probe = out._movement(*movement), apply_numpy(probe, movement)
    weights = rng.normal(size=probe.shape)
    (grad,) = (out * Tensor(weights)).sum().gradient(held)
    # the loss is linear in the held tensor: its gradient entry i is the loss of the i-th unit tensor (the oracle)
    expected = np.zeros(held_values.size)
    for index in range(held_values.size):
        unit = np.zeros(held_values.size)
        unit[index] = 1.0
        moved = unit.reshape(held_values.shape)
        for movement in chain[cut:]:
            moved = apply_numpy(moved, movement)
        expected[index] = (moved * weights).sum()
    assert grad.shape == held_values.shape
    np.testing.assert_allclose(grad.numpy().reshape(-1), expected, rtol=1e-12, atol=1e-12)


def test_gradient_through_an_empty_intermediate() -> None:
    # the chain ends in zero elements: that part of the loss adds nothing (and no kernel reduces over nothing)
    x = leaf([1.0, 2.0])
    held = x * 1.0
    empty = held.reshape(1, 1, 1, 2).expand(1, 1, 2, 2).shrink(((0, 0), (0, 0), (0, 0), (0, 1)))
    out = empty.expand(0, 0, 0, 2).reshape(0)
    loss = (out * Tensor(np.zeros(0))).sum() + (held * held).sum()
    held_grad, x_grad, empty_grad = loss.gradient(held, x, empty)
    assert held_grad.tolist() == [2.0, 4.0] and x_grad.tolist() == [2.0, 4.0]
    assert empty_grad.shape == (0, 0, 0, 1)


def test_results_of_integer_ops_do_not_require_grad() -> None:
    x = leaf([1.0, -2.0, 3.0])
    assert (x > 0).requires_grad is None and x.argmax().requires_grad is None
    assert (x * 2.0).requires_grad is True


def test_gradient_with_respect_to_each_link_of_a_reshape_chain() -> None:
    # every tensor the user holds along x -> (6, 4) -> (4, 6) -> (24,) is a target of its own
    data = np.arange(24.0).reshape(2, 3, 4) / 10.0
    x = leaf(data)
    first = x.reshape(6, 4)
    second = first.reshape(4, 6)
    third = second.reshape(24)
    weights = np.arange(24.0) + 1.0
    loss = (third * third * Tensor(weights)).sum()
    grads = loss.gradient(x, first, second, third)
    # d/dthird of sum(w * third^2) = 2 w third; every earlier link gets the same numbers in its own shape
    expected = 2.0 * weights * data.reshape(24)
    for grad, held in zip(grads, (x, first, second, third)):
        assert grad.shape == held.shape
        np.testing.assert_allclose(grad.numpy().reshape(24), expected, rtol=1e-12)


def test_gradient_with_respect_to_an_intermediate_also_used_directly() -> None:
    # middle is used itself and through a chain; base is used apart from middle: only middle's uses count
    data = np.arange(6.0).reshape(2, 3)
    x = leaf(data)
    base = x * 2.0
    middle = base.reshape(3, 2)
    loss = (middle.reshape(6) * Tensor(np.arange(6.0))).sum() + (middle * middle).sum() + (base * 100.0).sum()
    (grad,) = loss.gradient(middle)
    held = (2.0 * data).reshape(3, 2)
    np.testing.assert_allclose(grad.numpy(), np.arange(6.0).reshape(3, 2) + 2.0 * held, rtol=1e-12)


def test_backward_fills_grad_of_a_leaf_reshaped_twice() -> None:
    w = Tensor(np.arange(6.0).reshape(2, 3) / 4.0, requires_grad=True)
    flat = w.reshape(6).reshape(3, 2).reshape(6)
    (flat * flat).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2.0 * np.arange(6.0).reshape(2, 3) / 4.0, rtol=1e-12)
