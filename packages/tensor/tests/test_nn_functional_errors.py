"""`kiln.tensor.nn.functional` refuses what torch refuses: for each call of `conformance/functional_cases.py`'s
`ERRORS`, kiln raises torch's recorded exception class with a message naming the same value, plus the warnings and
in-place rules torch has."""

from __future__ import annotations

import builtins
import warnings
from pathlib import Path

import numpy as np
import pytest
from conformance.functional_cases import ERRORS, Ref

import kiln.tensor.nn.functional as F
from kiln.tensor import Tensor

FOLDER = Path(__file__).parent / "conformance"

FIXTURE = np.load(FOLDER / "functional.npz")


@pytest.mark.parametrize("index", range(len(ERRORS)), ids=[f"{e.call}-{i}" for i, e in enumerate(ERRORS)])
def test_refuses_like_torch(index: int) -> None:
    error = ERRORS[index]
    expected = getattr(builtins, str(FIXTURE[f"error/{index}/class"]))
    assert error.names in str(FIXTURE[f"error/{index}/message"])
    rng = np.random.default_rng(index)
    tensors = []
    for spec in error.inputs:
        if isinstance(spec.kind, tuple):
            tensors.append(Tensor(rng.integers(spec.kind[1], spec.kind[2], size=spec.shape)))
        else:
            tensors.append(Tensor(rng.standard_normal(spec.shape).astype(np.float32)))
    kwargs = {name: tensors[v.index] if isinstance(v, Ref) else v for name, v in error.kwargs.items()}
    referenced = {v.index for v in error.kwargs.values() if isinstance(v, Ref)}
    function = getattr(F, error.call.removeprefix("F."))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(expected) as raised:
            function(*[t for i, t in enumerate(tensors) if i not in referenced], **kwargs).realize()
    assert error.names in str(raised.value), f"kiln's message {str(raised.value)!r} does not name {error.names!r}"


def test_softmax_without_dim_warns_and_picks_torchs_dim() -> None:
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        result = F.softmax(Tensor(x))
    exps = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(result.numpy(), exps / exps.sum(axis=1, keepdims=True), rtol=1e-6)


def test_legacy_reduction_arguments_warn() -> None:
    with pytest.warns(UserWarning, match=r"reduction='none'"):
        loss = F.l1_loss(Tensor([1.0, -2.0]), Tensor([0.0, 0.0]), reduce=False)
    np.testing.assert_array_equal(loss.numpy(), [1.0, 2.0])


def test_inplace_writes_into_the_input() -> None:
    x = Tensor([-1.0, 0.5, 3.0]).contiguous().realize()
    result = F.relu(x, inplace=True)
    assert result is x
    np.testing.assert_array_equal(x.numpy(), [0.0, 0.5, 3.0])
    F.hardtanh(x, 0.0, 1.0, inplace=True)
    np.testing.assert_array_equal(x.numpy(), [0.0, 0.5, 1.0])


def test_inplace_on_a_leaf_that_requires_grad_is_refused() -> None:
    leaf = Tensor([1.0, -1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        F.relu(leaf, inplace=True)


def test_interpolate_antialias_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(Tensor.ones(1, 1, 4, 4), size=2, mode="bilinear", antialias=True)


def test_embedding_needs_integer_indices() -> None:
    with pytest.raises(TypeError, match="integer index"):
        F.embedding(Tensor([0.0, 1.0]), Tensor.ones(3, 2))


def test_embedding_max_norm_renormalizes_only_used_rows() -> None:
    weight = Tensor(np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]], np.float32))
    out = F.embedding(Tensor([[0, 1]]), weight, max_norm=1.0)
    np.testing.assert_allclose(weight.numpy(), [[0.6, 0.8], [0.3, 0.4], [6.0, 8.0]], rtol=1e-5)
    np.testing.assert_allclose(out.numpy(), [[[0.6, 0.8], [0.3, 0.4]]], rtol=1e-5)


def test_unfold_then_fold_counts_overlaps() -> None:
    # fold(unfold(x)) multiplies each pixel by how many blocks cover it: the count is an independent formula
    x = np.random.default_rng(2).standard_normal((1, 2, 4, 5)).astype(np.float32)
    columns = F.unfold(Tensor(x), (2, 2))
    back = F.fold(columns, (4, 5), (2, 2)).numpy()
    rows = np.minimum(np.minimum(np.arange(4) + 1, 4 - np.arange(4)), 2)
    cols = np.minimum(np.minimum(np.arange(5) + 1, 5 - np.arange(5)), 2)
    np.testing.assert_allclose(back, x * rows[:, None] * cols[None, :], rtol=1e-5)
