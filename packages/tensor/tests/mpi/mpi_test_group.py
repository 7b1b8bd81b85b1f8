"""`MPIGroup` under `mpirun -n 2` (run by scripts/ci.d/30-mpi.sh): the training step of collective_program.py, the
same code test_multi_group.py runs on the devices of one process, against numpy on every rank."""

from __future__ import annotations

import numpy as np
import pytest
from collective_program import expected_step, rank_inputs, training_step

from kiln.tensor import Tensor
from kiln.tensor import distributed as dist

WORLD = dist.init(timeout=60)
pytestmark = pytest.mark.skipif(WORLD.size < 2, reason="needs at least 2 MPI ranks: mpirun -n 2 pytest <this file>")


def test_training_step_matches_numpy() -> None:
    group = dist.group()
    (result,) = group.run(training_step, *rank_inputs(group.size))
    expected = expected_step(group.size, group.rank)
    assert result.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_allclose(result[name], value, rtol=1e-5, atol=1e-5, err_msg=f"rank {group.rank} {name}")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_allgather_and_reduce_scatter_along_an_axis(axis: int) -> None:
    group = dist.group()
    arrays = [np.arange(15, dtype=np.float32).reshape(3, 5) * (rank + 1) for rank in range(group.size)]
    gathered = group.allgather(Tensor(arrays[group.rank]), axis=axis)
    np.testing.assert_array_equal(gathered.numpy(), np.concatenate(arrays, axis=axis))
    part = group.reduce_scatter(Tensor(arrays[group.rank]), axis=axis)
    total = np.sum(arrays, axis=0)
    bounds = np.array_split(np.arange(total.shape[axis]), group.size)[group.rank]
    np.testing.assert_array_equal(part.numpy(), np.take(total, bounds, axis=axis))
