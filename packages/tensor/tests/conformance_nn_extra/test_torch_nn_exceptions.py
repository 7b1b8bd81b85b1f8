"""`scripts/data/torch_nn_exceptions.txt`: every torch.nn / functional / optim name kiln lacks has a reason there,
every listed name is a torch name kiln really lacks, and `api_coverage.py` reports the listed ones as excepted."""

from __future__ import annotations

import pytest
from script_loading import load_script


def test_every_absent_torch_module_name_has_a_reason_and_no_reason_is_stale() -> None:
    api_coverage = load_script("scripts/api_coverage.py")
    exceptions = api_coverage.read_exceptions(api_coverage.DATA / "torch_nn_exceptions.txt")
    absent = {name for _, _, _, missing in api_coverage.torch_module_coverage() for name in missing}
    assert sorted(absent - set(exceptions)) == []
    assert sorted(set(exceptions) - absent) == []  # a listed name kiln now has: drop its line


def test_api_coverage_prints_listed_names_as_excepted(capsys: pytest.CaptureFixture[str]) -> None:
    api_coverage = load_script("scripts/api_coverage.py")
    assert api_coverage.main([]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("torch.nn")]
    assert any("excepted; missing (0): -" in line for line in lines if line.startswith("torch.nn:"))
    assert all("DataParallel" not in line for line in lines)
