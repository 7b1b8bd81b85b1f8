"""`python -m kiln.runtime`: the device survey lists every kind and survives devices that fail to open."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kiln.runtime import DeviceBase, DeviceRegistry, DeviceUnavailable, HostAllocator
from kiln.runtime.__main__ import main, survey


class WorkingDevice(DeviceBase):
    def __init__(self, name: str) -> None:
        super().__init__(name, HostAllocator(name))


class FailingDevice(DeviceBase):
    def __init__(self, name: str) -> None:
        raise DeviceUnavailable("no GPU in this machine")


class BuggyDevice(DeviceBase):
    def __init__(self, name: str) -> None:
        raise KeyError("driver bug")


class TwoRenderers(DeviceBase):
    class GoodRenderer:
        compiler = 3.5  # any object: the survey prints its type

    class BrokenRenderer:
        def __init__(self) -> None:
            raise RuntimeError("clang is not installed")

    renderers = (GoodRenderer, BrokenRenderer)

    def __init__(self, name: str) -> None:
        super().__init__(name, HostAllocator(name))


def test_survey_reports_each_kind() -> None:
    registry = DeviceRegistry(
        builtins={"MISSINGMODULE": "kiln_no_such_module:Device"}, entry_point_group="kiln.test.no_such_group"
    )
    for kind, device_class in (
        ("WORKS", WorkingDevice),
        ("FAILS", FailingDevice),
        ("BUGGY", BuggyDevice),
        ("RENDERS", TwoRenderers),
    ):
        registry.register(kind, device_class)
    reports = {report.kind: report for report in survey(registry)}
    assert list(reports) == ["MISSINGMODULE", "WORKS", "FAILS", "BUGGY", "RENDERS"]
    assert reports["MISSINGMODULE"].origin == "built-in"
    assert reports["MISSINGMODULE"].opens.startswith("no: DeviceUnavailable: device kind 'MISSINGMODULE'")
    assert (reports["WORKS"].opens, reports["WORKS"].renderers, reports["WORKS"].smoke_test) == ("yes", "none", "n/a")
    assert reports["FAILS"].opens == "no: DeviceUnavailable: no GPU in this machine"
    assert reports["BUGGY"].opens == "no: KeyError: 'driver bug'"
    assert reports["RENDERS"].renderers == (
        "GoodRenderer (compiler: float); BrokenRenderer (unusable: RuntimeError: clang is not installed)"
    )


def test_main_prints_the_global_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main() == 0
    output = capsys.readouterr().out
    assert "TESTHOST  [registered]" in output  # registered by conftest.py
    assert "opens:      yes" in output


def test_module_runs_as_a_script() -> None:
    result = subprocess.run([sys.executable, "-m", "kiln.runtime"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    kinds = DeviceRegistry().kinds()  # what an unmodified registry knows (no conftest registrations)
    for kind in kinds:
        assert f"\n{kind}  [" in "\n" + result.stdout
    if not kinds:
        assert result.stdout.startswith("no device kinds are known")


def test_survey_runs_a_smoke_test_per_renderer_of_the_builtin_devices() -> None:
    reports = {report.kind: report for report in survey(DeviceRegistry(entry_point_group="kiln.test.no_such_group"))}
    assert reports["CPU"].renderers == "LLVMRenderer (compiler: LLVMCompiler); CRenderer (compiler: CCompiler)"
    assert reports["CPU"].smoke_test.startswith("LLVMRenderer: ok (compile ")
    assert "; CRenderer: ok (compile " in reports["CPU"].smoke_test
    assert reports["PYTHON"].smoke_test.startswith("PythonRenderer: ok (")
    assert reports["CUDA"].opens == "yes" or reports["CUDA"].opens.startswith("no: DeviceUnavailable: CUDA: ")


def test_a_failing_smoke_test_is_reported_not_raised() -> None:
    from kiln.renderers import PythonRenderer
    from kiln.runtime import Device
    from kiln.runtime.smoke_test import smoke_test
    from kiln.uops import Ops, PatternMatcher, UPat, dtypes

    class WrongSums(PythonRenderer):
        """Its own pass turns every float ADD into a SUB: the kernel runs but computes the wrong thing."""

        extra_passes = (
            (
                "add to sub",
                PatternMatcher([(UPat(Ops.ADD, dtype=dtypes.float32, name="x"), lambda x: x.replace(op=Ops.SUB))]),
            ),
        )

    result = smoke_test(Device["PYTHON"], WrongSums())
    assert not result.ok and str(result).startswith("FAILED: wrong result: out[")
    broken = smoke_test(Device["CPU"], PythonRenderer())  # a PYTHON program cannot run on the CPU
    assert str(broken).startswith("FAILED: ValueError: program 'kiln_smoke_test' was built for 'PYTHON'")
