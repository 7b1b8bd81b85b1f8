"""kiln.tensor.distributed under `mpirun -n 2` (run by scripts/ci.d/30-mpi.sh; the file name keeps it out of the
single-process suite): the collectives against numpy, DataParallel against one process training on the combined
batch, and checkpoints written by rank 0 and read by every rank.

Every rank runs the same tests in the same order, so each collective is met by all ranks. Each rank derives every
rank's inputs from one seed, so the expected result is computed locally with numpy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes, nn, optim
from kiln.tensor import distributed as dist

WORLD = dist.init(timeout=60)
pytestmark = pytest.mark.skipif(WORLD.size < 2, reason="needs at least 2 MPI ranks: mpirun -n 2 pytest <this file>")

DTYPES = ["float32", "float16", "float64", "int8", "int32", "int64", "uint8", "uint32", "bool"]


def _rank_values(rank: int, shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed * 1000 + rank)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith("float"):
        return rng.uniform(-2, 2, shape).astype(dtype)
    return rng.integers(0 if dtype == "uint8" else -5, 6, shape).astype(dtype)


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 0)])
def test_all_reduce_matches_numpy(op: str, dtype: str, shape: tuple[int, ...]) -> None:
    arrays = [_rank_values(rank, shape, dtype, seed=len(shape)) for rank in range(WORLD.size)]
    if dtype == "bool":
        table = {"sum": np.logical_or, "max": np.logical_or, "min": np.logical_and, "prod": np.logical_and}
    else:
        table = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
    expected = arrays[0].astype(np.float32) if dtype == "float16" else arrays[0]
    for array in arrays[1:]:
        expected = table[op](expected, array.astype(np.float32) if dtype == "float16" else array)
    result = dist.all_reduce(Tensor(arrays[WORLD.rank]), op)
    assert result.dtype == Tensor(arrays[0]).dtype and result.shape == shape
    np.testing.assert_allclose(
        result.numpy(), np.asarray(expected).astype(dtype), rtol=1e-3 if dtype == "float16" else 1e-6
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_gather_of_unequal_sizes_matches_numpy(dtype: str) -> None:
    sizes = [3, 0, 2, 1][: WORLD.size] + [1] * max(0, WORLD.size - 4)
    arrays = [_rank_values(rank, (sizes[rank], 4), dtype, seed=9) for rank in range(WORLD.size)]
    result = dist.all_gather(Tensor(arrays[WORLD.rank]))
    np.testing.assert_array_equal(result.numpy(), np.concatenate(arrays))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (5,), (2, 3)])
def test_broadcast_matches_numpy(dtype: str, shape: tuple[int, ...]) -> None:
    root = WORLD.size - 1
    arrays = [_rank_values(rank, shape, dtype, seed=11) for rank in range(WORLD.size)]
    result = dist.broadcast(Tensor(arrays[WORLD.rank]), root)
    np.testing.assert_array_equal(result.numpy(), arrays[root])


def test_mismatched_shapes_raise_on_every_rank() -> None:
    with pytest.raises(ValueError, match="needs the same dtype and shape on every rank"):
        dist.all_reduce(Tensor(np.zeros(2 + WORLD.rank, np.float32)))
    with pytest.raises(ValueError, match=rf"broadcast root must be a rank in 0\.\.{WORLD.size - 1}"):
        dist.broadcast(Tensor([1.0]), root=WORLD.size)


def _model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("bucket_bytes", [64, 1 << 20])
def test_data_parallel_step_equals_one_process_on_the_combined_batch(overlap: bool, bucket_bytes: int) -> None:
    rng = np.random.default_rng(4)
    images = rng.standard_normal((4 * WORLD.size, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 4 * WORLD.size)

    Tensor.manual_seed(100 + WORLD.rank)  # every rank starts differently: sync_parameters must fix that
    replica = _model()
    parallel = dist.DataParallel(replica.parameters(), bucket_bytes=bucket_bytes, overlap=overlap)
    parallel.sync_parameters(root=0)
    single = _model()
    for p, q in zip(single.parameters(), replica.parameters()):
        p.assign(Tensor(q.numpy()))
    first = dist.all_gather(Tensor(next(iter(replica.parameters())).numpy()[None])).numpy()
    np.testing.assert_array_equal(first[0], first[-1])  # every rank now holds rank 0's values
    single_optimizer = optim.SGD(single.parameters(), lr=0.1, momentum=0.9)
    replica_optimizer = optim.SGD(replica.parameters(), lr=0.1, momentum=0.9)

    for step in range(3):
        batch = slice(4 * WORLD.rank, 4 * WORLD.rank + 4)
        single_optimizer.zero_grad()
        single(Tensor(images)).cross_entropy(Tensor(labels)).backward()
        single_optimizer.step()
        replica_optimizer.zero_grad()
        replica(Tensor(images[batch])).cross_entropy(Tensor(labels[batch])).backward()
        parallel.average_gradients()
        replica_optimizer.step()
        for p, q in zip(single.parameters(), replica.parameters()):
            np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
    # every rank ends with the same parameters
    for q in replica.parameters():
        gathered = dist.all_gather(Tensor(q.numpy()[None]))
        np.testing.assert_array_equal(gathered.numpy()[0], gathered.numpy()[-1])


def _rank_zero_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rank 0's temporary directory, its name sent to every rank (the ranks share this machine's file system)."""
    name = str(tmp_path_factory.mktemp("checkpoint")).encode().ljust(512)
    received = dist.broadcast(Tensor(np.frombuffer(name, np.uint8).copy()), root=0)
    return Path(received.numpy().tobytes().decode().strip())


def test_rank_zero_writes_every_rank_loads(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = _rank_zero_directory(tmp_path_factory) / "model.safetensors"
    values = np.arange(6, dtype=np.float32).reshape(2, 3) * (WORLD.rank + 1)  # rank 0's values are the ones saved
    dist.save_checkpoint({"w": Tensor(values), "step": Tensor([7], dtype=dtypes.int64)}, path)
    loaded = dist.load_checkpoint(path)
    np.testing.assert_array_equal(loaded["w"].numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert loaded["step"].tolist() == [7]
    dist.barrier()
