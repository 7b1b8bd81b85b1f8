"""The quickstart example (examples/quickstart.py) trains: a short run on easier spirals must fit them.

Oracles: the dataset's own labels (accuracy), and numpy recomputing the first loss from the initial parameters.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart.py"


def _load_quickstart() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kiln_quickstart_example", QUICKSTART)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


quickstart = _load_quickstart()


def test_two_spirals_dataset() -> None:
    points, labels = quickstart.two_spirals(50, seed=3)
    assert points.shape == (100, 2) and points.dtype == np.float32
    assert labels.tolist() == [0] * 50 + [1] * 50
    # the second arm is the first one turned by half a turn (up to the noise)
    np.testing.assert_allclose(points[:50], -points[50:], atol=0.5)
    assert float(np.abs(points).max()) < 2.5


def test_first_loss_matches_numpy() -> None:
    points, labels = quickstart.two_spirals(40, seed=0, turns=1.0)
    model = quickstart.MLP.create([2, 16, 16, 2], seed=0)
    weights = [w.numpy().astype(np.float64) for w in model.weights]
    hidden = np.tanh(np.tanh(points @ weights[0]) @ weights[1])  # biases start at zero
    logits = hidden @ weights[2]
    log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -log_probabilities[np.arange(len(labels)), labels].mean()
    loss = quickstart.cross_entropy(model(quickstart.Tensor(points)), quickstart.Tensor(labels))
    assert math.isclose(float(loss.item()), expected, rel_tol=1e-5)


@pytest.mark.slow
def test_short_training_run_fits_one_turn_spirals() -> None:
    run = quickstart.train(points_per_class=100, steps=80, hidden=32, turns=1.0)
    assert len(run.losses) == 80
    assert np.mean(run.losses[-10:]) < 0.25 * np.mean(run.losses[:10]), run.losses[::10]
    assert run.accuracy >= 0.95
    assert run.kernels >= 80  # every step launched kernels
