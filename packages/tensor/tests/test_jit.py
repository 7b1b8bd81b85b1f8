"""TinyJit: replays equal the plain function over 10 calls with changing data (training with dropout, a symbolic
position), replays schedule nothing in Python, and every contract violation raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln.tensor.tensor as tensor_module
from kiln.tensor import GlobalCounters, Tensor, TinyJit, Variable, nn, optim

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(5)


pytestmark = pytest.mark.default_device("CPU")


def _batches(count: int) -> list[tuple[Array, Array]]:
    return [
        (RNG.standard_normal((16, 4)).astype(np.float32), RNG.integers(0, 3, 16).astype(np.int64)) for _ in range(count)
    ]


def _training(jit: bool, batches: list[tuple[Array, Array]]) -> tuple[list[float], dict[str, Array]]:
    Tensor.manual_seed(7)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 3))
    optimizer = optim.Adam(model.parameters(), lr=0.05)

    def step(x: Tensor, y: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = model(x).cross_entropy(y)
        loss.backward()
        optimizer.step()
        return loss

    run: Callable[[Tensor, Tensor], Tensor] = TinyJit(step) if jit else step
    losses = [float(run(Tensor(x), Tensor(y)).item()) for x, y in batches]
    return losses, {name: tensor.numpy() for name, tensor in model.state_dict().items()}


def test_training_replay_equals_the_plain_function() -> None:
    batches = _batches(10)
    plain_losses, plain_state = _training(False, batches)
    jit_losses, jit_state = _training(True, batches)
    np.testing.assert_allclose(jit_losses, plain_losses, rtol=1e-6)
    for name, value in plain_state.items():
        np.testing.assert_allclose(jit_state[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    assert len(set(plain_losses)) == 10  # the data changed every call


def test_dropout_draws_new_numbers_on_every_replay() -> None:
    @TinyJit
    def mask(x: Tensor) -> Tensor:
        return x.dropout(0.5)

    Tensor.manual_seed(3)
    jitted = [mask(Tensor(np.ones(64, np.float32))).numpy() for _ in range(6)]
    Tensor.manual_seed(3)
    plain = [Tensor(np.ones(64, np.float32)).dropout(0.5).numpy() for _ in range(6)]
    for got, expected in zip(jitted, plain):
        np.testing.assert_array_equal(got, expected)
    assert len({got.tobytes() for got in jitted}) == 6


def test_symbolic_position_replays_without_recapture() -> None:
    width, capacity = 3, 16
    position = Variable("pos", 0, capacity - 1)

    def make(cache: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
        def append_and_average(x: Tensor, pos: Tensor) -> Tensor:
            rows = Tensor.arange(capacity).reshape(capacity, 1)
            cache.assign((rows == pos).where(x.reshape(1, width), cache)).realize()
            valid = (rows <= pos).where(1.0, 0.0)
            return (cache * valid).sum(0) / (pos + 1).float()

        return append_and_average

    jit_cache = Tensor(np.zeros((capacity, width), np.float32))
    plain_cache = Tensor(np.zeros((capacity, width), np.float32))
    jitted, plain = TinyJit(make(jit_cache)), make(plain_cache)
    rows = RNG.standard_normal((10, width)).astype(np.float32)
    captured_kernels = None
    for step, row in enumerate(rows):
        GlobalCounters.reset()
        got = jitted(Tensor(row), position.bind(step)).numpy()
        if step == 1:
            captured_kernels = GlobalCounters.kernel_count
        if step >= 2:
            assert GlobalCounters.kernel_count == captured_kernels
        expected = plain(Tensor(row), Tensor(np.array(step, np.int32))).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        np.testing.assert_allclose(got, rows[: step + 1].mean(0), rtol=1e-5)
    assert jitted.captured is not None
    with pytest.raises(ValueError, match=r"'pos' = 16 is outside its bounds \[0, 15\]"):
        position.bind(16)


def test_replay_schedules_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return (a @ b).relu(), (a + 1).sum()

    data = [
        (RNG.standard_normal((4, 5)).astype(np.float32), RNG.standard_normal((5, 2)).astype(np.float32))
        for _ in range(5)
    ]
    for a, b in data[:2]:
        f(Tensor(a), Tensor(b))

    def refuse(uops: Any) -> Any:
        raise AssertionError("a replay scheduled")

    for a, b in data[2:]:
        ta, tb = Tensor(a), Tensor(b)
        monkeypatch.setattr(tensor_module, "realize_uops", refuse)
        product, total = f(ta, tb)
        monkeypatch.undo()
        np.testing.assert_allclose(product.numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(total.numpy(), (a + 1).sum(), rtol=1e-5)


def _captured(function: Callable[..., Any], *args: Any) -> TinyJit[Any]:
    jitted = TinyJit(function)
    jitted(*args)
    jitted(*args)
    assert jitted.captured is not None
    return jitted


def test_argument_mismatches_raise() -> None:
    jitted = _captured(lambda x, y: x + y, Tensor(np.ones(3, np.float32)), Tensor(np.ones(3, np.float32)))
    with pytest.raises(ValueError, match=r"argument 1 \(positional\) has shape \(4,\), it was captured with \(3,\)"):
        jitted(Tensor(np.ones(3, np.float32)), Tensor(np.ones(4, np.float32)))
    with pytest.raises(TypeError, match=r"argument 0 .* dtype .*int32.* captured with .*float32"):
        jitted(Tensor(np.ones(3, np.int32)), Tensor(np.ones(3, np.float32)))
    with pytest.raises(ValueError, match="called with 1 Tensor arguments"):
        jitted(Tensor(np.ones(3, np.float32)), 2.0)
    with pytest.raises(ValueError, match="is on 'PYTHON', it was captured on 'CPU'"):
        jitted(Tensor(np.ones(3, np.float32), device="PYTHON"), Tensor(np.ones(3, np.float32)))


def test_host_reads_inside_the_function_raise_at_capture() -> None:
    def reads(x: Tensor) -> Tensor:
        if x.sum().item() > 100:  # a Python decision a replay could not repeat
            return x * 2
        return x * 3

    jitted = TinyJit(reads)
    jitted(Tensor(np.ones(3, np.float32)))
    with pytest.raises(RuntimeError, match="reads data to the host while being captured"):
        jitted(Tensor(np.ones(3, np.float32)))


def test_rebound_closed_over_tensors_raise() -> None:
    layer = nn.Linear(2, 2)
    jitted = _captured(lambda x: layer(x), Tensor(np.ones((1, 2), np.float32)))
    jitted(Tensor(np.ones((1, 2), np.float32)))  # unchanged: fine
    layer.weight = Tensor(np.zeros((2, 2), np.float32))
    with pytest.raises(RuntimeError, match=r"layer\.weight is no longer the tensor"):
        jitted(Tensor(np.ones((1, 2), np.float32)))

    scale = Tensor(np.full(2, 2.0, np.float32))

    def scaled(x: Tensor) -> Tensor:
        return x * scale

    jitted = _captured(scaled, Tensor(np.ones(2, np.float32)))
    scale = Tensor(np.full(2, 3.0, np.float32))
    with pytest.raises(RuntimeError, match="scale is no longer the tensor"):
        jitted(Tensor(np.ones(2, np.float32)))


@pytest.mark.parametrize("key", ["w", 3])
def test_rebound_tensors_in_a_dict_raise_whatever_their_key(key: object) -> None:
    weights = {"other": Tensor(np.ones(2, np.float32)), key: Tensor(np.full(2, 2.0, np.float32))}
    jitted = _captured(lambda x: x * weights[key], Tensor(np.ones(2, np.float32)))
    np.testing.assert_array_equal(jitted(Tensor(np.full(2, 5.0, np.float32))).numpy(), [10.0, 10.0])
    weights["other"] = Tensor(np.zeros(2, np.float32))  # not read by the function: still fine
    jitted(Tensor(np.ones(2, np.float32)))
    weights[key] = Tensor(np.full(2, 3.0, np.float32))
    with pytest.raises(RuntimeError, match="is no longer the tensor"):
        jitted(Tensor(np.ones(2, np.float32)))


def test_seed_change_after_capture_raises() -> None:
    jitted = _captured(lambda x: x + Tensor.rand(3), Tensor(np.ones(3, np.float32)))
    Tensor.manual_seed(12345)
    with pytest.raises(RuntimeError, match="random seed changed since capture"):
        jitted(Tensor(np.ones(3, np.float32)))
    jitted.reset()
    jitted(Tensor(np.ones(3, np.float32)))
    jitted(Tensor(np.ones(3, np.float32)))
    assert jitted(Tensor(np.ones(3, np.float32))).shape == (3,)


def test_python_return_values_raise() -> None:
    jitted = TinyJit(lambda x: (x * 2, 1.5))
    jitted(Tensor(np.ones(3, np.float32)))
    with pytest.raises(TypeError, match=r"result\[1\] is a float"):
        jitted(Tensor(np.ones(3, np.float32)))


def test_learning_rate_changes_reach_replays_and_setting_it_inside_raises() -> None:
    w = Tensor(np.ones(2, np.float32), requires_grad=True)
    optimizer = optim.SGD([w], lr=0.1)

    @TinyJit
    def step() -> None:
        optimizer.zero_grad()
        w.sum().backward()  # gradient 1
        optimizer.step()

    expected = 1.0
    for lr in (0.1, 0.1, 0.2, 0.3, 0.05):
        optimizer.lr = lr
        step()
        expected -= lr
    np.testing.assert_allclose(w.numpy(), [expected, expected], rtol=1e-6)

    def sets_rate(x: Tensor) -> Tensor:
        optimizer.lr = 0.5
        return x + 1

    jitted = TinyJit(sets_rate)
    jitted(Tensor(np.ones(2, np.float32)))
    with pytest.raises(RuntimeError, match="learning rate"):
        jitted(Tensor(np.ones(2, np.float32)))


def test_python_arguments_must_repeat_and_tensors_must_not_hide_in_containers() -> None:
    jitted = _captured(lambda x, scale: x * scale, Tensor(np.ones(2, np.float32)), 2.0)
    np.testing.assert_array_equal(jitted(Tensor(np.full(2, 3.0, np.float32)), 2.0).numpy(), [6.0, 6.0])
    with pytest.raises(ValueError, match=r"1 \(positional\) = 3.0 \(captured with 2.0\)"):
        jitted(Tensor(np.ones(2, np.float32)), 3.0)
    nested = TinyJit(lambda pair: pair[0] + pair[1])
    with pytest.raises(TypeError, match="holds Tensors inside a list"):
        nested([Tensor([1.0]), Tensor([2.0])])
    other = Variable("other", 0, 15)
    position = Variable("pos", 0, 15)
    jitted = _captured(lambda x, pos: x + pos.float(), Tensor(np.ones(2, np.float32)), position.bind(1))
    np.testing.assert_array_equal(jitted(Tensor(np.ones(2, np.float32)), position.bind(4)).numpy(), [5.0, 5.0])
    with pytest.raises(ValueError, match="non-Tensor arguments differ"):
        jitted(Tensor(np.ones(2, np.float32)), other.bind(4))


def test_batchnorm_statistics_update_on_every_replay() -> None:
    def run(jit: bool) -> dict[str, Array]:
        Tensor.manual_seed(2)
        model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
        optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x: Tensor, y: Tensor) -> Tensor:
            optimizer.zero_grad()
            loss = model(x).cross_entropy(y)
            loss.backward()
            optimizer.step()
            return loss

        runner = TinyJit(step) if jit else step
        for x, y in batches:
            runner(Tensor(x), Tensor(y))
        return {name: tensor.numpy() for name, tensor in model.state_dict().items()}

    batches = _batches(8)
    plain, jitted = run(False), run(True)
    assert plain["1.num_batches_tracked"] == 8
    for name, value in plain.items():
        np.testing.assert_allclose(jitted[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_jitted_methods_watch_their_instance() -> None:
    class Scaler:
        def __init__(self) -> None:
            self.weight = Tensor(np.full(2, 2.0, np.float32))

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return x * self.weight

    scaler = Scaler()
    results = [scaler(Tensor(np.full(2, float(i), np.float32))).numpy() for i in range(4)]
    np.testing.assert_array_equal(results[-1], [6.0, 6.0])
    scaler.weight = Tensor(np.full(2, 5.0, np.float32))
    with pytest.raises(RuntimeError, match=r"argument 0 \(positional\)\.weight is no longer the tensor"):
        scaler(Tensor(np.ones(2, np.float32)))


def test_outputs_fed_back_as_inputs_are_read_before_being_overwritten() -> None:
    weight = RNG.standard_normal((256, 256)).astype(np.float32) * 0.1
    w = Tensor(weight)

    @TinyJit
    def cell(h: Tensor) -> Tensor:
        return (h @ w).tanh()

    h = Tensor(np.ones((2, 256), np.float32))
    expected = np.ones((2, 256), np.float32)
    for _ in range(8):
        h = cell(h)
        expected = np.tanh(expected.astype(np.float64) @ weight)
        np.testing.assert_allclose(h.numpy(), expected, rtol=1e-4, atol=2e-5)  # float32 sums of 256 terms


def test_a_jitted_function_inside_another_is_captured_by_the_outer_one() -> None:
    @TinyJit
    def inner(x: Tensor) -> Tensor:
        return (x * 3).contiguous()

    @TinyJit
    def outer(x: Tensor) -> Tensor:
        return inner(x + 1) - 2

    for value in range(5):
        np.testing.assert_array_equal(outer(Tensor(np.full(2, float(value), np.float32))).numpy(), [3 * value + 1] * 2)
    assert outer.captured is not None and inner.captured is None
