"""Parameter groups, state dicts and their errors (torch.optim's messages and classes), tinygrad's bridges
(requires_grad=None turned on by an optimizer) and tinygrad's LARS / Muon against a numpy re-implementation of
tinygrad's rules."""

from __future__ import annotations

import doctest
import importlib
from typing import Any

import numpy as np
import pytest

import kiln.tensor.realize.mutation as mutation_module
from kiln.tensor import Tensor, TinyJit, optim
from kiln.tensor.optim import lr_scheduler
from kiln.tensor.realize import method_cache_size

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(11)

pytestmark = pytest.mark.default_device("PYTHON")


def _param(*shape: int) -> Tensor:
    return Tensor(RNG.standard_normal(shape).astype(np.float32), requires_grad=True)


def _square_step(optimizer: optim.Optimizer, params: list[Tensor]) -> None:
    optimizer.zero_grad()
    loss = Tensor(0.0)
    for p in params:
        loss = loss + (p * p).sum()
    loss.backward()
    optimizer.step()


def test_groups_take_their_own_hyperparameters_and_the_defaults() -> None:
    a, b = _param(3), _param(2)
    start_a, start_b = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    optimizer = optim.SGD([{"params": a}, {"params": [b], "lr": 0.01}], lr=0.1, momentum=0.0)
    assert [g["lr"] for g in optimizer.param_groups] == [0.1, 0.01]
    assert optimizer.param_groups[1]["momentum"] == 0.0 and optimizer.param_groups[0]["params"] == [a]
    _square_step(optimizer, [a, b])
    np.testing.assert_allclose(a.numpy(), start_a * (1 - 0.2), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), start_b * (1 - 0.02), rtol=1e-6)
    optimizer.param_groups[0]["lr"] = 0.05  # a schedule's write reaches the update kernel
    _square_step(optimizer, [a, b])
    np.testing.assert_allclose(a.numpy(), start_a * 0.8 * 0.9, rtol=1e-6)


