"""tinygrad's training switch `Context(TRAINING=0|1)`: `Tensor.dropout()` without `training` and tinygrad's
`nn.BatchNorm` follow it while it is set; unset, dropout drops (torch's F.dropout default) and the layer follows
its module flag. numpy is the oracle for the statistics."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor, nn
from kiln.uops.knobs import Context


def test_dropout_follows_the_switch_when_no_argument_is_given() -> None:
    x = Tensor.ones(4096)
    with Context(TRAINING=0):
        assert x.dropout(0.5).numpy().tolist() == [1.0] * 4096
        dropped = x.dropout(0.5, training=True).numpy()  # an explicit argument wins
    assert 1500 < (dropped == 0).sum() < 2600 and set(np.unique(dropped)) <= {0.0, 2.0}
    with Context(TRAINING=1):
        assert 1500 < (x.dropout(0.5).numpy() == 0).sum() < 2600
        assert x.dropout(0.5, training=False).numpy().tolist() == [1.0] * 4096
    assert 1500 < (x.dropout(0.5).numpy() == 0).sum() < 2600  # unset: torch's default


def test_tinygrad_batchnorm_statistics_follow_the_switch() -> None:
    data = np.random.default_rng(0).standard_normal((8, 3, 5)).astype(np.float32)
    batch = (data - data.mean((0, 2), keepdims=True)) / np.sqrt(data.var((0, 2), keepdims=True) + 1e-5)
    layer = nn.BatchNorm(3)
    layer.eval()
    with Context(TRAINING=1):  # tinygrad's way: batch statistics although the module is in eval mode
        np.testing.assert_allclose(layer(Tensor(data)).numpy(), batch, rtol=1e-4, atol=1e-5)
    assert layer.training is False
    layer.train()
    with Context(TRAINING=0):  # running statistics after the one update above (momentum 0.1 from mean 0, var 1)
        mean = 0.1 * data.mean((0, 2))
        var = 0.9 + 0.1 * data.var((0, 2), ddof=1)
        expected = (data - mean[None, :, None]) / np.sqrt(var[None, :, None] + 1e-5)
        np.testing.assert_allclose(layer(Tensor(data)).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert layer.training is True
    np.testing.assert_allclose(layer(Tensor(data)).numpy(), batch, rtol=1e-4, atol=1e-5)  # unset: the module flag


def test_bad_values() -> None:
    with pytest.raises(ValueError, match="TRAINING"):
        Context(TRAINING=2)
    with pytest.raises(TypeError, match="bool or None"):
        Tensor.ones(3).dropout(0.5, training=1)  # type: ignore[arg-type]
