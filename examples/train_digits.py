"""kiln's main job: train a small CNN on scikit-learn's 8x8 digits with nn, optim and TinyJit, save a safetensors
checkpoint, reload it into a fresh model and check the accuracy again.

    uv run python examples/train_digits.py                       # 12 epochs, about 98% test accuracy
    uv run python examples/train_digits.py --epochs 3 --seed 1 --checkpoint /tmp/digits.safetensors

One training step (forward, cross-entropy, backward, Adam update) is a TinyJit function: its kernels are captured on
the second call and replayed afterwards, so Python schedules nothing per step. The progress bar (tqdm) shows the
loss and the running training accuracy of the epoch.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from kiln.tensor import Tensor, TinyJit, nn, optim
from kiln.tensor.datasets import DataLoader, digits
from kiln.tensor.grad_mode import no_grad
from kiln.tensor.state import safe_load, safe_save


def make_model() -> nn.Sequential:
    """conv(1->16) relu pool, conv(16->32) relu pool, linear(128->10) on (N, 1, 8, 8) images."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(128, 10),
    )


# --- training ----------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """What `train` measured."""

    test_accuracy: float = 0.0
    reloaded_accuracy: float = 0.0
    epoch_seconds: list[float] = field(default_factory=list)
    final_loss: float = 0.0


def accuracy(model: nn.Module, images: Tensor, labels: Tensor) -> float:
    """The fraction of `images` whose most likely class is the label (in eval mode)."""
    model.eval()
    with no_grad():
        correct = (model(images).argmax(-1) == labels).sum().item()
    model.train()
    return float(correct) / labels.shape[0]


def train(
    epochs: int = 12, seed: int = 0, checkpoint: Path | None = None, batch_size: int = 64, progress: bool = True
) -> Run:
    """Trains the CNN with Adam (lr 1e-2, cosine-annealed to 0 over all steps) on the digits' training split;
    returns the accuracies and epoch times."""
    Tensor.manual_seed(seed)
    train_images, train_labels, test_images, test_labels = digits(seed=seed)
    model = make_model()
    optimizer = optim.Adam(model.parameters(), lr=1e-2)

    @TinyJit
    def step(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        optimizer.zero_grad()
        logits = model(images)
        loss = logits.cross_entropy(labels)
        loss.backward()
        optimizer.step()
        return loss, (logits.argmax(-1) == labels).sum()

    loader = DataLoader([train_images, train_labels], batch_size, shuffle=True, drop_last=True, seed=seed)
    # the schedule writes the optimizer's learning-rate buffer between steps: the replayed kernels read it
    schedule = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(loader))
    run = Run()
    for epoch in range(epochs):
        started = time.perf_counter()
        seen = correct = 0
        bar = tqdm(loader, desc=f"epoch {epoch + 1}/{epochs}", disable=not progress, leave=False)
        for images, labels in bar:
            loss, hits = step(images, labels)
            schedule.step()
            seen += labels.shape[0]
            correct += int(hits.item())
            run.final_loss = float(loss.item())
            bar.set_postfix(loss=f"{run.final_loss:.3f}", acc=f"{correct / seen:.3f}")
        run.epoch_seconds.append(time.perf_counter() - started)
        if progress:
            print(
                f"epoch {epoch + 1}: loss {run.final_loss:.4f}, train accuracy {correct / seen:.4f}, "
                f"{run.epoch_seconds[-1]:.2f} s"
            )
    run.test_accuracy = accuracy(model, test_images, test_labels)
    if checkpoint is not None:
        safe_save(model.state_dict(), checkpoint)
        fresh = make_model()
        fresh.load_state_dict(safe_load(checkpoint))
        run.reloaded_accuracy = accuracy(fresh, test_images, test_labels)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path, default=Path("digits_cnn.safetensors"))
    arguments = parser.parse_args()
    run = train(arguments.epochs, arguments.seed, arguments.checkpoint)
    times = sorted(run.epoch_seconds)
    print(
        f"test accuracy {run.test_accuracy * 100:.2f}%; time per epoch: median {times[len(times) // 2]:.2f} s "
        f"(first epoch {run.epoch_seconds[0]:.2f} s, with compilation)"
    )
    print(
        f"checkpoint {arguments.checkpoint}: reloaded into a fresh model, test accuracy "
        f"{run.reloaded_accuracy * 100:.2f}%"
    )


if __name__ == "__main__":
    main()
