"""`scripts/api_coverage.py`'s torch.nn / torch.nn.functional / torch.optim counts: the committed name lists are
read, kiln's layers of issue 38 count as present, and names kiln does not have are reported missing."""

from __future__ import annotations

import types

from script_loading import load_script


def test_torch_module_coverage_counts_and_missing_names() -> None:
    api_coverage = load_script("scripts/api_coverage.py")
    coverage = {title: (count, total, missing) for title, count, total, missing in api_coverage.torch_module_coverage()}
    assert list(coverage) == ["torch.nn", "torch.nn.functional", "torch.optim"]
    for count, total, missing in coverage.values():
        assert count + len(missing) == total and total > 0
    nn_missing = coverage["torch.nn"][2]
    for name in ("LSTM", "GRUCell", "TransformerEncoderLayer", "Transformer", "ModuleList", "Parameter"):
        assert name not in nn_missing
    assert "DataParallel" in nn_missing and "LazyLinear" not in nn_missing
    assert "scaled_dot_product_attention" not in coverage["torch.nn.functional"][2]
    assert "lr_scheduler.OneCycleLR" not in coverage["torch.optim"][2]


def test_module_names_include_the_scheduler_submodule() -> None:
    api_coverage = load_script("scripts/api_coverage.py")
    optim = types.SimpleNamespace(SGD=1, _hidden=2, lr_scheduler=types.SimpleNamespace(StepLR=3))
    assert api_coverage.module_names(optim) == {"SGD", "lr_scheduler", "lr_scheduler.StepLR"}
