"""BEAM=N end to end: the engine times candidate programs on the device, the chosen opts give the same numbers as
numpy, and the result is cached on disk per kernel and device (a fresh engine searches no more)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.realize import Engine, engine, use_engine
from kiln.uops import Context


def test_beam_searches_once_then_reads_the_disk_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    timed: list[str] = []
    real_timer = engine._device_timer

    def counting_timer(device: str):  # type: ignore[no-untyped-def]
        timer = real_timer(device)

        def run(program):  # type: ignore[no-untyped-def]
            timed.append(program.name)
            return timer(program)

        return run

    monkeypatch.setattr(engine, "_device_timer", counting_timer)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 48)).astype(np.float32), rng.standard_normal((48,)).astype(np.float32)
    with Context(BEAM=2, CACHEDIR=str(tmp_path)):
        first = Engine()
        with use_engine(first):
            got = (Tensor(a, device="CPU") * Tensor(b, device="CPU")).sum(1).numpy()
        np.testing.assert_allclose(got, (a * b).sum(1), rtol=1e-5, atol=1e-5)
        assert len(timed) > 1  # the baseline and at least one candidate were run on the device
        searched = len(timed)
        assert any((tmp_path / "beam").rglob("*.bin"))
        second = Engine()
        with use_engine(second):
            again = (Tensor(a, device="CPU") * Tensor(b, device="CPU")).sum(1).numpy()
        np.testing.assert_array_equal(again, got)
        assert len(timed) == searched  # the disk cache answered: nothing was timed again
        programs = [m.program for m in second._methods.values()]
        assert programs and all(m.program.applied_opts == n.program.applied_opts
                                for m, n in zip(first._methods.values(), second._methods.values()))  # fmt: skip


def test_without_beam_nothing_is_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(device: str):  # type: ignore[no-untyped-def]
        raise AssertionError("BEAM=0 must not time anything")

    monkeypatch.setattr(engine, "_device_timer", refuse)
    with use_engine(Engine()):
        np.testing.assert_array_equal(Tensor([1.0, 2.0], device="CPU").exp2().numpy(), [2.0, 4.0])
