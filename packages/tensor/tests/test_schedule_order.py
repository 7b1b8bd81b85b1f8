"""The planner's ordering helpers against a brute-force reachability oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor import Tensor
from kiln.tensor.schedule.planner import _ancestors


def _reachable(edges: dict[int, set[int]], start: int) -> set[int]:
    seen: set[int] = set()
    stack = list(edges[start])
    while stack:
        unit = stack.pop()
        if unit not in seen:
            seen.add(unit)
            stack.extend(edges[unit])
    return seen


@st.composite
def _acyclic_graphs(draw: st.DrawFn) -> dict[int, set[int]]:
    count = draw(st.integers(1, 24))
    order = draw(st.permutations(range(count)))
    edges: dict[int, set[int]] = {unit: set() for unit in range(count)}
    for later in range(count):
        for earlier in range(later):
            if draw(st.booleans()) and draw(st.booleans()):
                edges[order[later]].add(order[earlier])
    return edges


@settings(max_examples=150, deadline=None)
@given(_acyclic_graphs())
def test_ancestor_masks_match_brute_force_reachability(edges: dict[int, set[int]]) -> None:
    masks = _ancestors(edges)
    for unit in edges:
        assert masks[unit] == sum(1 << ancestor for ancestor in _reachable(edges, unit))


def test_a_long_chain_does_not_recurse() -> None:
    edges = {unit: ({unit - 1} if unit else set()) for unit in range(5000)}
    assert _ancestors(edges)[4999] == (1 << 4999) - 1


def test_a_cycle_is_reported() -> None:
    with pytest.raises(RuntimeError, match="dependency cycle"):
        _ancestors({0: {2}, 1: {0}, 2: {1}})


def test_a_kernel_padding_an_empty_reduction_needs_no_producer() -> None:
    # the empty reduction is its own point but has no kernel; the consumer pads it to a non-empty shape (zeros)
    x = Tensor(np.array([1.0, 2.0], np.float32))
    empty = ((x * 2.0).reshape(1, 2).expand(0, 2) * Tensor(np.zeros((0, 2), np.float32))).sum(1, keepdim=True)
    total = empty.pad(((0, 2), (0, 3))).sum(0) + x.sum()
    np.testing.assert_array_equal(total.numpy(), np.full(4, 3.0, np.float32))
