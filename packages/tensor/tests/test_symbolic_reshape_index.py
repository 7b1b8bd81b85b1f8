"""Reshapes over a bound-Variable dim that keep it as one dim map its index straight through (no division by the
variable in the kernel), against numpy, one compile across values; other symbolic reshapes still go through the
flat index and stay correct."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor, Variable
from kiln.tensor.realize.engine import Engine
from kiln.tensor.schedule.indexing import reshape_indices
from kiln.uops import Ops, UOp, dtypes

N = Variable("n", 1, 40)


def _ranges(count: int) -> tuple[UOp, ...]:
    return tuple(UOp.variable(f"r{i}", 0, 99) for i in range(count))


def _divides_by_variable(indices: tuple[UOp, ...]) -> bool:
    for index in indices:
        for node in index.toposort():
            if node.op in (Ops.IDIV, Ops.MOD) and any(
                source.op in (Ops.BIND, Ops.DEFINE_VAR) for source in node.src[1].toposort()
            ):
                return True
    return False


def test_size_one_dims_and_int_runs_around_a_variable_map_straight() -> None:
    n = N.bind(7).uop
    a, b, c, d = _ranges(4)
    # (2, n, 1, 64) -> (2, 1, n, 64): only size-1 dims move
    assert reshape_indices((a, b, c, d), (2, 1, n, 64), (2, n, 1, 64)) == (a, c, UOp.const(dtypes.index, 0), d)
    # (2, 3, n, 64) -> (6, n, 64): the int dims before the variable merge, the variable maps through
    got = reshape_indices((a, b, c), (6, n, 64), (2, 3, n, 64))
    assert got[2] is b and got[3] is c and not _divides_by_variable(got)
    # a merge of the variable with an int dim has no straight map: the flat index (with a division)
    merged = reshape_indices((a,), (4 * n,), (4, n))
    assert len(merged) == 2 and _divides_by_variable(merged)


@pytest.mark.parametrize("group", [1, 3])
def test_grouped_attention_over_a_variable_length(engine: Engine, group: int) -> None:
    """The LLM's grouped-query shape: queries (1, KVH, G, 1, D) against cache rows [:n] broadcast over G."""
    rng = np.random.default_rng(0)
    cache = rng.standard_normal((1, 2, 40, 8)).astype(np.float32)
    q = rng.standard_normal((1, 2, group, 1, 8)).astype(np.float32)
    cache_t, q_t = Tensor(cache).realize(), Tensor(q).realize()
    built = None
    for value in (5, 17, 40, 1):
        v = N.bind(value)
        keys = cache_t[:, :, :v].unsqueeze(2)
        out = ((q_t @ keys.transpose(-1, -2)).softmax(-1) @ keys).reshape(1, 2 * group, 1, 8).numpy()
        k = cache[:, :, :value][:, :, None]
        s = q @ k.transpose(0, 1, 2, 4, 3)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(out, (p @ k).reshape(1, 2 * group, 1, 8), rtol=1e-5, atol=1e-6)
        if built is None:
            built = engine.programs_built
        assert engine.programs_built == built


def test_the_issue_examples() -> None:
    """issue 37's opening lines, as a user types them: slices, arange and zeros take the bound Variable; a reshape
    whose element count would differ for other values of it is refused with a message naming the variable and its
    range (tinygrad refuses it too), while the same reshape of a tensor whose shape holds the variable works."""
    v = Variable("i", 1, 10).bind(2)
    data = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.testing.assert_array_equal(Tensor(data)[:v].numpy(), data[:2])
    np.testing.assert_array_equal(Tensor.arange(v).numpy(), np.arange(2))
    assert Tensor.zeros(v, 4).numpy().shape == (2, 4)
    with pytest.raises(ValueError, match=r"\(3, 4\) to \(i=2, .*'i' in \[1, 10\] \(bound to 2\)"):
        Tensor.rand(3, 4).reshape(v, -1)
    np.testing.assert_array_equal(Tensor(data)[:v].reshape(-1).reshape(v, -1).numpy(), data[:2])
    with pytest.raises(ValueError, match=r"shrink bounds \(\(i=2, \(i\+1\)=3\), \(0, 4\)\).*'i' in \[1, 10\]"):
        Tensor(data)[v : v + 1]
    w = Variable("i", 0, 9).bind(3)
    np.testing.assert_array_equal(Tensor(data)[w : w + 1].numpy(), data[3:4])
