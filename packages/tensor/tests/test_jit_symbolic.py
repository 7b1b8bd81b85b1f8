"""TinyJit over symbolic shapes: bound Variables as arguments used in shapes, and Tensor arguments whose shapes hold
bound Variables. Every replay is checked against numpy, and no replay compiles a program."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor, TinyJit, Variable
from kiln.tensor.realize.engine import Engine

N = Variable("n", 1, 8)
DATA = np.arange(32, dtype=np.float32).reshape(8, 4)
VALUES = [3, 5, 1, 8, 2]


def test_variable_argument_sizes_replay_without_compiling(engine: Engine) -> None:
    x = Tensor(DATA).realize()

    @TinyJit
    def step(v: Tensor, scale: Tensor) -> Tensor:
        # v is the variable as a size (slice, zeros, arange) and its value in arithmetic
        rows = x[:v] * scale + Tensor.zeros(v, 4)
        return rows + Tensor.arange(v).float().reshape(v, 1) + v.float()

    built = None
    for call, n in enumerate(VALUES):
        out = step(N.bind(n), Tensor(np.float32(2.0)))
        expected = DATA[:n] * 2 + np.arange(n, dtype=np.float32)[:, None] + n
        np.testing.assert_array_equal(out.numpy(), expected)
        assert out.numpy().shape == (n, 4)
        if call == 1:
            built = engine.programs_built
    assert step.captured is not None and built is not None
    assert engine.programs_built == built, "a replay compiled a program"


def test_symbolic_tensor_argument_replays_by_structure(engine: Engine) -> None:
    x = Tensor(DATA).realize()
    weight = Tensor(np.linspace(-1, 1, 4, dtype=np.float32)).realize()

    @TinyJit
    def step(rows: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        return (rows * w).sum(1), (rows + 1).sum(0)

    built = None
    for call, n in enumerate(VALUES):
        sums, tops = step(x[: N.bind(n)], w=weight)
        w = np.linspace(-1, 1, 4, dtype=np.float32)
        np.testing.assert_allclose(sums.numpy(), (DATA[:n] * w).sum(1), rtol=1e-6)
        np.testing.assert_array_equal(tops.numpy(), (DATA[:n] + 1).sum(0))
        if call == 1:
            built = engine.programs_built
    assert engine.programs_built == built, "a replay compiled a program"


def test_variable_argument_and_symbolic_tensor_together(engine: Engine) -> None:
    other = np.arange(8, dtype=np.float32) * 10
    x = Tensor(DATA).realize()
    y = Tensor(other).realize()
    step = TinyJit(lambda rows, v, col: rows.sum(1) + col[:v])
    for n in VALUES:
        out = step(x[: N.bind(n)], N.bind(n), y)
        np.testing.assert_array_equal(out.numpy(), DATA[:n].sum(1) + other[:n])
    with pytest.raises(ValueError, match=r"variable 'n' to 4, another argument to 3"):
        step(x[: N.bind(3)], N.bind(4), y)


def test_a_different_structure_raises() -> None:
    x = Tensor(DATA).realize()
    step = TinyJit(lambda rows: rows * 2)
    for n in (2, 3):
        step(x[: N.bind(n)])
    with pytest.raises(ValueError, match=r"argument 0 \(positional\) has shape \(m=3, 4\).*captured with \(n=3, 4\)"):
        step(x[: Variable("m", 1, 8).bind(3)])
    with pytest.raises(ValueError, match=r"has shape \(3, 4\)"):
        step(x[:3])
    with pytest.raises(ValueError, match=r"has shape \(n=2, 2\)"):
        step(x[: N.bind(2), :2])


def test_missing_or_unbound_variable_raises_naming_it() -> None:
    x = Tensor(DATA).realize()
    step = TinyJit(lambda v: x[:v] * 2)
    for n in (2, 3):
        step(N.bind(n))
    with pytest.raises(ValueError, match=r"variable 'n' \(range \[1, 8\]\) unbound"):
        step(N)
    with pytest.raises(ValueError, match=r"no value for variable 'n' \(range \[1, 8\]\)"):
        step()
    with pytest.raises(ValueError, match=r"arguments differ.*name='k'.*captured with Variable\(name='n'"):
        step(Variable("k", 1, 8).bind(2))


def test_closure_variable_keeps_its_captured_value() -> None:
    x = Tensor(DATA).realize()
    v = N.bind(3)
    step = TinyJit(lambda scale: (x[:v] * scale).sum(0))
    for value in (2.0, 3.0, 4.0):
        out = step(Tensor(np.float32(value)))
        np.testing.assert_array_equal(out.numpy(), (DATA[:3] * value).sum(0))


def test_int_arithmetic_on_a_variable_argument_stays_a_size(engine: Engine) -> None:
    # a decode step: write the key at `pos` into a cache, attend over the rows 0..pos (pos + 1 of them)
    position = Variable("pos", 0, 15)
    keys = np.random.default_rng(37).standard_normal((16, 4)).astype(np.float32)
    cache = Tensor.zeros(16, 4).contiguous().realize()

    @TinyJit
    def step(pos: Tensor, key: Tensor) -> Tensor:
        cache[pos : pos + 1] = key.reshape(1, 4)
        seen = cache[: pos + 1]
        scores = (key.reshape(1, 4) @ seen.T) / 2
        return (scores.softmax(-1) @ seen).realize()

    built = None
    for pos in range(12):
        out = step(position.bind(pos), Tensor(keys[pos]))
        seen = keys[: pos + 1]
        scores = keys[pos : pos + 1] @ seen.T / 2
        weights = np.exp(scores - scores.max())
        np.testing.assert_allclose(out.numpy(), (weights / weights.sum()) @ seen, rtol=1e-5, atol=1e-6)
        if pos == 1:
            built = engine.programs_built
    assert engine.programs_built == built, "a replay compiled a program"
    np.testing.assert_array_equal(cache.numpy()[:12], keys[:12])


def test_expressions_of_a_variable_tensor_as_sizes() -> None:
    x = Tensor(DATA).realize()
    v = Tensor(Variable("k", 1, 4).bind(3))  # 2 * k and k + 1 stay inside the 8 rows
    np.testing.assert_array_equal(x[: v + 1].numpy(), DATA[:4])
    np.testing.assert_array_equal(x[: 2 * v].numpy(), DATA[:6])
    np.testing.assert_array_equal(x[v - 1 : v].numpy(), DATA[2:3])
    np.testing.assert_array_equal(x[: 8 - v].numpy(), DATA[:5])
    assert (v + 1).item() == 4 and (v * 2 - v).item() == 3  # the values, as before
    with pytest.raises(ValueError, match=r"can be negative"):
        x[: v - 2]  # k - 2 < 0 for k = 1
    with pytest.raises(TypeError):
        x[: v + 0.5]  # a float is no size


def test_reductions_scans_and_random_over_a_variable_replay(engine: Engine) -> None:
    ties = np.random.default_rng(38).integers(-3, 4, (8, 4)).astype(np.float32)
    x = Tensor(ties).realize()

    def plain(rows: Tensor, v: Tensor) -> tuple[Tensor, ...]:
        part = rows[:v]
        return part.argmax(0), part.cumsum(0), part.sort(0)[1], part.median(0)[0], Tensor.rand(v, 3)

    step = TinyJit(plain)
    Tensor.manual_seed(3)
    replayed = []
    built = None
    for call, n in enumerate(VALUES):
        replayed.append([out.numpy() for out in step(x, N.bind(n))])
        if call == 1:
            built = engine.programs_built
    assert engine.programs_built == built, "a replay compiled a program"
    Tensor.manual_seed(3)
    for n, outputs in zip(VALUES, replayed):
        want = ties[:n]
        np.testing.assert_array_equal(outputs[0], want.argmax(0))
        np.testing.assert_array_equal(outputs[1], np.cumsum(want, 0))
        np.testing.assert_array_equal(outputs[2], np.argsort(want, 0, kind="stable"))
        np.testing.assert_array_equal(outputs[3], np.sort(want, 0)[(n - 1) // 2])
        uniform = plain(x, N.bind(n))[4].numpy()  # the plain function draws the same stream
        np.testing.assert_array_equal(outputs[4], uniform)
        assert uniform.shape == (n, 3) and ((uniform >= 0) & (uniform < 1)).all()


def test_kernels_over_variables_replay_in_one_batch_with_the_calls_values(engine: Engine) -> None:
    """A capture mixing kernels over a Variable with int-shaped ones (a KV-cache write at `pos`, attention over
    rows 0..pos, a fixed-size projection) replays as one list of commands on the CPU: each kernel over the variable
    gets the call's value and launch size in that list (launched one by one, they split a decode step into dozens
    of lists). Checked against numpy at every position, and for the segment count."""
    from kiln.tensor.jit_replay import ReplayBatch

    positions = Variable("pos", 0, 7)
    cache = Tensor.zeros(8, 4).contiguous().realize()
    weight = Tensor(DATA[:4]).realize()
    rows = np.zeros((8, 4), np.float32)

    @TinyJit
    def decode(token: Tensor, pos: Tensor) -> Tensor:
        cache[pos : pos + 1].assign(token @ weight).realize()
        keys = cache[: pos + 1]
        scores = (token @ weight) @ keys.T
        return (scores.softmax(-1) @ keys) @ weight

    for position in range(8):
        token = np.full((1, 4), position + 1, np.float32)
        got = decode(Tensor(token), positions.bind(position)).numpy()
        rows[position] = token @ DATA[:4]
        keys = rows[: position + 1]
        scores = (token @ DATA[:4]) @ keys.T
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        np.testing.assert_allclose(got, (weights @ keys) @ DATA[:4], rtol=1e-5)
    captured = decode.captured
    assert captured is not None and any(step.var_vals for step in captured.steps)
    batches = [segment for segment in captured.segments if isinstance(segment, ReplayBatch)]
    assert len(batches) == 1 and len(captured.segments) <= 2, captured.segments
