"""`write_many`'s test of which values read another write's target (`reads_other_target`, one memo walk shared by
the values of an update): values that read each other's targets, one shared graph, and values reading only their
own target give numpy's simultaneous update, and the shared memo finds the buffers each value reads."""

from __future__ import annotations

import numpy as np

from kiln.tensor import Tensor
from kiln.tensor.realize.graph_reads import reads_by_storage, reads_other_target, storages_read
from kiln.tensor.realize.mutation import write_many

DEVICE = "CPU"


def _tensor(values: np.ndarray) -> Tensor:
    return Tensor(values, device=DEVICE).realize()


def test_values_reading_each_others_targets_update_simultaneously() -> None:
    a0, b0, c0 = (np.arange(6, dtype=np.float32) * k for k in (1.0, 2.0, 3.0))
    a, b, c = _tensor(a0), _tensor(b0), _tensor(c0)
    shared = (a * b).sum()  # one graph all three values read
    write_many([(a, b + shared), (b, a - c), (c, c * 2 + shared)])
    total = np.float32((a0 * b0).sum())
    np.testing.assert_allclose(a.numpy(), b0 + total, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), a0 - c0, rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), c0 * 2 + total, rtol=1e-6)


def test_values_reading_only_their_own_targets_update_in_place() -> None:
    a0, b0 = np.linspace(-1, 1, 8, dtype=np.float32), np.linspace(2, 3, 8, dtype=np.float32)
    a, b = _tensor(a0), _tensor(b0)
    grad = _tensor(np.full(8, 0.5, np.float32))
    write_many([(a, a - grad * 0.1), (b, b - grad * 0.2)])
    np.testing.assert_allclose(a.numpy(), a0 - np.float32(0.5) * np.float32(0.1), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0 - np.float32(0.5) * np.float32(0.2), rtol=1e-6)


def test_a_shared_memo_finds_the_buffers_each_value_reads() -> None:
    a, b, c = (_tensor(np.full(4, k, np.float32)) for k in (1.0, 2.0, 3.0))
    storages = {id(t.data_buffer()): t.data_buffer() for t in (a, b, c)}
    common = (a + b).exp()
    # (target, value, the tensors whose buffers the value reads), walked in this order with one memo
    values = [(a, common * a, (a, b)), (b, (b * 2).sqrt(), (b,)), (c, common + c, (a, b, c)), (a, (c + 1) * 3, (c,))]
    memo: dict = {}
    for target, value, read in values:
        own, expected = target.data_buffer(), {id(t.data_buffer()) for t in read}
        assert storages_read(value.uop, storages, memo) == expected == set(reads_by_storage(value.uop, storages))
        assert reads_other_target(value.uop, own, storages, memo) == bool(expected - {id(own)})
    assert not reads_other_target(values[1][1].uop, b.data_buffer(), {id(b.data_buffer()): b.data_buffer()})
