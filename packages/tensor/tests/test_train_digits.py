"""The main job (examples/train_digits.py) as a test: a short run with a fixed seed reaches the accuracy threshold,
and its safetensors checkpoint holds the trained tensors and reloads into a fresh model with the same accuracy."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from kiln.tensor.state import safe_load

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_digits.py"


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kiln_train_digits_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


example = _load_example()


pytestmark = pytest.mark.default_device("CPU")


def test_short_run_reaches_97_percent_and_the_checkpoint_reloads(tmp_path: Path) -> None:
    checkpoint = tmp_path / "digits.safetensors"
    run = example.train(epochs=8, seed=0, checkpoint=checkpoint, progress=False)
    assert run.test_accuracy >= 0.97, run
    assert run.reloaded_accuracy == run.test_accuracy
    assert len(run.epoch_seconds) == 8
    # the file is safetensors: read it here with the format's rules, independently of the example's reader
    raw = checkpoint.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    assert sorted(key for key in header if key != "__metadata__") == sorted(
        name for name, _ in example.make_model().state_dict().items()
    )
    entry = header["7.weight"]
    assert entry["dtype"] == "F32" and entry["shape"] == [10, 128]
    begin, end = entry["data_offsets"]
    weights = np.frombuffer(raw[8 + length + begin : 8 + length + end], dtype="<f4").reshape(10, 128)
    reloaded = safe_load(checkpoint)["7.weight"].numpy()
    np.testing.assert_array_equal(weights, reloaded)
    assert np.abs(weights).max() > 1 / np.sqrt(128)  # trained: beyond the initial uniform bound
