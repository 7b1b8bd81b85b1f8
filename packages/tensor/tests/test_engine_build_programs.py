"""A plan's first run builds its kernels' programs together (Engine.build_programs through codegen's get_programs,
each compile overlapping the next kernel's lowering); the values are numpy's either way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import kiln.tensor.realize.engine as engine_module
from kiln.tensor import Tensor
from kiln.tensor.realize import Engine, use_engine
from kiln.uops import UOp


def _several_kernels(values: np.ndarray) -> np.ndarray:
    x = Tensor(values, device="CPU")
    y = (x @ x).relu()  # a product read by another product and a reduce: several kernels in one plan
    return ((y @ x).sum(0) + y.sum(1)).numpy()


def _numpy(values: np.ndarray) -> np.ndarray:
    y = np.maximum(values @ values, 0)
    return (y @ values).sum(0) + y.sum(1)


def test_a_plans_kernels_are_built_together_once(monkeypatch: pytest.MonkeyPatch) -> None:
    batches: list[int] = []
    real = engine_module.get_programs

    def recording(asts: Sequence[UOp], renderer: Any) -> list[UOp]:
        batches.append(len(asts))
        return real(asts, renderer)

    monkeypatch.setattr(engine_module, "get_programs", recording)
    values = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    engine = Engine()
    with use_engine(engine):
        np.testing.assert_allclose(_several_kernels(values), _numpy(values), rtol=1e-4, atol=1e-3)
        built = engine.programs_built
        assert batches and sum(batches) == built == engine.cache_sizes()["methods"] >= 2
        np.testing.assert_allclose(_several_kernels(values + 1), _numpy(values + 1), rtol=1e-4, atol=1e-3)
    assert engine.programs_built == built and len(batches) == 1  # the second run reuses every program


def test_a_plan_whose_kernels_are_built_builds_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.random.default_rng(1).standard_normal((32, 32)).astype(np.float32)
    engine = Engine()
    with use_engine(engine):
        _several_kernels(values)
        calls: list[int] = []
        monkeypatch.setattr(engine_module, "get_programs", lambda asts, renderer: calls.append(len(asts)) or [])
        engine.schedule.clear()  # a new plan of the same kernels: its first run finds every program built
        np.testing.assert_allclose(_several_kernels(values), _numpy(values), rtol=1e-4, atol=1e-3)
    assert calls == []
