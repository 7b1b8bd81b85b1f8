"""The tensor tests run in checked mode: index tensors and integer divisors are read and bounds-checked (CHECK=1,
see kiln.tensor.ops.data_checks); a test of the unchecked default sets `Context(CHECK=False)` itself.

With `DEV` naming a device that stores fewer dtypes (WEBGPU: bool and 32-bit scalars), a test or a test module
that fails only because that device refused a dtype (the TypeError "device 'WEBGPU' cannot store dtypes.float64")
is reported as skipped with that reason, so such a run lists what the device cannot do apart from real failures.
"""

import os
from collections.abc import Generator
from typing import Any

import pytest

os.environ.setdefault("CHECK", "1")


def _refusal(text: str) -> str | None:
    """The refusal line when `text` (an error) is the default device refusing a dtype, else None."""
    device = os.environ.get("DEV", "").strip().upper()
    marker = f"device '{device}' cannot store dtypes."
    if not device or marker not in text:
        return None
    line = text[text.index(marker) :].splitlines()[0]
    return line.split(";")[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and call.excinfo.errisinstance(TypeError):
        reason = _refusal(str(call.excinfo.value))
        if reason is not None:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        reason = _refusal(str(report.longrepr))
        if reason is not None:
            report.outcome = "skipped"
            report.longrepr = (str(collector.path), 0, f"Skipped: {reason}")
