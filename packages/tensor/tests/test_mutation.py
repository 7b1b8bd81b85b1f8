"""Writes into buffers (assign, setitem, in-place operators): each happens once, in program order (numpy oracle).

One test per bug pattern of issue 12, plus the in-place operators' PyTorch rules (dtype kinds, leaves, shapes).
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.grad_mode import no_grad
from kiln.uops import dtypes

DEVICE = "PYTHON"


def _tensor(values: list[float] | list[list[float]] | np.ndarray) -> Tensor:
    return Tensor(np.array(values, dtype=np.float32), device=DEVICE)


def test_an_assign_realized_through_another_graph_is_applied_once() -> None:
    w = _tensor([0.0])
    w.assign(w - 1)
    assert (w * 2).numpy().tolist() == [-2.0]
    assert w.numpy().tolist() == [-1.0]


def test_repeated_assigns_read_through_other_graphs() -> None:
    w = _tensor([0.0])
    seen = []
    for _ in range(3):
        w.assign(w + 1)
        seen.append((w * 3).sum().item())
    assert seen == [3.0, 6.0, 9.0]


def test_setitem_realized_through_another_graph_is_applied_once() -> None:
    w = _tensor([0.0, 0.0, 0.0])
    for step in range(1, 4):
        w[1] = w[1] + 1
        assert (w * 10).numpy().tolist() == [0.0, 10.0 * step, 0.0]
    assert w.numpy().tolist() == [0.0, 3.0, 0.0]


def test_a_realized_tensor_keeps_its_value_when_its_input_is_assigned() -> None:
    a = _tensor([1.0, 2.0])
    b = (a + 1).realize()
    a.assign(_tensor([10.0, 20.0]))
    assert b.numpy().tolist() == [2.0, 3.0]
    assert (a + 1).numpy().tolist() == [11.0, 21.0]


def test_a_lazy_reader_built_before_an_assign_reads_the_old_value() -> None:
    a = _tensor([1.0, 2.0])
    before = a * 10
    a.assign(a + 5)
    after = a * 10
    assert after.numpy().tolist() == [60.0, 70.0]
    assert before.numpy().tolist() == [10.0, 20.0]


def test_readers_between_a_chain_of_assigns_see_their_own_step() -> None:
    w = _tensor([1.0])
    readers = []
    for _ in range(4):
        readers.append(w * 1)
        w.assign(w * 2)
    assert [reader.item() for reader in readers] == [1.0, 2.0, 4.0, 8.0]
    assert w.item() == 16.0


def test_the_assigned_value_tensor_keeps_its_value_after_later_writes() -> None:
    w = _tensor([1.0, 2.0])
    value = w + 1
    w.assign(value)
    w += 100
    assert value.numpy().tolist() == [2.0, 3.0]
    assert w.numpy().tolist() == [102.0, 103.0]


def test_setitem_through_a_view_is_seen_by_the_base_and_other_views() -> None:
    w = _tensor(np.arange(4.0))
    grid = w.reshape(2, 2)
    column = grid[:, 1]
    grid[0] = 7.0
    np.testing.assert_array_equal(w.numpy(), [7.0, 7.0, 2.0, 3.0])
    np.testing.assert_array_equal(column.numpy(), [7.0, 3.0])
    column.assign(column * 2)
    np.testing.assert_array_equal(w.numpy(), [7.0, 14.0, 2.0, 6.0])


def test_assign_to_a_tensor_that_is_not_realized() -> None:
    lazy = Tensor.ones(3, device=DEVICE) * 2
    reader = lazy + 1
    lazy.assign(_tensor([5.0, 6.0, 7.0]))
    assert lazy.numpy().tolist() == [5.0, 6.0, 7.0]
    assert reader.numpy().tolist() == [3.0, 3.0, 3.0]


def test_two_targets_realized_together() -> None:
    a, b = _tensor([1.0]), _tensor([2.0])
    a.assign(a + b)
    b.assign(a * b)
    Tensor.realize_all(a, b, a + b)
    assert (a.item(), b.item()) == (3.0, 6.0)


def test_a_constant_value_realized_into_a_written_buffer_is_not_reused() -> None:
    # found by test_mutation_model (seed 39 after seeds 0..38): a realized constant expression shares its node with
    # every equal expression; writing its buffer must not change what a later equal expression reads
    first = (Tensor.full((3,), -1.0, device=DEVICE) * 0.5).realize()
    first *= 2.0
    second = Tensor.full((3,), -1.0, device=DEVICE) * 0.5
    assert second.numpy().tolist() == [-0.5, -0.5, -0.5]
    assert first.numpy().tolist() == [-1.0, -1.0, -1.0]


def test_inplace_operators_update_parameters_in_a_loop() -> None:
    params = [_tensor([1.0, 2.0]), _tensor([3.0])]
    grads = [_tensor([0.5, 0.5]), _tensor([1.0])]
    for p, g in zip(params, grads):
        p -= 0.1 * g
    np.testing.assert_allclose(params[0].numpy(), [0.95, 1.95], rtol=1e-6)
    np.testing.assert_allclose(params[1].numpy(), [2.9], rtol=1e-6)


@pytest.mark.parametrize(
    ("operator", "operand", "expected"),
    [
        ("__iadd__", 3, [4, 5, 9]),
        ("__isub__", 3, [-2, -1, 3]),
        ("__imul__", 3, [3, 6, 18]),
        ("__ifloordiv__", 4, [0, 0, 1]),
        ("__imod__", 4, [1, 2, 2]),
        ("__ipow__", 2, [1, 4, 36]),
        ("__iand__", 3, [1, 2, 2]),
        ("__ior__", 8, [9, 10, 14]),
        ("__ixor__", 3, [2, 1, 5]),
        ("__ilshift__", 2, [4, 8, 24]),
        ("__irshift__", 1, [0, 1, 3]),
    ],
)
def test_integer_inplace_operators(operator: str, operand: int, expected: list[int]) -> None:
    x = Tensor([1, 2, 6], dtype=dtypes.int32, device=DEVICE)
    reader = x + 0
    assert getattr(x, operator)(operand) is x
    assert x.numpy().tolist() == expected
    assert reader.numpy().tolist() == [1, 2, 6]


def test_float_inplace_operators_and_methods() -> None:
    x = _tensor([1.0, -2.0, 4.0])
    x /= 2.0
    assert x.numpy().tolist() == [0.5, -1.0, 2.0]
    assert x.add_(_tensor([1.0, 1.0, 1.0]), alpha=2.0) is x
    assert x.numpy().tolist() == [2.5, 1.0, 4.0]
    x.sub_(1.0).mul_(2.0).div_(3.0)
    np.testing.assert_allclose(x.numpy(), [1.0, 0.0, 2.0], atol=1e-6)
    x.clamp_(0.5, 1.5)
    np.testing.assert_allclose(x.numpy(), [1.0, 0.5, 1.5])
    x.fill_(Tensor(2.5, device=DEVICE))
    assert x.numpy().tolist() == [2.5, 2.5, 2.5]
    x.copy_(Tensor([7, 8, 9], device=DEVICE))
    assert x.numpy().tolist() == [7.0, 8.0, 9.0]
    x.copy_(Tensor([1.0], device=DEVICE))
    assert x.numpy().tolist() == [1.0, 1.0, 1.0]
    x.zero_()
    assert x.numpy().tolist() == [0.0, 0.0, 0.0]


def test_inplace_matmul() -> None:
    a = _tensor(np.arange(4.0).reshape(2, 2))
    b = _tensor([[0.0, 1.0], [1.0, 0.0]])
    a @= b
    np.testing.assert_array_equal(a.numpy(), np.arange(4.0).reshape(2, 2) @ np.array([[0.0, 1.0], [1.0, 0.0]]))


def test_getitem_then_inplace_operator_writes_the_element() -> None:
    x = _tensor([1.0, 2.0, 3.0])
    x[1] += 10.0
    assert x.numpy().tolist() == [1.0, 12.0, 3.0]


def test_inplace_result_must_cast_to_the_tensor_dtype() -> None:
    x = Tensor([1, 2], dtype=dtypes.int32, device=DEVICE)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Int"):
        x += 1.5
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Int"):
        x /= 2
    flags = Tensor([True, False], device=DEVICE)
    with pytest.raises(RuntimeError, match="result type Int can't be cast to the desired output type Bool"):
        flags += Tensor([1, 1], dtype=dtypes.int32, device=DEVICE)
    assert x.numpy().tolist() == [1, 2]
    half = Tensor([1.0, 2.0], dtype=dtypes.float16, device=DEVICE)
    half += _tensor([0.5, 0.5])  # a float32 result fits a float16 tensor (same kind)
    assert half.dtype == dtypes.float16 and half.numpy().tolist() == [1.5, 2.5]


def test_inplace_result_must_keep_the_shape() -> None:
    x = _tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"output with shape \[2\] doesn't match the broadcast shape \[2, 2\]"):
        x += _tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor"):
        x.fill_(_tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="cannot broadcast"):
        x.copy_(_tensor([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="copy_ takes a Tensor"):
        x.copy_([1.0, 2.0])


def test_inplace_on_a_leaf_that_requires_grad() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True, device=DEVICE)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        w += 1.0
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        w.zero_()
    with no_grad():
        w -= 0.5
    assert w.numpy().tolist() == [0.5, 1.5] and w.requires_grad is True
    (w * w).sum().backward()
    assert w.grad is not None and w.grad.numpy().tolist() == [1.0, 3.0]


def test_batch_norm_running_statistics_update_once_per_call() -> None:
    rng = np.random.default_rng(0)
    running_mean = Tensor.zeros(2, device=DEVICE).contiguous().realize()
    running_var = Tensor.ones(2, device=DEVICE).contiguous().realize()
    expected_mean, expected_var = np.zeros(2), np.ones(2)
    for _ in range(3):
        x = rng.normal(size=(4, 2)).astype(np.float32)
        out = _tensor(x).batch_norm(running_mean, running_var, training=True, momentum=0.1)
        out.numpy()  # realizing the output must not write the statistics again
        (out * 2).numpy()
        expected_mean = 0.9 * expected_mean + 0.1 * x.mean(0)
        expected_var = 0.9 * expected_var + 0.1 * x.var(0, ddof=1)
    np.testing.assert_allclose(running_mean.numpy(), expected_mean, rtol=1e-5)
    np.testing.assert_allclose(running_var.numpy(), expected_var, rtol=1e-5)


def test_a_live_tensor_the_value_computes_is_realized_with_the_write() -> None:
    # batch_norm's running statistics read the layer's input: computing it again for the forward pass would double
    # the work, so a live lazy tensor inside the written value is realized by the write's schedule
    a = _tensor([0.0, 1.0, 2.0])
    shared = a.exp()
    w = _tensor([1.0])
    w.assign(w + shared.sum().reshape(1))
    before = GlobalCounters.kernel_count
    np.testing.assert_allclose(shared.numpy(), np.exp([0.0, 1.0, 2.0]), rtol=1e-6)
    assert GlobalCounters.kernel_count == before  # already in a buffer
    np.testing.assert_allclose(w.numpy(), [1.0 + np.exp([0.0, 1.0, 2.0]).sum()], rtol=1e-6)


def test_gradient_into_a_written_value_uses_the_old_contents_of_the_target() -> None:
    w = _tensor([2.0, 5.0])
    scale = Tensor([3.0, 4.0], requires_grad=True, device=DEVICE)
    w.assign(w * scale)  # d w_new / d scale = w_old
    assert w.numpy().tolist() == [6.0, 20.0]
    (grad,) = (w * 1.0).sum().gradient(scale)
    assert grad.numpy().tolist() == [2.0, 5.0]


def test_backward_through_a_graph_whose_input_was_overwritten_raises() -> None:
    # like PyTorch: a graph realized before an in-place write cannot be differentiated afterwards
    w = Tensor([1.0, 2.0], requires_grad=True, device=DEVICE)
    x = Tensor([3.0, 4.0], requires_grad=True, device=DEVICE)
    loss = (w * x).sum()
    assert loss.item() == 11.0
    with no_grad():
        w -= 1.0
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        loss.backward()
        assert x.grad is not None
        x.grad.numpy()


def test_backward_of_a_lazy_loss_after_a_write_uses_the_values_it_was_built_with() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True, device=DEVICE)
    x = Tensor([3.0, 4.0], requires_grad=True, device=DEVICE)
    loss = (w * x).sum()  # not realized: rebound to a snapshot of w by the write below
    with no_grad():
        w -= 1.0
    loss.backward()
    assert x.grad is not None and x.grad.numpy().tolist() == [1.0, 2.0]
    assert loss.item() == 11.0


def test_equal_graphs_realized_by_two_tensors_get_memory_of_their_own() -> None:
    # equal graphs are one hash-consed node; each tensor realized from it must still own its buffer (PyTorch: every
    # result is new memory), so a write into one never shows in the other
    a = Tensor.zeros(3).contiguous().realize()
    b = Tensor.zeros(3).contiguous().realize()
    a += 1
    np.testing.assert_array_equal(a.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(b.numpy(), [0.0, 0.0, 0.0])
    x = Tensor([1.0, 2.0])
    y, z = (x + 1).realize(), (x + 1).realize()
    y += 10
    np.testing.assert_array_equal(y.numpy(), [12.0, 13.0])
    np.testing.assert_array_equal(z.numpy(), [2.0, 3.0])
    c, d = Tensor.full((2,), 5.0).contiguous(), Tensor.full((2,), 5.0).contiguous()
    Tensor.realize_all(c, d)
    c[0] = 0.0
    np.testing.assert_array_equal(c.numpy(), [0.0, 5.0])
    np.testing.assert_array_equal(d.numpy(), [5.0, 5.0])
