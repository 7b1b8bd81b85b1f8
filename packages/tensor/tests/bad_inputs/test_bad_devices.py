"""Bad devices and bad knob values: an error naming the value and what is accepted, never another device."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

import pytest

from kiln.runtime import Device, DeviceUnavailable
from kiln.tensor import Tensor, default_device
from kiln.tensor.realize import clear_method_cache
from kiln.uops import Context, knobs


def _cuda_opens() -> bool:
    try:
        Device["CUDA"]
    except DeviceUnavailable:
        return False
    return True


@pytest.mark.parametrize("name", ["CPUU", "GPUX", "cuda0", "TPU", "C P U", ""])
def test_unknown_device_names_raise(name: str) -> None:
    with pytest.raises(ValueError, match="device") as info:
        Tensor([1.0], device=name)
    assert repr(name) in str(info.value) or name.split(":")[0].upper() in str(info.value)


@pytest.mark.parametrize("name", [1, 0.5, b"CPU", ["CPU"]])
def test_device_of_wrong_type_raises_type_error(name: object) -> None:
    with pytest.raises(TypeError, match="device"):
        Tensor([1.0], device=name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["CPUU", "NOPE:1"])
def test_dev_with_unknown_kind_raises_instead_of_falling_back(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEV", name)
    with pytest.raises(ValueError, match=name.split(":")[0]):
        Tensor([1.0])


def test_dev_naming_a_device_without_renderer_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    # NV:sim opens (a simulated GPU) but cannot build kernels: it must not silently compute on PYTHON
    monkeypatch.setenv("DEV", "NV:sim")
    with pytest.raises(DeviceUnavailable, match=r"DEV='NV:sim'.*cannot run kernels"):
        default_device()


@pytest.mark.skipif(_cuda_opens(), reason="a CUDA device is present here")
def test_dev_cuda_without_gpu_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEV", "CUDA")
    with pytest.raises(RuntimeError, match=r"'CUDA'.*(libcuda|driver|GPU)"):
        Tensor([1.0])


@pytest.mark.skipif(_cuda_opens(), reason="a CUDA device is present here")
def test_explicit_cuda_device_without_gpu_raises() -> None:
    with pytest.raises(RuntimeError, match="CUDA"):
        Tensor([1.0], device="CUDA")


def test_dev_set_to_a_working_device_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEV", "PYTHON")
    assert Tensor([1.0]).device == "PYTHON"
    assert (Tensor([1.0, 2.0]) + 1).numpy().tolist() == [2.0, 3.0]


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("CPU_RENDERER", "foo", "'llvm', 'c'"),
        ("CPU_RENDERER", "cuda", "'llvm', 'c'"),
        ("PYTHON_RENDERER", "llvm", "'python'"),
        ("CUDA_RENDERER", "metal", "'cuda', 'ptx'"),
        ("NV_SIM_MMU", "4", "2, 3"),
        ("AM_SIM_GFX", "gfx12", "'gfx11', 'gfx9.4'"),
    ],
)
def test_knobs_with_fixed_values_list_them(
    variable: str, value: str, accepted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for package in ("kiln.drivers.am", "kiln.drivers.nv"):
        importlib.import_module(package)  # registers the AM_SIM_* / NV_SIM_* knobs

    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=rf"{variable}='{value}'") as info:
        getattr(knobs, variable)
    assert accepted in str(info.value)


@pytest.mark.parametrize(
    ("variable", "value", "kind"),
    [("LRU", "abc", "bool"), ("DEBUG", "high", "int"), ("BEAM", "2.5", "int"), ("NOOPT", "maybe", "bool")],
)
def test_knobs_of_the_wrong_type_raise(variable: str, value: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=rf"{variable}='{value}' is not a valid {kind}"):
        getattr(knobs, variable)


def test_bad_renderer_knob_is_raised_at_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPU_RENDERER", "foo")
    clear_method_cache()  # an earlier test may have compiled this kernel already: then nothing would pick a renderer
    with pytest.raises(ValueError, match="CPU_RENDERER='foo'"):
        (Tensor([1.0], device="CPU") + 1).numpy()


@pytest.mark.parametrize("spelling", ["LLVM", "llvmrenderer", " c ", "CRenderer"])
def test_renderer_knob_accepts_class_name_spellings(spelling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPU_RENDERER", spelling)
    expected = "LLVMRenderer" if "llvm" in spelling.lower() else "CRenderer"
    assert Device["CPU"].renderer_class.__name__ == expected


def test_context_rejects_bad_choice() -> None:
    with pytest.raises(ValueError, match=r"CPU_RENDERER='rust'.*'llvm', 'c'"):
        Context(CPU_RENDERER="rust")


def test_kiln_tensor_installs_llvmlite_for_the_default_renderer() -> None:
    requirements = importlib.metadata.requires("kiln-tensor") or []
    assert any(item.replace(" ", "").startswith("kiln-renderers[llvm]") for item in requirements), requirements
    assert importlib.util.find_spec("llvmlite") is not None
    assert Device["CPU"].renderer_class.__name__ == "LLVMRenderer"


def test_missing_llvmlite_is_announced_once_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module("kiln.renderers.cpu_renderers")

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        module.importlib.util, "find_spec", lambda name: None if name == "llvmlite" else real_find_spec(name)
    )
    monkeypatch.setattr(module, "_notice_given", False)
    monkeypatch.delenv("CPU_RENDERER", raising=False)
    assert [renderer.__name__ for renderer in module.cpu_renderers()] == ["CRenderer"]
    assert [renderer.__name__ for renderer in module.cpu_renderers()] == ["CRenderer"]
    notice = capsys.readouterr().err
    assert notice.count("llvmlite is not installed") == 1 and "pip install llvmlite" in notice


def test_unset_dev_with_a_cpu_that_cannot_build_falls_back_once_with_a_notice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    device_module = importlib.import_module("kiln.tensor.device")
    monkeypatch.delenv("DEV", raising=False)
    monkeypatch.setattr(Device, "_default", None)
    monkeypatch.setattr(Device, "_probed_default", "CPU")
    monkeypatch.setattr(device_module, "unusable_reason", lambda name: "no compiler here" if name == "CPU" else None)
    monkeypatch.setattr(device_module, "_notices_given", set())
    assert default_device() == "PYTHON" and default_device() == "PYTHON"
    notice = capsys.readouterr().err
    assert notice.count("cannot run kernels (no compiler here); using PYTHON") == 1
    # the same situation with DEV=CPU named explicitly raises instead
    monkeypatch.setenv("DEV", "CPU")
    with pytest.raises(DeviceUnavailable, match=r"DEV='CPU'.*no compiler here"):
        default_device()
