"""kiln.tensor.distributed in a single process (an MPI world of one rank; the 2-rank tests are in tests/mpi, run by
scripts/ci.d/30-mpi.sh): the API before and after init(), the error without mpi4py, collectives of one rank,
checkpoints and DataParallel's buckets."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kiln.tensor import Tensor, nn
from kiln.tensor import distributed as dist
from kiln.tensor.distributed import communicator


@pytest.fixture
def no_world() -> Iterator[None]:
    saved = communicator._world
    communicator.set_world(None)
    yield
    communicator.set_world(saved)


@pytest.fixture
def one_rank() -> Iterator[dist.World]:
    saved = communicator._world
    communicator.set_world(None)
    yield dist.init(timeout=5, abort_on_error=False)
    communicator.set_world(saved)


def test_use_before_init_names_init(no_world: None) -> None:
    assert not dist.is_initialized()
    with pytest.raises(dist.DistributedError, match=r"call kiln.tensor.distributed.init\(\) first"):
        dist.rank()
    with pytest.raises(dist.DistributedError, match="not initialized"):
        dist.all_reduce(Tensor([1.0]))


def test_missing_mpi4py_says_what_to_install(no_world: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `from mpi4py import MPI` fail
    with pytest.raises(dist.DistributedError, match=r"needs mpi4py.*'mpi' extra.*openmpi-bin"):
        dist.init(abort_on_error=False)
    assert not dist.is_initialized()


def test_one_rank_world(one_rank: dist.World) -> None:
    assert dist.is_initialized() and dist.init() is one_rank
    assert (dist.rank(), dist.world_size()) == (0, 1)
    values = np.array([[1.5, -2.0], [0.0, 4.0]], dtype=np.float32)
    for op in ("sum", "max", "min", "prod"):
        result = dist.all_reduce(Tensor(values).to("CPU:1"), op)
        assert result.device == "CPU:1"
        np.testing.assert_array_equal(result.numpy(), values)
    np.testing.assert_array_equal(dist.all_gather(Tensor(values)).numpy(), values)
    np.testing.assert_array_equal(dist.broadcast(Tensor(values), 0).numpy(), values)
    dist.barrier()


def test_bad_arguments_are_refused(one_rank: dist.World) -> None:
    with pytest.raises(ValueError, match="unknown reduction 'mean'"):
        dist.all_reduce(Tensor([1.0]), "mean")
    with pytest.raises(ValueError, match=r"broadcast root must be a rank in 0..0, got 1"):
        dist.broadcast(Tensor([1.0]), 1)
    with pytest.raises(ValueError, match="at least one dimension"):
        dist.all_gather(Tensor(1.0))
    with pytest.raises(ValueError, match="bucket_bytes must be positive, got 0"):
        dist.DataParallel([], bucket_bytes=0)


def test_checkpoint_round_trip(one_rank: dist.World, tmp_path: Path) -> None:
    values = np.arange(6, dtype=np.float32).reshape(3, 2)
    dist.save_checkpoint({"w": Tensor(values)}, tmp_path / "model.safetensors")
    np.testing.assert_array_equal(dist.load_checkpoint(tmp_path / "model.safetensors")["w"].numpy(), values)


def test_data_parallel_buckets_last_parameters_first(one_rank: dist.World) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))  # 32 + 8 + 16 + 2 floats
    parallel = dist.DataParallel(model.parameters(), bucket_bytes=4 * 20)
    assert parallel.buckets == [[3, 2], [1], [0]]
    before = [p.numpy().copy() for p in model.parameters()]
    parallel.sync_parameters()
    for p, old in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), old)
    parallel.average_gradients()  # one rank: the gradients stay as they are (here: none)
    assert all(p.grad is None for p in model.parameters())