def test_add_param_group_and_its_errors() -> None:
    a, b = _param(2), _param(2)
    optimizer = optim.Adam([a], lr=0.1)
    optimizer.add_param_group({"params": [b], "betas": (0.5, 0.9)})
    assert optimizer.param_groups[1]["betas"] == (0.5, 0.9) and optimizer.param_groups[1]["lr"] == 0.1
    assert optimizer.params == [a, b]
    with pytest.raises(ValueError, match="more than one parameter group"):
        optimizer.add_param_group({"params": [a]})
    with pytest.raises(TypeError, match="ordered collections"):
        optimizer.add_param_group({"params": {_param(1)}})
    with pytest.raises(TypeError, match="must be a dict"):
        optimizer.add_param_group([b])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="beta parameter at index 0"):
        optimizer.add_param_group({"params": [_param(1)], "betas": (1.5, 0.9)})
    with pytest.raises(TypeError, match="iterable of Tensors or dicts"):
        optim.SGD(a, lr=0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'lr' must be a number"):
        optimizer.param_groups[0]["lr"] = "fast"


def test_state_dict_layout_and_load_errors() -> None:
    a, b, c = _param(2, 3), _param(3), _param(4)
    optimizer = optim.Adam([{"params": [a, b]}, {"params": [c], "lr": 0.01}], lr=0.1)
    assert optimizer.state_dict()["state"] == {}  # torch's: no state before the first step
    b_before = b.numpy()
    _square_step(optimizer, [a, b, c])
    saved = optimizer.state_dict()
    assert sorted(optimizer.state[a]) == ["exp_avg", "exp_avg_sq"]  # torch's optimizer.state[p] (the step is per group)
    assert [g["params"] for g in saved["param_groups"]] == [[0, 1], [2]]
    assert sorted(saved["state"]) == [0, 1, 2]
    assert sorted(saved["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    assert saved["state"][2]["step"].item() == 1.0
    np.testing.assert_allclose(saved["state"][1]["exp_avg"].numpy(), (1 - 0.9) * 2 * b_before, rtol=1e-6)
    one_group = optim.Adam([a, b, c], lr=0.1)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        one_group.load_state_dict(saved)
    other = optim.Adam([{"params": [a]}, {"params": [b, c]}], lr=0.1)
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        other.load_state_dict(saved)
    same = optim.Adam([{"params": [a, b]}, {"params": [c]}], lr=0.1)
    broken = {"state": {0: {"exp_avg": np.zeros((3, 2), np.float32)}}, "param_groups": saved["param_groups"]}
    with pytest.raises(ValueError, match=r"'exp_avg' of parameter 0 has shape \(3, 2\), expected \(2, 3\)"):
        same.load_state_dict(broken)
    with pytest.raises(ValueError, match="needs 'state' and 'param_groups'"):
        same.load_state_dict({"state": {}})
    same.load_state_dict(saved)
    assert same.param_groups[1]["lr"] == 0.01
    np.testing.assert_array_equal(same.state_of(b)["exp_avg"].numpy(), saved["state"][1]["exp_avg"].numpy())


def test_zero_grad_set_to_none_false_gives_zeros() -> None:
    a = _param(3)
    optimizer = optim.SGD([a], lr=0.1)
    (a * 3.0).sum().backward()
    optimizer.zero_grad(set_to_none=False)
    assert a.grad is not None
    np.testing.assert_array_equal(a.grad.numpy(), np.zeros(3, np.float32))
    optimizer.zero_grad()
    assert a.grad is None


def test_requires_grad_none_is_turned_on_as_in_tinygrad() -> None:
    unset = Tensor(np.ones(3, np.float32))
    frozen = Tensor(np.ones(2, np.float32), requires_grad=False)
    counter = Tensor(np.zeros((), np.int32))
    assert unset.requires_grad is None
    optimizer = optim.SGD([unset, frozen, counter], lr=0.5)
    assert unset.requires_grad is True and frozen.requires_grad is False and counter.requires_grad is None
    assert optimizer.params == [unset]
    (unset * unset).sum().backward()
    optimizer.step()
    np.testing.assert_array_equal(unset.numpy(), np.zeros(3, np.float32))  # 1 - 0.5 * 2
    np.testing.assert_array_equal(frozen.numpy(), np.ones(2, np.float32))


def test_scheduler_state_dict_round_trip_and_errors() -> None:
    optimizer = optim.SGD([_param(2)], lr=0.1, momentum=0.9)
    scheduler = lr_scheduler.OneCycleLR(optimizer, max_lr=0.4, total_steps=10)
    for _ in range(4):
        scheduler.step()
    saved = scheduler.state_dict()
    assert saved["last_epoch"] == 4 and "optimizer" not in saved
    fresh_optimizer = optim.SGD([_param(2)], lr=0.1, momentum=0.9)
    fresh = lr_scheduler.OneCycleLR(fresh_optimizer, max_lr=0.4, total_steps=10)
    fresh.load_state_dict(saved)
    fresh_optimizer.load_state_dict(optimizer.state_dict())
    for _ in range(3):
        scheduler.step()
        fresh.step()
        assert fresh.get_last_lr() == scheduler.get_last_lr()
        assert fresh_optimizer.param_groups[0]["momentum"] == optimizer.param_groups[0]["momentum"]
    with pytest.raises(ValueError, match="unexpected keys"):
        fresh.load_state_dict({"nonsense": 1})
    with pytest.raises(ValueError, match="support momentum or beta1"):
        lr_scheduler.OneCycleLR(optim.Adagrad([_param(1)]), max_lr=0.1, total_steps=4)
    with pytest.raises(ValueError, match="expected 1 values for max_lr"):
        lr_scheduler.OneCycleLR(optimizer, max_lr=[0.1, 0.2], total_steps=4)


def test_cycled_momentum_and_betas_compile_nothing_new() -> None:
    for make in (lambda p: optim.SGD(p, lr=0.1, momentum=0.9), lambda p: optim.Adam(p, lr=0.1)):
        params = [_param(4)]
        optimizer = make(params)
        scheduler = lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=8)
        compiled = 0
        for step in range(6):
            _square_step(optimizer, params)
            scheduler.step()
            if step == 1:  # SGD's first step (the buffer is the gradient) runs other kernels
                compiled = method_cache_size()
        assert method_cache_size() == compiled


def test_radam_refuses_to_step_inside_tinyjit() -> None:
    w = _param(3)
    optimizer = optim.RAdam([w], lr=0.1)

    @TinyJit
    def step() -> Tensor:
        optimizer.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        optimizer.step()
        return loss

    with pytest.raises(RuntimeError, match="outside TinyJit"):
        for _ in range(3):
            step()


def _lars_numpy(
    params: list[Array],
    steps: int,
    lr: float,
    momentum: float,
    weight_decay: float,
    ns_steps: int,
    ns_coefficients: tuple[float, ...] | None,
    nesterov: bool,
    classic: bool,
    pre_wd: bool,
    tcoef: float,
) -> list[Array]:
    """tinygrad's LARS rule in float64 on the loss sum(p**2) (gradient 2 p), the post-momentum decay applied."""
    params = [p.astype(np.float64) for p in params]
    buffers = [np.zeros_like(p) for p in params]
    for _ in range(steps):
        for i, p in enumerate(params):
            g = 2 * p
            ratio = 1.0
            if tcoef:
                r1, r2 = np.sqrt((p * p).sum()), np.sqrt((g * g).sum())
                ratio = tcoef * r1 / (r2 + weight_decay * r1) if r1 > 0 and r2 > 0 else 1.0
            if pre_wd and weight_decay > 0:
                g = g + weight_decay * p
            if classic:
                g = g * ratio * lr
            if momentum:
                buffers[i] = momentum * buffers[i] + g
                g = g + momentum * buffers[i] if nesterov else buffers[i]
            if ns_coefficients:
                x = g.reshape(g.shape[0], -1)
                tall = x.shape[0] > x.shape[1]
                x = x.T if tall else x
                x = x / (np.sqrt((x * x).sum()) + 1e-7)
                for _ in range(ns_steps):
                    gram = x @ x.T
                    total, term = ns_coefficients[0] * x, x
                    for coefficient in ns_coefficients[1:]:
                        term = gram @ term
                        total = total + coefficient * term
                    x = total
                g = (x.T if tall else x).reshape(g.shape)
            if not pre_wd and weight_decay > 0:
                p = p * (1 - weight_decay * lr)
            if not classic:
                g = g * ratio * lr
            params[i] = p - g
    return params


LARS_DEFAULTS = {
    "lr": 1e-3,
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "ns_steps": 0,
    "ns_coefficients": None,
    "nesterov": False,
    "classic": True,
    "pre_wd": True,
    "tcoef": 1e-3,
}
MUON_DEFAULTS = {
    "lr": 1e-3,
    "momentum": 0.95,
    "weight_decay": 0.1,
    "ns_steps": 5,
    "ns_coefficients": (3.4445, -4.775, 2.0315),
    "nesterov": True,
    "classic": False,
    "pre_wd": False,
    "tcoef": 0.0,
}


@pytest.mark.parametrize(
    ("kwargs", "muon"),
    [
        ({}, False),
        ({"lr": 0.1, "momentum": 0.5, "weight_decay": 0.01, "nesterov": True, "classic": False, "tcoef": 0.02}, False),
        ({"lr": 0.05, "momentum": 0.0, "weight_decay": 0.0, "tcoef": 0.0}, False),
        ({"lr": 0.05, "ns_steps": 3, "ns_coefficients": (1.5, -0.5), "pre_wd": False, "weight_decay": 0.2}, False),
        ({}, True),
        ({"lr": 0.02, "momentum": 0.9, "nesterov": False, "weight_decay": 0.3, "ns_steps": 4}, True),
    ],
)
def test_lars_and_muon_follow_tinygrads_rule(kwargs: dict[str, Any], muon: bool) -> None:
    starts = [RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal((2, 5)).astype(np.float32)]
    params = [Tensor(s, requires_grad=True) for s in starts]
    optimizer = optim.Muon(params, **kwargs) if muon else optim.LARS(params, **kwargs)
    for _ in range(4):
        _square_step(optimizer, params)
    expected = _lars_numpy(starts, 4, **{**(MUON_DEFAULTS if muon else LARS_DEFAULTS), **kwargs})
    for got, want in zip(params, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_lars_errors() -> None:
    with pytest.raises(ValueError, match="Invalid momentum value"):
        optim.LARS([_param(2)], momentum=-0.5)
    with pytest.raises(ValueError, match="Invalid ns_steps"):
        optim.Muon([_param(2, 2)], ns_steps=-1)
    with pytest.raises(ValueError, match="needs parameters with a dim"):
        optim.Muon([Tensor(np.float32(1.0), requires_grad=True)])


def test_optimizer_group_steps_all_in_one_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix, vector = _param(3, 2), _param(4)
    start_matrix, start_vector = matrix.numpy(), vector.numpy()
    both = optim.OptimizerGroup(optim.SGD([matrix], lr=0.1, momentum=0.9), optim.Adam([vector], lr=0.01))
    assert both[1].params == [vector] and both.params == [matrix, vector]
    calls: list[int] = []
    original = mutation_module.realize_uops
    monkeypatch.setattr(mutation_module, "realize_uops", lambda uops: calls.append(len(uops)) or original(uops))
    _square_step(both, [matrix, vector])  # type: ignore[arg-type]
    assert len(calls) == 1  # SGD's parameter and buffer, Adam's t, m, v and parameter: one schedule
    monkeypatch.undo()
    # the same updates as the two optimizers stepped apart
    alone = [Tensor(start_matrix.copy(), requires_grad=True), Tensor(start_vector.copy(), requires_grad=True)]
    separate = [optim.SGD([alone[0]], lr=0.1, momentum=0.9), optim.Adam([alone[1]], lr=0.01)]
    for optimizer in separate:
        _square_step(optimizer, alone)
    np.testing.assert_array_equal(matrix.numpy(), alone[0].numpy())
    np.testing.assert_array_equal(vector.numpy(), alone[1].numpy())
    with pytest.raises(TypeError, match="must be a kiln Optimizer"):
        optim.OptimizerGroup(object())  # type: ignore[arg-type]


def test_tinygrads_b1_b2_spelling() -> None:
    for cls in (optim.Adam, optim.AdamW, optim.LAMB):
        assert cls([_param(1)], b1=0.8, b2=0.9).param_groups[0]["betas"] == (0.8, 0.9)
        assert cls([_param(1)], b2=0.95).param_groups[0]["betas"] == (0.9, 0.95)
        with pytest.raises(ValueError, match="not both"):
            cls([_param(1)], betas=(0.5, 0.5), b1=0.8)


@pytest.mark.parametrize("classic", [False, True])
def test_sgd_classic_momentum_follows_tinygrad_under_a_changing_rate(classic: bool) -> None:
    start = RNG.standard_normal((3, 2)).astype(np.float32)
    w = Tensor(start.copy(), requires_grad=True)
    optimizer = optim.SGD([w], lr=0.1, momentum=0.9, weight_decay=0.01, classic=classic)
    expected, buffer = start.astype(np.float64), np.zeros(start.shape)
    for rate in (0.1, 0.05, 0.2):
        optimizer.lr = rate
        _square_step(optimizer, [w])
        gradient = 2 * expected + 0.01 * expected
        if classic:  # tinygrad's LARS with tcoef 0: lr before the momentum, the buffer starts at zero
            buffer = 0.9 * buffer + rate * gradient
            expected = expected - buffer
        else:
            buffer = 0.9 * buffer + gradient
            expected = expected - rate * buffer
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("module", ["optimizer", "adam", "adaptive", "rmsprop", "lars", "clip"])
def test_docstring_examples_run(module: str) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    globs = {"Tensor": Tensor, **{name: getattr(optim, name) for name in optim.__all__}}
    tests = doctest.DocTestFinder().find(importlib.import_module(f"kiln.tensor.optim.{module}"), globs=globs)
    assert any(test.examples for test in tests)
    for test in tests:
        runner.run(test)
    assert runner.failures == 0


def test_new_scheduler_errors() -> None:
    optimizer = optim.SGD([_param(2)], lr=0.1)
    with pytest.raises(ValueError, match="milestones must be ints"):
        lr_scheduler.MultiStepLR(optimizer, milestones=[2.5])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"factor must be in \[0, 1\]"):
        lr_scheduler.ConstantLR(optimizer, factor=2.0)
    with pytest.raises(ValueError, match="total_iters must be a positive int"):
        lr_scheduler.PolynomialLR(optimizer, total_iters=0)
