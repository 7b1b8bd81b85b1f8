"""TinyJit's direct replay (`kiln.tensor.jit_replay.ReplayBatch`): a list of one-core native kernels replays as a flat
loop of entry-point calls on addresses worked out at capture. The values are numpy's for each new input, an input's
addresses are taken per call, and PROFILE or a kernel the loop cannot take replays through exec commands."""

from __future__ import annotations

import numpy as np

from kiln.tensor import Tensor, TinyJit
from kiln.tensor.jit_replay import ReplayBatch
from kiln.uops import Context

DEVICE = "CPU"
KERNELS = 8


def _chain() -> TinyJit[Tensor]:
    @TinyJit
    def chain(value: Tensor, other: Tensor) -> Tensor:
        for step in range(KERNELS):
            value = ((value * 0.5) + other + step).realize()
        return value

    return chain


def _expected(start: np.ndarray, other: np.ndarray) -> np.ndarray:
    value = start
    for step in range(KERNELS):
        value = ((value * np.float32(0.5)) + other + np.float32(step)).astype(np.float32)
    return value


def _batches(chain: TinyJit[Tensor]) -> list[ReplayBatch]:
    assert chain.captured is not None
    return [segment for segment in chain.captured.segments if isinstance(segment, ReplayBatch)]


def test_a_replayed_chain_runs_as_direct_calls_with_numpys_values() -> None:
    chain = _chain()
    rng = np.random.default_rng(0)
    for _ in range(6):
        start, other = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
        result = chain(Tensor(start, device=DEVICE).realize(), Tensor(other, device=DEVICE).realize())
        np.testing.assert_allclose(result.numpy(), _expected(start, other), rtol=1e-5, atol=1e-6)
    batches = _batches(chain)
    assert batches and all(batch.direct is not None for batch in batches)
    assert any(batch.direct_patched for batch in batches)  # the kernels reading an argument: addresses per call


def test_profile_replays_through_exec_commands_with_the_same_values() -> None:
    chain = _chain()
    rng = np.random.default_rng(1)
    for index in range(5):
        start, other = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
        with Context(PROFILE=1 if index >= 3 else 0):
            result = chain(Tensor(start, device=DEVICE).realize(), Tensor(other, device=DEVICE).realize())
            values = result.numpy()
        np.testing.assert_allclose(values, _expected(start, other), rtol=1e-5, atol=1e-6)


def test_each_replay_reads_its_own_arguments() -> None:
    chain = _chain()
    kept = []
    for index in range(5):
        start, other = np.full(32, index, np.float32), np.arange(32, dtype=np.float32)
        kept.append((chain(Tensor(start, device=DEVICE).realize(), Tensor(other, device=DEVICE).realize()), start))
        np.testing.assert_allclose(kept[-1][0].numpy(), _expected(start, other), rtol=1e-6)
