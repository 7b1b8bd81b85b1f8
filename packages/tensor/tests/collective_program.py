"""A data-parallel training step written once against `CollectiveGroup` (kiln.tensor.multi.group), run by
test_multi_group.py on the devices of one process and by mpi/mpi_test_group.py on MPI ranks, with its numpy
oracle."""

from __future__ import annotations

import numpy as np

from kiln.tensor import Tensor
from kiln.tensor.multi import CollectiveGroup

LEARNING_RATE = 0.1


def rank_inputs(size: int, seed: int = 3) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per rank: its (different) starting weights (3, 2), its batch part (rank + 2 rows of 3) and targets."""
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal((3, 2)).astype(np.float32) for _ in range(size)]
    inputs = [rng.standard_normal((rank + 2, 3)).astype(np.float32) for rank in range(size)]
    targets = [rng.standard_normal((rank + 2, 2)).astype(np.float32) for rank in range(size)]
    return weights, inputs, targets


def training_step(
    group: CollectiveGroup, weight: np.ndarray, inputs: np.ndarray, targets: np.ndarray
) -> dict[str, np.ndarray]:
    """One SGD step of least squares on the batch spread over the ranks, starting from rank 0's weights."""
    start = group.broadcast(Tensor(weight, device=group.device), root=0)
    w = Tensor(start.numpy(), device=group.device, requires_grad=True)
    x, y = Tensor(inputs, device=group.device), Tensor(targets, device=group.device)
    rows = group.allreduce(Tensor([float(x.shape[0])], device=group.device)).numpy()[0]
    loss = ((x @ w - y) ** 2).sum() / float(rows)
    loss.backward()
    assert w.grad is not None
    grad = group.allreduce(w.grad)
    updated = w.detach() - LEARNING_RATE * grad
    return {
        "weight": updated.numpy(),
        "loss": group.allreduce(loss.detach().reshape(1)).numpy(),
        "predictions": group.allgather(x @ updated, axis=0).numpy(),
        "predictions_by_column": group.allgather((x @ updated).T, axis=1).numpy(),
        "grad_part": group.reduce_scatter(w.grad, axis=0).numpy(),
        "largest_error": group.allreduce((x @ w - y).abs().max().detach().reshape(1), "max").numpy(),
    }


def expected_step(size: int, rank: int) -> dict[str, np.ndarray]:
    """What `training_step` returns on `rank` of `size`, by numpy on the whole batch."""
    weights, inputs, targets = rank_inputs(size)
    w = weights[0].astype(np.float64)
    x = np.concatenate(inputs).astype(np.float64)
    y = np.concatenate(targets).astype(np.float64)
    error = x @ w - y
    grad = 2 * x.T @ error / x.shape[0]
    updated = w - LEARNING_RATE * grad
    # each rank's own gradient, summed over ranks, is `grad`; reduce_scatter gives rank r its balanced rows of it
    base, extra = divmod(grad.shape[0], size)
    begin = rank * base + min(rank, extra)
    end = begin + base + (1 if rank < extra else 0)
    return {
        "weight": updated,
        "loss": np.array([(error**2).sum() / x.shape[0]]),
        "predictions": x @ updated,
        "predictions_by_column": (x @ updated).T,
        "grad_part": grad[begin:end],
        "largest_error": np.array([np.abs(error).max()]),
    }
