"""The digits CNN of train_digits.py trained data-parallel over MPI ranks with kiln.tensor.distributed.

    mpirun -n 2 uv run python examples/train_digits_dp.py             # 12 epochs, each rank half of every batch
    uv run python examples/train_digits_dp.py --epochs 3               # one rank: the same training, not split

Every rank builds the same model (rank 0's initial weights are broadcast to all), walks the same shuffled batches
of 64 and takes its own slice of each (64 / ranks images), so after `DataParallel.average_gradients()` the update is
the one a single process makes on the whole batch: the accuracy matches train_digits.py's. Each rank prints its
throughput (images per second it trained on); rank 0 writes the checkpoint and every rank reloads it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from train_digits import accuracy, make_model

from kiln.tensor import Tensor, optim
from kiln.tensor import distributed as dist
from kiln.tensor.datasets import DataLoader, digits


def train(epochs: int, seed: int, checkpoint: Path, batch_size: int = 64) -> None:
    dist.init()
    rank, ranks = dist.rank(), dist.world_size()
    if batch_size % ranks:
        raise ValueError(f"the batch of {batch_size} images does not split over {ranks} ranks")
    local = batch_size // ranks
    Tensor.manual_seed(seed)
    train_images, train_labels, test_images, test_labels = digits(seed=seed)
    model = make_model()
    optimizer = optim.Adam(model.parameters(), lr=1e-2)
    parallel = dist.DataParallel(model.parameters())
    parallel.sync_parameters()
    loader = DataLoader([train_images, train_labels], batch_size, shuffle=True, drop_last=True, seed=seed)
    schedule = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(loader))
    for epoch in range(epochs):
        started = time.perf_counter()
        seen = 0
        loss_value = 0.0
        for images, labels in loader:
            mine = slice(rank * local, (rank + 1) * local)
            optimizer.zero_grad()
            loss = model(images[mine]).cross_entropy(labels[mine])
            loss.backward()
            parallel.average_gradients()
            optimizer.step()
            schedule.step()
            seen += local
            loss_value = float(dist.all_reduce(loss.detach(), "sum").item()) / ranks
        seconds = time.perf_counter() - started
        print(
            f"rank {rank}/{ranks} epoch {epoch + 1}: loss {loss_value:.4f}, {seen / seconds:.0f} images/s on this rank "
            f"({seen} images, {seconds:.2f} s)",
            flush=True,
        )
    test_accuracy = accuracy(model, test_images, test_labels)
    dist.save_checkpoint(model.state_dict(), checkpoint)
    fresh = make_model()
    fresh.load_state_dict(dist.load_checkpoint(checkpoint))
    reloaded = accuracy(fresh, test_images, test_labels)
    print(
        f"rank {rank}/{ranks}: test accuracy {test_accuracy * 100:.2f}%, reloaded from {checkpoint} "
        f"{reloaded * 100:.2f}%",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path, default=Path("digits_cnn_dp.safetensors"))
    arguments = parser.parse_args()
    train(arguments.epochs, arguments.seed, arguments.checkpoint)


if __name__ == "__main__":
    main()
