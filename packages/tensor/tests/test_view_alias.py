"""Views alias their base, as in PyTorch: a write through a view reaches the base, and every view sees it.

The expected values are numpy's (its basic-indexing views alias like PyTorch's) or PyTorch's own, written out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, no_grad


def _base(kind: str) -> Tensor:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    if kind == "host":
        return Tensor(values)
    if kind == "contiguous":
        return Tensor(values).contiguous().realize()
    if kind == "computed":
        return (Tensor(values) * 1).realize()
    return Tensor(values) + 0  # lazy: given storage when a view of it is written


BASES = ["host", "contiguous", "computed", "lazy"]


def test_the_three_programs_of_the_issue_print_pytorchs_values() -> None:
    base = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).contiguous().realize()
    v = base[0]
    v += 10
    assert base.numpy().tolist() == [[10, 11, 12], [3, 4, 5]]
    base = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).contiguous().realize()
    t = base.permute(1, 0)
    base.add_(Tensor.ones(2, 3))
    assert t.numpy().tolist() == [[1, 4], [2, 5], [3, 6]]
    t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).contiguous().realize()
    t.permute(1, 0).assign(Tensor([[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]))
    assert t.numpy().tolist() == [[5, 7, 9], [6, 8, 10]]


# (name, kiln view, numpy view) of a (2, 3) base
VIEWS: list[tuple[str, Callable[[Any], Any], Callable[[np.ndarray], np.ndarray]]] = [
    ("index", lambda t: t[1], lambda a: a[1]),
    ("slice", lambda t: t[:, 1:], lambda a: a[:, 1:]),
    ("strided", lambda t: t[:, ::2], lambda a: a[:, ::2]),
    ("narrow", lambda t: t.narrow(1, 1, 2), lambda a: a[:, 1:3]),
    ("shrink", lambda t: t.shrink(((0, 2), (1, 2))), lambda a: a[:, 1:2]),
    ("transpose", lambda t: t.transpose(0, 1), lambda a: a.T),
    ("T", lambda t: t.T, lambda a: a.T),
    ("permute", lambda t: t.permute(1, 0), lambda a: a.transpose(1, 0)),
    ("unsqueeze", lambda t: t.unsqueeze(1), lambda a: a[:, None]),
    ("reshape", lambda t: t.reshape(3, 2), lambda a: a.reshape(3, 2)),
    ("flatten", lambda t: t.flatten(), lambda a: a.reshape(-1)),
    ("detach", lambda t: t.detach(), lambda a: a.view()),
    ("data", lambda t: t.data, lambda a: a.view()),
    ("chain", lambda t: t.T[1:].unsqueeze(0), lambda a: a.T[1:][None]),
]


def _write(form: str, t: Any, a: np.ndarray) -> None:
    """Applies write `form` to kiln view `t` and numpy view `a` alike."""
    values = np.arange(a.size, dtype=np.float32).reshape(a.shape) + 100
    if form == "assign":
        t.assign(Tensor(values))
        a[...] = values
    elif form == "copy_":
        t.copy_(Tensor(values))
        a[...] = values
    elif form == "setitem":
        t[...] = 7.0
        a[...] = 7.0
    elif form == "iadd":
        t += 10
        a += 10
    elif form == "isub":
        t -= 10
        a -= 10
    elif form == "imul":
        t *= 3
        a *= 3
    elif form == "idiv":
        t /= 2
        a /= 2
    elif form == "clamp_":
        t.clamp_(1.0, 4.0)
        np.clip(a, 1.0, 4.0, out=a)
    elif form == "fill_":
        t.fill_(-1.0)
        a[...] = -1.0
    elif form == "zero_":
        t.zero_()
        a[...] = 0
    else:
        getattr(t, form)(2.0)
        a[...] = {"add_": a + 2, "sub_": a - 2, "mul_": a * 2, "div_": a / 2}[form]


FORMS = ["assign", "copy_", "setitem", "iadd", "isub", "imul", "idiv"]
FORMS += ["add_", "sub_", "mul_", "div_", "clamp_", "fill_", "zero_"]


@pytest.mark.parametrize("base_kind", BASES)
@pytest.mark.parametrize("view", VIEWS, ids=[name for name, _, _ in VIEWS])
@pytest.mark.parametrize("form", FORMS)
def test_each_write_form_through_each_view_kind(base_kind: str, view: Any, form: str) -> None:
    _, kiln_view, numpy_view = view
    base = _base(base_kind)
    model = np.arange(6, dtype=np.float32).reshape(2, 3)
    earlier = base.permute(1, 0)  # a view taken before the write
    target = kiln_view(base)
    _write(form, target, numpy_view(model))
    later = base.reshape(6)  # a view taken after it
    np.testing.assert_array_equal(base.numpy(), model)
    np.testing.assert_array_equal(earlier.numpy(), model.T)
    np.testing.assert_array_equal(later.numpy(), model.reshape(6))
    np.testing.assert_array_equal(target.numpy(), numpy_view(model))


def test_values_keep_their_values_while_views_follow() -> None:
    base = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    clone, computed, summed = base.clone(), base * 2, base.sum(0, keepdim=True)
    narrow_sum = base[:1].sum(0)  # a reduction over a size-1 dim: still a new value
    base[0].zero_()
    assert clone.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert computed.numpy().tolist() == [[0, 2, 4], [6, 8, 10]]
    assert summed.numpy().tolist() == [[3, 5, 7]]
    assert narrow_sum.numpy().tolist() == [0, 1, 2]


def test_pad_is_a_value_but_a_strided_slice_is_a_view() -> None:
    base = Tensor(np.arange(5, dtype=np.float32))
    padded, strided = base.pad((1, 1)), base[::2]
    base.mul_(10)
    assert padded.numpy().tolist() == [0, 0, 1, 2, 3, 4, 0]
    assert strided.numpy().tolist() == [0, 20, 40]
    strided += 1
    assert base.numpy().tolist() == [1, 10, 21, 30, 41]


def test_a_lazy_constant_and_its_views_share_storage_but_equal_constants_do_not() -> None:
    first, second = Tensor.zeros(2, 3), Tensor.zeros(2, 3)  # one hash-consed node, two tensors
    row = first[1]
    row.fill_(5.0)
    assert first.numpy().tolist() == [[0, 0, 0], [5, 5, 5]]
    assert second.numpy().tolist() == [[0, 0, 0], [0, 0, 0]]


def test_writing_through_an_expanded_view_raises_pytorchs_error() -> None:
    base = Tensor(np.arange(3, dtype=np.float32)).reshape(1, 3)
    wide = base.expand(4, 3)
    with pytest.raises(RuntimeError, match=r"more than one element of the written-to tensor \(shape \[4, 3\]"):
        wide.add_(1.0)
    with pytest.raises(RuntimeError, match="more than one element"):
        wide[0] = 2.0
    assert base.numpy().tolist() == [[0, 1, 2]]


def test_in_place_on_a_leaf_and_on_a_view_of_a_leaf_raise_pytorchs_errors() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^a leaf Variable that requires grad .* \(shape \[3\]\)"):
        x.mul_(2)
    with pytest.raises(RuntimeError, match=r"^a view of a leaf Variable that requires grad .* \(shape \[2\]\)"):
        x[1:].mul_(2)
    with no_grad():
        x[1:].mul_(2)
    assert x.numpy().tolist() == [1, 4, 6]


def test_in_place_results_of_the_wrong_shape_or_kind_raise() -> None:
    x = Tensor([[1.0, 2.0, 3.0]])
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        x[0].add_(Tensor.ones(2, 3))
    n = Tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match=r"result type Float can't be cast to the desired output type Int"):
        n[1:].mul_(1.5)


@pytest.mark.parametrize(
    ("program", "grad"),
    [
        ("y[0] *= 2", [2.0, 1.0, 1.0]),  # torch: y = x * 1; y[0] *= 2; y.sum().backward()
        ("y[1:].mul_(3)", [1.0, 3.0, 3.0]),
        ("y[0:2] = 5.0", [0.0, 0.0, 1.0]),
        ("y[0:1].copy_(x[2:] * x[2:])", [0.0, 1.0, 7.0]),  # y[0] = x2^2: d/dx2 = 2 * x2 + 1
        ("v = y[1:]; v += x[:2]", [2.0, 2.0, 1.0]),
    ],
)
def test_gradients_through_view_writes_match_pytorch(program: str, grad: list[float]) -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    exec(program, {}, {"x": x, "y": y})  # the test programs written above
    y.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), grad)


def test_a_view_written_after_a_gradient_saved_it_raises_pytorchs_version_error() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    squares = y[1:] * y[1:]  # PyTorch saves y[1:] here for the gradient
    y[1:].mul_(10)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: a tensor of shape \[3\]"):
        squares.sum().backward()


def test_a_write_after_a_use_that_saved_nothing_keeps_the_gradient() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    doubled = y[1:] * 2  # the gradient of a product by a constant needs no saved value (PyTorch: no error)
    y[1:].mul_(10)
    doubled.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 2.0, 2.0])
    assert doubled.numpy().tolist() == [4.0, 6.0]
