"""`DeviceGroup` (kiln.tensor.multi.group): a program written for one rank against the collective API, run on the
devices of one process, against numpy; the same program runs on MPI ranks in mpi/mpi_test_group.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from collective_program import expected_step, rank_inputs, training_step

from kiln.tensor import Tensor
from kiln.tensor.multi import CollectiveGroup, DeviceGroup, RankStopped

DEVICES = ["CPU", "CPU:1", "CPU:2"]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_training_step_matches_numpy_on_every_rank(count: int) -> None:
    results = DeviceGroup(DEVICES[:count]).run(training_step, *rank_inputs(count))
    for rank, result in enumerate(results):
        expected = expected_step(count, rank)
        assert result.keys() == expected.keys()
        for name, value in expected.items():
            np.testing.assert_allclose(result[name], value, rtol=1e-5, atol=1e-5, err_msg=f"rank {rank} {name}")


def test_each_rank_runs_on_its_own_device_and_thread() -> None:
    def program(group: CollectiveGroup, value: float) -> tuple[int, int, str, str, list[float]]:
        tensor = Tensor([value, 2 * value], device=group.device)
        total = group.allreduce(tensor)
        return group.rank, group.size, total.device, threading.current_thread().name, total.tolist()

    results = DeviceGroup(DEVICES[:3]).run(program, [1.0, 10.0, 100.0])
    assert [result[:3] for result in results] == [(rank, 3, DEVICES[rank]) for rank in range(3)]
    assert len({result[3] for result in results}) == 3
    assert all(result[4] == [111.0, 222.0] for result in results)


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_reductions_and_broadcast_root_match_numpy(op: str) -> None:
    rng = np.random.default_rng(5)
    arrays = [rng.integers(-4, 5, (2, 3)).astype(np.int32) for _ in range(3)]
    table = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}

    def program(group: CollectiveGroup, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tensor = Tensor(values, device=group.device)
        return group.allreduce(tensor, op).numpy(), group.broadcast(tensor, root=2).numpy()

    expected = table[op].reduce(np.stack(arrays))
    for reduced, broadcast in DeviceGroup(DEVICES).run(program, arrays):
        np.testing.assert_array_equal(reduced, expected)
        np.testing.assert_array_equal(broadcast, arrays[2])


def test_a_failing_rank_stops_the_others_and_its_error_is_raised() -> None:
    def program(group: CollectiveGroup, values: list[float]) -> None:
        if group.rank == 1:
            raise KeyError("rank 1 fails before the collective")
        group.allreduce(Tensor(values, device=group.device))

    with pytest.raises(KeyError, match="rank 1 fails"):
        DeviceGroup(DEVICES).run(program, [[1.0], [2.0], [3.0]])


def test_mismatched_collectives_raise_on_every_rank() -> None:
    raised: list[str] = []

    def shapes(group: CollectiveGroup, size: int) -> None:
        try:
            group.allreduce(Tensor(np.zeros(size, np.float32), device=group.device))
        except ValueError as error:
            raised.append(str(error))
            raise

    with pytest.raises(ValueError, match="has shape"):
        DeviceGroup(DEVICES[:2]).run(shapes, [2, 3])
    assert len(raised) == 2

    def names(group: CollectiveGroup, value: float) -> None:
        tensor = Tensor([value], device=group.device)
        group.allreduce(tensor) if group.rank == 0 else group.allgather(tensor)

    with pytest.raises(ValueError, match="the ranks called different collectives"):
        DeviceGroup(DEVICES[:2]).run(names, [1.0, 2.0])


def test_a_rank_that_never_comes_times_out() -> None:
    def program(group: CollectiveGroup, value: float) -> None:
        if group.rank == 0:
            group.allreduce(Tensor([value], device=group.device))

    with pytest.raises(TimeoutError, match="did not complete"):
        DeviceGroup(DEVICES[:2], timeout=0.5).run(program, [1.0, 2.0])


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match="one value per rank"):
        DeviceGroup(DEVICES[:2]).run(lambda group, value: value, [1.0])
    with pytest.raises(ValueError, match="distinct"):
        DeviceGroup(["CPU", "CPU"])
    with pytest.raises(ValueError, match="timeout must be a positive"):
        DeviceGroup(DEVICES[:2], timeout=0)

    def wrong_device(group: CollectiveGroup, value: float) -> None:
        group.allreduce(Tensor([value], device="CPU:2"))

    with pytest.raises(ValueError, match="this rank's tensors live on"):
        DeviceGroup(DEVICES[:2]).run(wrong_device, [1.0, 2.0])

    def bad_root(group: CollectiveGroup, value: float) -> None:
        group.broadcast(Tensor([value], device=group.device), root=2)

    with pytest.raises(ValueError, match=r"broadcast root must be a rank in 0\.\.1"):
        DeviceGroup(DEVICES[:2]).run(bad_root, [1.0, 2.0])


def test_rank_stopped_is_a_broken_barrier() -> None:
    assert issubclass(RankStopped, threading.BrokenBarrierError)
