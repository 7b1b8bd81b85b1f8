"""Masked stores: STORE(idx, WHERE(gate, value, LOAD(idx))) becomes a store gated by `gate` (only the selected
positions are written). The tensor-level oracle (numpy) is packages/tensor/tests/test_masked_assign.py."""

from __future__ import annotations

from kiln.codegen.lowering.gates import pm_masked_stores
from kiln.uops import Ops, UOp, dtypes, graph_rewrite


def _kernel(gate_value: UOp, same_index: bool) -> UOp:
    buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(16), (), 0)
    other = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(16), (), 1)
    position = UOp.variable("i", 0, 15)
    index = UOp(Ops.INDEX, dtypes.float32.ptr(16), (buffer, position))
    read = UOp(Ops.INDEX, dtypes.float32.ptr(16), (buffer if same_index else other, position))
    value = UOp.const(dtypes.float32, 2.0)
    old = UOp(Ops.LOAD, dtypes.float32, (read,))
    return UOp(Ops.STORE, dtypes.void, (index, gate_value.where(value, old)))


def test_a_store_of_its_own_contents_where_the_gate_is_false_becomes_gated() -> None:
    gate = UOp.variable("i", 0, 15).eq(3)
    store = _kernel(gate, same_index=True)
    rewritten = graph_rewrite(store, pm_masked_stores)
    index, value = rewritten.src
    assert index.op is Ops.INDEX and len(index.src) == 3 and index.src[2] is gate
    assert value.op is Ops.CONST and value.arg == 2.0


def test_a_where_reading_another_buffer_is_left_alone() -> None:
    store = _kernel(UOp.variable("i", 0, 15).eq(3), same_index=False)
    assert graph_rewrite(store, pm_masked_stores) is store
