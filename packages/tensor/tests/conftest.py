"""The tensor tests run in checked mode: index tensors and integer divisors are read and bounds-checked (CHECK=1,
see kiln.tensor.ops.data_checks); a test of the unchecked default sets `Context(CHECK=False)` itself.

With `DEV` naming a device that stores fewer dtypes (WEBGPU: bool and 32-bit scalars), a test or a test module
that fails only because that device refused a dtype (the TypeError "device 'WEBGPU' cannot store dtypes.float64")
or because its renderer refused to compute in one ("<WGSLRenderer for WEBGPU> cannot compute in ['int64']", a
kernel's int64 intermediate) is reported as skipped with that reason, so such a run lists what the device cannot
do apart from real failures.

The helper modules (`engine_graphs`, `nn_reference`, `pth_builder`, `gradient_classification_api`, and in subfolders
`conformance.cases`, `conformance.functional_cases`, `conformance_nn.nn_conformance_cases`, `state.ggml_reference`)
import by name: this folder is on pytest's `pythonpath` (root pyproject.toml).

A test module that runs on one device says so with `pytestmark = pytest.mark.default_device("PYTHON")`: the
`_default_device` fixture sets `Device.DEFAULT` for each of its tests and clears it after (PYTHON, the interpreter,
needs no toolchain and no compile cache, which keeps many small cases fast).
"""

import os
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import pytest

from kiln.runtime import Device
from kiln.tensor.realize.engine import Engine, use_engine

os.environ.setdefault("CHECK", "1")


@pytest.fixture(autouse=True)
def _default_device(request: pytest.FixtureRequest) -> Iterator[None]:
    """`Device.DEFAULT` for the test from its `default_device(name)` mark, cleared after; nothing without the mark."""
    mark = request.node.get_closest_marker("default_device")
    if mark is None:
        yield
        return
    (name,) = mark.args
    Device.DEFAULT = name
    yield
    Device.DEFAULT = None


@pytest.fixture
def engine() -> Iterator[Engine]:
    """A fresh Engine for the test (its own caches and counters, e.g. `programs_built`)."""
    with use_engine(Engine()) as fresh:
        yield fresh


@pytest.fixture
def each_value(engine: Engine) -> Callable[[Callable[[int], None], Sequence[int]], None]:
    """`each_value(run, values)`: `run(value)` at each value under the test's fresh engine; the first call compiles,
    the others must reuse its programs (the symbolic-shape tests: one compile serves every value of a Variable)."""

    def check(run: Callable[[int], None], values: Sequence[int]) -> None:
        run(values[0])
        built = engine.programs_built
        assert built >= 1
        for value in values[1:]:
            run(value)
        assert engine.programs_built == built, "a new value of the variable compiled a new kernel"

    return check


def _refusal(text: str) -> str | None:
    """The refusal line when `text` (an error) is the default device refusing a dtype, else None: storing it
    (tensor creation, casts) or computing in it (a kernel's intermediate, refused by the device's renderer)."""
    device = os.environ.get("DEV", "").strip().upper()
    if not device:
        return None
    markers = (
        f"device '{device}' cannot store dtypes.",
        f"for {device}> cannot compute in ",
        f"{device} stores no dtypes.",
    )
    for marker in markers:
        if marker in text:
            line = text[text.index(marker) :].splitlines()[0].split(";")[0].split(": not in its")[0]
            return line if line.startswith(("device", device)) else f"{device} {line.removeprefix(f'for {device}> ')}"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and call.excinfo.errisinstance((TypeError, ValueError)):
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
