"""The scheduler's cost model (schedule/cost.py): bytes and work computed by hand for small graphs, and each rule that
weighs a trade-off deciding where the two plans' costs cross (moving the machine parameters moves the decision)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.schedule import normalize, plan_schedule
from kiln.tensor.schedule.cost import (
    DEFAULT_COSTS,
    MachineCosts,
    ProductShape,
    expand_comparison,
    format_bytes,
    format_ns,
    keeps_its_tile,
    product_bytes,
    product_shape,
    products_comparison,
)
from kiln.tensor.schedule.items import KernelStep
from kiln.uops import Ops, UOp, trace

DEVICE = "PYTHON"  # planning only: nothing is compiled
COSTS = replace(DEFAULT_COSTS, fuses_rows=False)


def _buffer(*shape: int) -> Tensor:
    return Tensor(np.zeros(shape, np.float32), device=DEVICE).realize()


def _plan(costs: MachineCosts, *tensors: Tensor) -> tuple[int, list[dict[str, object]]]:
    # the kernels planned for `tensors` under `costs` and the decisions recorded in the trace
    sink = normalize([tensor.uop for tensor in tensors]).sink
    with trace.tracing():
        before = len(trace.recorded_groups())
        plan = plan_schedule(sink, costs)
        (group,) = trace.recorded_groups()[before:]
    decisions = group.info["decisions"]
    assert isinstance(decisions, list)
    return sum(isinstance(step, KernelStep) for step in plan.steps), decisions


def _reduces(tensor: Tensor) -> list[UOp]:
    return [node for node in normalize([tensor.uop]).sink.toposort() if node.op is Ops.REDUCE_AXIS]


def test_the_machine_record_refuses_parameters_that_price_nothing() -> None:
    with pytest.raises(ValueError, match="memory_bytes_per_ns must be positive, got 0"):
        MachineCosts(memory_bytes_per_ns=0)
    with pytest.raises(ValueError, match="launch_ns must be zero or positive, got -1"):
        MachineCosts(launch_ns=-1)
    assert MachineCosts(launch_ns=0).launch_ns == 0


def test_costs_are_written_in_readable_units() -> None:
    assert [format_ns(value) for value in (850, 1200, 3.4e6, 2.1e9)] == ["850 ns", "1.2 us", "3.4 ms", "2.1 s"]
    assert [format_bytes(value) for value in (512, 3 << 10, 6.5 * (1 << 20))] == ["512 B", "3 KiB", "6.5 MiB"]


def test_a_matrix_products_shape_counted_by_hand() -> None:
    x, w = _buffer(64, 768), _buffer(2048, 768)
    (reduce,) = _reduces(x @ w.T)
    shape = product_shape(reduce)
    # 64 x 2048 outputs of 768 multiply-adds; the weight (2048 x 768 floats) is the large operand, x's 64 rows each
    # re-read it without a register tile
    assert shape == ProductShape(64 * 768 * 2048, 64 * 2048, 2048 * 768 * 4, 64 * 768 * 4, 64, 4)
    (row_sum,) = _reduces(x.sum(axis=1))
    assert product_shape(row_sum) is None  # a sum of a buffer is no product


def test_operand_bytes_with_and_without_a_register_tile() -> None:
    large, small = 6 << 20, 192 << 10
    product = ProductShape(0, 0, large, small, 64, 4)
    assert product_bytes(product, False, COSTS) == small + 64 * large  # streamed once per row
    assert product_bytes(product, True, COSTS) == small + 8 * large  # once per tile of 8 rows
    cached = ProductShape(0, 0, COSTS.cache_bytes, small, 64, 4)
    assert product_bytes(cached, False, COSTS) == product_bytes(cached, True, COSTS) == small + COSTS.cache_bytes
    assert keeps_its_tile(product, COSTS) and not keeps_its_tile(cached, COSTS)


def test_products_comparison_adds_bytes_and_launches_by_hand() -> None:
    product = ProductShape(0, 1000, 6 << 20, 1 << 10, 16, 4)
    comparison = products_comparison([product, product], COSTS)
    bandwidth = COSTS.memory_bytes_per_ns
    assert comparison.fused.ns == pytest.approx(2 * ((1 << 10) + 16 * (6 << 20)) / bandwidth)
    tiled = 2 * ((1 << 10) + 2 * (6 << 20))
    assert comparison.cut.ns == pytest.approx((tiled + 2 * 2 * 1000 * 4) / bandwidth + 2 * COSTS.launch_ns)
    assert comparison.cuts


def test_expand_comparison_by_hand() -> None:
    x = _buffer(1, 1000)
    source = x.exp2().uop
    comparison = expand_comparison(source, 4000, 20.0, COSTS)
    # fused: 4000 elements, each 20 / 32 ns of work of which 4 / 10 ns hide under its memory time
    assert comparison.fused.ns == pytest.approx(4000 * (20 / 32 - 4 / 10))
    assert comparison.cut.ns == pytest.approx(2 * 1000 * 4 / 10 + COSTS.launch_ns)
    cheap = expand_comparison(source, 4000, 3.0, COSTS)
    assert cheap.fused.ns == 0 and not cheap.cuts  # 3 ops per element cost less than the element's memory time


def _sibling_products(rows: int) -> Tensor:
    x, w1, w3 = _buffer(rows, 768), _buffer(2048, 768), _buffer(2048, 768)
    return (x @ w1.T).relu() * (x @ w3.T)


def test_sibling_products_are_separated_where_the_costs_cross() -> None:
    # two (rows, 768) @ (768, 2048) products: the launch at which apart costs as much as together, by hand
    rows, weight, inputs, outputs = 16, 2048 * 768 * 4, 16 * 768 * 4, 16 * 2048 * 4
    together = 2 * (inputs + rows * weight) / COSTS.memory_bytes_per_ns
    apart_bytes = 2 * (inputs + math.ceil(rows / COSTS.tile_rows) * weight + 2 * outputs) / COSTS.memory_bytes_per_ns
    crossing = (together - apart_bytes) / 2
    below, above = replace(COSTS, launch_ns=crossing * 0.99), replace(COSTS, launch_ns=crossing * 1.01)
    kernels, decisions = _plan(below, _sibling_products(rows))
    rule = [entry for entry in decisions if entry["rule"] == "separate_sibling_products"]
    assert kernels == 3 and [entry["cut"] for entry in rule] == [True, True]
    assert "apart" in str(rule[0]["decision"]) and "< fused" in str(rule[0]["decision"])
    kernels, decisions = _plan(above, _sibling_products(rows))
    rule = [entry for entry in decisions if entry["rule"] == "separate_sibling_products"]
    assert kernels == 1 and [entry["cut"] for entry in rule] == [False, False]
    assert str(rule[0]["decision"]).startswith("one of 2 independent matrix products that would share a kernel: fused")
    # a single row re-reads each weight once either way: nothing to gain, at any launch cost
    kernels, _ = _plan(replace(COSTS, launch_ns=0), _sibling_products(1))
    assert kernels == 1


def test_sibling_products_whose_weights_fit_in_the_cache_stay_together() -> None:
    # the same products with the cache grown to the weights: no operand is streamed twice (64 rows: the weights are
    # first packed into column panels, a kernel of its own either way)
    together, decisions = _plan(replace(COSTS, cache_bytes=2048 * 768 * 4), _sibling_products(64))
    assert [entry["cut"] for entry in decisions if entry["rule"] == "separate_sibling_products"] == [False, False]
    apart, decisions = _plan(replace(COSTS, cache_bytes=2048 * 768 * 4 - 1), _sibling_products(64))
    assert [entry["cut"] for entry in decisions if entry["rule"] == "separate_sibling_products"] == [True, True]
    assert apart == together + 2


def _expanded_exp2(ratio: int) -> Tensor:
    x, y = _buffer(1, 100_000), _buffer(ratio, 100_000)
    return x.exp2().expand(ratio, 100_000) + y


@pytest.mark.parametrize(("costly_op_work", "first_cut"), [(20.0, 4), (40.0, 2)])
def test_a_costly_value_under_an_expand_gets_a_buffer_where_the_costs_cross(
    costly_op_work: float, first_cut: int
) -> None:
    # apart: 2 * 4 / 10 ns per value, no launch; fused: per expanded element, work / 32 - 4 / 10 ns. With exp2 as 20
    # ops the crossing is at 3.56 elements per value; as 40 ops, at 0.94 (every expand cuts)
    costs = replace(COSTS, launch_ns=0, costly_op_work=costly_op_work)
    spare = costly_op_work / 32 - 4 / 10
    for ratio in (2, 3, 4, 5):
        assert (ratio * spare > 0.8) is (ratio >= first_cut)
        kernels, decisions = _plan(costs, _expanded_exp2(ratio))
        (entry,) = [entry for entry in decisions if entry["rule"] == "materialize_through_expand"]
        assert kernels == (2 if ratio >= first_cut else 1), ratio
        assert entry["cut"] is (ratio >= first_cut) and entry["description"] == "EXP2 (1, 100000) dtypes.float32"
        assert f"recomputed {ratio} times per value" in str(entry["decision"])
        assert ("apart" in str(entry["decision"]).split("<")[0]) is (ratio >= first_cut)


def test_a_launch_is_worth_more_than_a_small_values_recomputation() -> None:
    # 4 exp2 per value of 1000 values: 900 ns of recomputation against a 2 us launch
    x, y = _buffer(1, 1000), _buffer(4, 1000)
    kernels, _ = _plan(COSTS, x.exp2().expand(4, 1000) + y)
    assert kernels == 1
    kernels, _ = _plan(replace(COSTS, launch_ns=0), x.exp2().expand(4, 1000) + y)
    assert kernels == 2


def test_products_that_need_their_tiles_are_not_merged_into_one_multi_output_kernel() -> None:
    # x @ w1.T and x @ w3.T both requested: same loop shape, independent, so mergeable into one kernel of two outputs,
    # unless a product's tile saves more than the launch merging saves (weights past the cache, 16 rows)
    x, w1, w3 = _buffer(16, 768), _buffer(2048, 768), _buffer(2048, 768)
    weight = 2048 * 768 * 4
    merged, _ = _plan(replace(COSTS, cache_bytes=weight), x @ w1.T, x @ w3.T)
    apart, _ = _plan(replace(COSTS, cache_bytes=weight - 1), x @ w1.T, x @ w3.T)
    assert (merged, apart) == (1, 2)


def test_row_fusion_follows_the_records_cache_and_row_length() -> None:
    # rows of 256 float32 (1 KiB) kept in their reader while the record's row cache holds them and rows are long enough
    x = _buffer(8, 256)
    centered = x - x.sum(axis=1, keepdim=True)
    fusing = replace(COSTS, fuses_rows=True, row_cache_bytes=1024, row_min_elements=256)
    for costs, kernels in (
        (fusing, 1),
        (replace(fusing, row_cache_bytes=1023), 2),
        (replace(fusing, row_min_elements=257), 2),
        (replace(fusing, fuses_rows=False), 2),
    ):
        planned, decisions = _plan(costs, centered)
        assert planned == kernels, costs
        rules = [entry["rule"] for entry in decisions if str(entry["description"]).startswith("REDUCE_AXIS")]
        assert rules == (["row_fusion"] if kernels == 1 else ["materialize_through_expand"])
