"""One walk per schedule lookup: `StructureWalk` gives the structure key and builds `normalize`'s forms from its
nodes, and `ScheduleCache.resolve` finds or plans with it. Its forms are checked against `normalize`'s own walk, and
the plans it finds are run and compared with numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from engine_graphs import FAST_DEVICE, broadcast, const_like

from kiln.tensor import Tensor, Variable
from kiln.tensor.realize.engine import Engine, use_engine
from kiln.tensor.schedule import mark_overwritten, normalize
from kiln.tensor.schedule.normalize import StructureNumbering, walk_structure
from kiln.uops import Ops, UOp


def _tensor(values: np.ndarray) -> Tensor:
    return Tensor(values, device=FAST_DEVICE)


def _graphs() -> dict[str, list[UOp]]:
    x = _tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    y = _tensor(np.full((3, 4), 2.0, np.float32)).realize()
    realized = x._binary(Ops.MUL, const_like(x, 3.0)).realize()  # stands for its buffer in later graphs
    pure = const_like(x, 2.0)._binary(Ops.MUL, const_like(x, 5.0))
    row_sum = x._reduce(Ops.ADD, (1,))
    lower = x._binary(Ops.CMPLT, const_like(x, 5.0))
    count = _tensor(np.arange(6, dtype=np.int32)).realize()
    chain = broadcast(row_sum._movement(Ops.RESHAPE, (3,)), (2, 3))._movement(Ops.PERMUTE, (1, 0))
    return dict(
        [
            ("one buffer twice", [x._binary(Ops.ADD, x)._binary(Ops.MUL, const_like(x, 1.5)).uop]),
            ("two buffers and a pure part", [x._binary(Ops.ADD, pure)._binary(Ops.MUL, y).uop]),
            ("a realized node", [realized._binary(Ops.ADD, y)._binary(Ops.MUL, const_like(x, -0.0)).uop]),
            ("a reduce through a movement chain", [chain._binary(Ops.ADD, const_like(chain, 7.0)).uop]),
            ("two roots sharing a node", [row_sum.uop, row_sum._binary(Ops.MUL, const_like(row_sum, 4.0)).uop]),
            ("a requested constant broadcast", [const_like(x, 9.0).uop, x._binary(Ops.ADD, y).uop]),
            ("bool constants", [lower._binary(Ops.OR, const_like(lower, True)).uop]),
            (
                "int constants",
                [count._binary(Ops.ADD, const_like(count, 3))._binary(Ops.MUL, const_like(count, 3)).uop],
            ),
        ]
    )


def _lifts() -> list[Callable[[int], bool] | None]:
    return [None, lambda number: True, lambda number: number % 2 == 0, lambda number: False]


_NAMES = [
    "one buffer twice",
    "two buffers and a pure part",
    "a realized node",
    "a reduce through a movement chain",
    "two roots sharing a node",
    "a requested constant broadcast",
    "bool constants",
    "int constants",
]


@pytest.mark.parametrize("name", _NAMES)
def test_the_walk_builds_what_normalize_walks_to(name: str) -> None:
    uops = _graphs()[name]
    for lift in _lifts():
        walk = walk_structure(uops, StructureNumbering())
        assert walk is not None
        built, walked = walk.normalized(lift), normalize(uops, lift)
        assert built.roots == walked.roots, name
        assert built.inputs == walked.inputs and built.constants == walked.constants, name
        assert walk.inputs == normalize(uops).inputs  # the key's inputs are normalize's (without lifting)


def test_equal_keys_for_equal_structures_and_other_keys_for_other_constants() -> None:
    numbering = StructureNumbering()
    keys = []
    for scale in (1.5, 1.5, 2.5):
        x = _tensor(np.ones((2, 5), np.float32)).realize()
        walk = walk_structure([x._binary(Ops.MUL, const_like(x, scale))._reduce(Ops.ADD, (1,)).uop], numbering)
        assert walk is not None and walk.inputs == (x.uop.src[0],)  # the BUFFER under the view
        keys.append(walk.key)
    assert keys[0] == keys[1] and keys[0] != keys[2]


def _resolved(engine: Engine, tensor: Tensor) -> tuple[np.ndarray, int, int]:
    # `tensor` realized with the plan `ScheduleCache.resolve` finds (the engine's cache), as numpy; with the plans
    # made and the programs compiled for it
    misses, built = engine.schedule.misses, engine.programs_built
    plan, inputs = engine.schedule.resolve([tensor.uop])
    (view,) = engine.run_plan(plan, inputs)
    planned, compiled = engine.schedule.misses - misses, engine.programs_built - built
    return Tensor._from_uop(view).numpy(), planned, compiled


def test_resolve_plans_once_per_structure_and_lifts_a_constant_that_varies() -> None:
    engine = Engine()
    data = np.arange(10, dtype=np.float32).reshape(2, 5)
    with use_engine(engine):
        for call, scale in enumerate((1.5, 1.5, 2.5, 3.5, 4.5)):
            x = _tensor(data + call).realize()  # a new buffer each call: the same structure
            graph = x._binary(Ops.MUL, const_like(x, scale))._reduce(Ops.ADD, (1,))
            result, planned, compiled = _resolved(engine, graph)
            np.testing.assert_allclose(result, ((data + call) * scale).sum(1, keepdims=True), rtol=1e-6)
            # planned: the first structure, then the one with the scale lifted (its third value); nothing after
            assert (planned, compiled) == ((1, 1) if call in (0, 2) else (0, 0)), call


def test_resolve_takes_the_plan_of_another_value_of_a_variable() -> None:
    engine = Engine()
    data = np.random.default_rng(41).standard_normal((16, 4)).astype(np.float32)
    n = Variable("n", 1, 16)
    with use_engine(engine):
        x = _tensor(data).realize()
        for call, value in enumerate((3, 9, 16, 3)):
            graph = (x[: n.bind(value)] * 2.0).sum(0)
            rebinds = engine.schedule.rebinds
            result, planned, compiled = _resolved(engine, graph)
            np.testing.assert_allclose(result, (data[:value] * 2.0).sum(0), rtol=1e-5, atol=1e-6)
            # planned and compiled once; later values take that plan, value 3 again finds its own
            assert (planned, compiled) == ((1, 1) if call == 0 else (0, 0)), value
            assert engine.schedule.rebinds - rebinds == (1 if call in (1, 2) else 0), value


def test_resolve_raises_for_a_graph_over_an_overwritten_buffer() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _tensor(np.ones(4, np.float32)).realize()
        stale = x._binary(Ops.ADD, const_like(x, 1.0))._binary(Ops.MUL, x)
        (buffer,) = [node for node in stale.uop.toposort() if node.op is Ops.BUFFER]
        mark_overwritten(buffer)  # what a write into x's buffer while `stale` is kept does
        with pytest.raises(RuntimeError, match="modified by an in-place operation"):
            engine.schedule.resolve([stale.uop])
