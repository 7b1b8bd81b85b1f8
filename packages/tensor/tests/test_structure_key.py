"""Structure keys (`kiln.tensor.schedule.normalize.structure_key`): a realize finds the plan of a graph seen before by
a walk that builds no nodes. Equal keys must mean equal normalized graphs, with the same inputs in the same order,
or a plan would run on the wrong buffers; checked against `normalize` on random graphs, and end to end against
numpy."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from engine_graphs import FAST_DEVICE

from kiln.tensor import Tensor
from kiln.tensor.realize import Engine, default_engine, use_engine
from kiln.tensor.schedule import normalize
from kiln.tensor.schedule.normalize import StructureKey, StructureNumbering, structure_key
from kiln.uops import Ops

NUMBERING = StructureNumbering()


@pytest.fixture(autouse=True)
def _own_engine() -> Iterator[None]:
    # these tests build many plans: they go into an engine of their own, dropped afterwards, so the default engine's
    # caches (and what they keep alive) stay as other tests expect them
    with use_engine(Engine()):
        yield


def _key(tensor: Tensor) -> StructureKey | None:
    return structure_key([tensor.uop], NUMBERING)


def _tensor(values: np.ndarray) -> Tensor:
    return Tensor(values, device=FAST_DEVICE)


def _random_graph(rng: np.random.Generator, leaves: list[Tensor]) -> tuple[Tensor, np.ndarray]:
    """A random expression over `leaves` (each (4, 6) float32) and constants, with its numpy value. Operands are
    drawn again and again, so buffers repeat; some subexpressions are realized on the way (their nodes then stand
    for their buffers)."""
    values = {id(t): t.numpy() for t in leaves}
    pool: list[tuple[Tensor, np.ndarray]] = [(t, values[id(t)]) for t in leaves]
    for _ in range(int(rng.integers(2, 7))):
        (a, av), (b, bv) = (pool[int(rng.integers(len(pool)))] for _ in range(2))
        kind = int(rng.integers(8))
        if kind == 0:
            node, value = a + b, av + bv
        elif kind == 1:
            node, value = a * b, av * bv
        elif kind == 2:
            constant = float(rng.choice([0.0, -0.0, 1.0, 2.5, -3.0]))
            node, value = a * constant, av * np.float32(constant)
        elif kind == 3:
            node, value = a.permute(1, 0).reshape(4, 6), av.T.reshape(4, 6)
        elif kind == 4:
            node, value = a.sum(1, keepdim=True).expand(4, 6) + b, av.sum(1, keepdims=True) + bv
        elif kind == 5:
            node, value = (a > b).where(a, b), np.where(av > bv, av, bv)
        elif kind == 6:
            node, value = a.max(0, keepdim=True).values - b, av.max(0, keepdims=True) - bv
        else:
            node, value = a.reshape(2, 12).flip(1).reshape(4, 6), av.reshape(2, 12)[:, ::-1].reshape(4, 6)
        if rng.random() < 0.25:
            node = node.realize()
        pool.append((node, value.astype(np.float32)))
    return pool[-1]


@pytest.mark.parametrize("seed", range(6))
def test_equal_keys_mean_equal_normalized_graphs_with_the_same_inputs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    buffers = [_tensor(rng.standard_normal((4, 6)).astype(np.float32)).realize() for _ in range(4)]
    roots_by_key: dict[tuple[int, ...], object] = {}
    for _ in range(60):
        # a few buffers per graph, drawn from a small set: structures repeat on the same and on other buffers
        leaves = [buffers[int(i)] for i in rng.integers(len(buffers), size=int(rng.integers(1, 4)))]
        graph, _ = _random_graph(rng, leaves)
        keyed = _key(graph)
        normalized = normalize([graph.uop])
        assert keyed is not None
        assert keyed.inputs == normalized.inputs
        seen = roots_by_key.setdefault(keyed.key, normalized.roots)
        assert seen == normalized.roots, "one key for two different normalized graphs"


@pytest.mark.parametrize("device", [FAST_DEVICE, "CPU"])
@pytest.mark.parametrize("seed", range(3))
def test_random_graphs_realized_twice_on_other_buffers_match_numpy(seed: int, device: str) -> None:
    engine = default_engine()
    rng = np.random.default_rng(100 + seed)
    for _ in range(12):
        state = rng.bit_generator.state
        results = []
        for _ in range(2):  # the second time the plan is found by key, with other buffers
            rng.bit_generator.state = state
            leaves = [Tensor(rng.standard_normal((4, 6)).astype(np.float32), device=device).realize() for _ in range(3)]
            graph, expected = _random_graph(rng, leaves)
            hits = engine.schedule.hits
            got = graph.numpy()
            np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
            results.append(engine.schedule.hits - hits)
        assert results[1] >= 1  # found again (by key or by the normalized graph)


def test_one_buffer_twice_and_two_buffers_have_different_keys_and_results() -> None:
    a = _tensor(np.arange(6, dtype=np.float32)).realize()
    b = _tensor(np.full(6, 10.0, np.float32)).realize()
    for _ in range(3):  # repeated: the second and third rounds run by key
        square, product = (a * a + a), (a * b + a)
        keys = [_key(t) for t in (square, product)]
        assert keys[0] is not None and keys[1] is not None and keys[0].key != keys[1].key
        np.testing.assert_array_equal(square.numpy(), np.arange(6) ** 2 + np.arange(6))
        np.testing.assert_array_equal(product.numpy(), np.arange(6) * 10.0 + np.arange(6))


def test_zero_and_negative_zero_constants_key_apart() -> None:
    x = _tensor(np.array([1.0, -2.0, 3.0], np.float32)).realize()
    for _ in range(2):
        positive, negative = (x * 0.0).exp2() * (x * 0.0), (x * 0.0).exp2() * (x * -0.0)
        keys = [_key(t) for t in (positive, negative)]
        assert keys[0] is not None and keys[1] is not None and keys[0].key != keys[1].key
        assert list(np.signbit(positive.numpy())) == [False, True, False]
        assert list(np.signbit(negative.numpy())) == [True, False, True]


def test_a_realized_part_changes_the_key_and_the_inputs() -> None:
    x = _tensor(np.arange(4, dtype=np.float32)).realize()
    inner = x * 2 + 1
    outer = inner.exp2() + x
    before = _key(outer)
    inner.realize()  # its node now stands for its buffer
    after = _key(outer)
    assert before is not None and after is not None
    assert before.key != after.key and len(after.inputs) == 2
    np.testing.assert_allclose(outer.numpy(), np.exp2(np.arange(4) * 2 + 1) + np.arange(4), rtol=1e-6)


def test_a_numbering_grown_past_its_limit_starts_again_and_forgets_its_keyed_plans() -> None:
    engine = Engine()
    engine.schedule.numbering.limit = 0  # every realize finds the numbering full
    x = _tensor(np.arange(4, dtype=np.float32)).realize()
    with use_engine(engine):
        for _ in range(3):
            graph = (x * 3).exp2() + x
            np.testing.assert_allclose(graph.numpy(), np.exp2(np.arange(4) * 3) + np.arange(4), rtol=1e-6)
            numbers = engine.schedule.numbering.numbers
            assert engine.schedule.sizes()["keyed_plans"] <= 1
        assert engine.schedule.structure_key([graph.uop]) is not None
        assert engine.schedule.numbering.numbers is not numbers and engine.schedule.sizes()["keyed_plans"] == 0
    assert engine.schedule.hits >= 2  # found again through the normalized graph


def test_keys_keep_no_node_alive() -> None:
    import gc
    import weakref

    # new constants each step (as a learning rate schedule makes): once a graph is dropped, none of its nodes may stay
    # alive through its key or the numbering. Checked on the graphs' own nodes by weak references (comparing counts
    # of live nodes was at the mercy of what other tests' caches let go of in the same worker)
    x = _tensor(np.arange(4, dtype=np.float32)).realize()
    for keyed in (False, True):
        references = []
        for step in range(200):
            graph = (x * float(step) + 0.5).exp2() * (Tensor.ones(4, device=FAST_DEVICE) * float(step))
            if keyed:
                assert _key(graph) is not None
            # the nodes computed from x (graphs of constants alone may be kept by the constant caches)
            reads_x = [
                n
                for n in graph.uop.toposort()
                if n.op is not Ops.BUFFER and any(m.op is Ops.BUFFER for m in n.toposort())
            ]
            references += [weakref.ref(node) for node in reads_x]
            del graph, reads_x
        gc.collect()
        alive = [node for node in (reference() for reference in references) if node is not None]
        assert len(references) >= 200 and not alive, (keyed, alive[:3])
