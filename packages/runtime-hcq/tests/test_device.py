"""The device registry: names, discovery through entry points, lazy opening, the default device, renderers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kiln.runtime import DeviceBase, DeviceRegistry, DeviceUnavailable, HostAllocator
from kiln.uops import dtypes


class CountingDevice(DeviceBase):
    """Counts how often a device is constructed."""

    opened: list[str] = []

    def __init__(self, name: str) -> None:
        CountingDevice.opened.append(name)
        super().__init__(name, HostAllocator(name))


class MissingHardware(DeviceBase):
    def __init__(self, name: str) -> None:
        raise DeviceUnavailable(f"{name}: no such hardware here")


def registry_with(**kinds: type[DeviceBase]) -> DeviceRegistry:
    registry = DeviceRegistry(builtins={}, entry_point_group="kiln.test.no_such_group")
    for kind, device_class in kinds.items():
        registry.register(kind, device_class)
    return registry


@pytest.mark.parametrize(
    ("name", "canonical"),
    [("cnt", "CNT"), ("CNT:0", "CNT"), ("cnt:1", "CNT:1"), ("Cnt:sim", "CNT:sim"), (" CNT ", "CNT"), ("CNT:00", "CNT")],
)
def test_canonicalize(name: str, canonical: str) -> None:
    assert registry_with(CNT=CountingDevice).canonicalize(name) == canonical


@pytest.mark.parametrize("name", ["", ":", "CNT:", "1CNT", "C-NT", "CNT :x"])
def test_malformed_names_raise(name: str) -> None:
    with pytest.raises(ValueError, match="bad device name"):
        registry_with(CNT=CountingDevice).canonicalize(name)


def test_non_string_names_raise() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        registry_with(CNT=CountingDevice).canonicalize(3)  # type: ignore[arg-type]


def test_unknown_kind_names_the_known_kinds() -> None:
    registry = registry_with(CNT=CountingDevice, OTHER=CountingDevice)
    with pytest.raises(ValueError, match=r"unknown device kind 'NOPE' \(from 'nope:2'\); known kinds: CNT, OTHER"):
        registry["nope:2"]
    with pytest.raises(ValueError, match="known kinds: none"):
        registry_with().canonicalize("CPU")


def test_devices_open_lazily_once_per_canonical_name() -> None:
    CountingDevice.opened.clear()
    registry = registry_with(CNT=CountingDevice)
    assert CountingDevice.opened == [] and not registry.is_open("cnt")
    first = registry["cnt"]
    assert registry["CNT:0"] is first and registry["CNT"] is first
    second = registry["cnt:1"]
    assert second is not first
    assert [first.name, second.name] == ["CNT", "CNT:1"]
    assert CountingDevice.opened == ["CNT", "CNT:1"]
    registry.forget("CNT:1")
    assert registry["CNT:1"] is not second


def test_unregister_closes_the_kinds_devices_and_forgets_the_kind() -> None:
    CountingDevice.opened.clear()
    registry = registry_with(CNT=CountingDevice, OTHER=CountingDevice)
    first, other = registry["cnt"], registry["other"]
    registry["cnt:1"]
    registry.unregister("cnt")
    assert registry.kinds() == ["OTHER"] and registry["OTHER"] is other
    with pytest.raises(ValueError, match="unknown device kind 'CNT'"):
        registry["CNT"]
    registry.register("CNT", CountingDevice)  # registered again: a fresh device, not the one opened before
    assert registry["CNT"] is not first
    assert CountingDevice.opened == ["CNT", "OTHER", "CNT:1", "CNT"]


@pytest.mark.parametrize(
    ("kind", "message"), [("NEVER", "was not registered at run time"), ("CNT:1", "without a suffix")]
)
def test_unregister_rejects_unknown_kinds_and_suffixes(kind: str, message: str) -> None:
    registry = registry_with(CNT=CountingDevice)
    with pytest.raises(ValueError, match=message):
        registry.unregister(kind)
    assert registry.kinds() == ["CNT"]


def test_unavailable_device_is_reraised_and_not_cached() -> None:
    registry = registry_with(GONE=MissingHardware)
    for _ in range(2):
        with pytest.raises(DeviceUnavailable, match="GONE:3: no such hardware here"):
            registry["gone:3"]
    assert not registry.is_open("GONE:3")


def test_factory_must_build_a_device() -> None:
    registry = DeviceRegistry(builtins={}, entry_point_group="kiln.test.no_such_group")
    registry.register("ODD", lambda name: object())  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="built object, which is not a DeviceBase"):
        registry["ODD"]


def test_builtin_table_is_imported_lazily_and_reports_bad_targets() -> None:
    registry = DeviceRegistry(
        builtins={"SIMPLE": f"{__name__}:CountingDevice", "MISSING": "kiln.runtime.no_such_module:Device"},
        entry_point_group="kiln.test.no_such_group",
    )
    assert registry.kinds() == ["SIMPLE", "MISSING"]
    assert registry.kind_info("simple").origin == "built-in"
    assert isinstance(registry["SIMPLE"], CountingDevice)
    with pytest.raises(
        DeviceUnavailable, match=r"'MISSING' .*no_such_module.* could not be loaded: ModuleNotFoundError"
    ):
        registry["MISSING"]


def install_fake_distribution(root: Path, name: str, entry_points: str, module: str = "") -> None:
    """Writes an installed distribution (dist-info with entry points) and its module under `root`."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    if module:
        (root / f"{name}_module.py").write_text(textwrap.dedent(module))


def test_entry_points_are_discovered_and_broken_ones_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_distribution(
        tmp_path,
        "kilnfakeplugin",
        """
        [kiln.test.devices]
        fakedev = kilnfakeplugin_module:FakeDevice
        BROKEN = kilnfakeplugin_no_such_module:Device
        NOTCLASS = kilnfakeplugin_module
        DUPLICATE = kilnfakeplugin_module:FakeDevice
        """,
        """
        from kiln.runtime import DeviceBase, HostAllocator

        class FakeDevice(DeviceBase):
            def __init__(self, name):
                super().__init__(name, HostAllocator(name))
        """,
    )
    install_fake_distribution(tmp_path, "kilnotherplugin", "[kiln.test.devices]\nDUPLICATE = other_module:Device\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = DeviceRegistry(builtins={"FIRST": f"{__name__}:CountingDevice"}, entry_point_group="kiln.test.devices")
    assert registry.kinds() == ["FIRST", "BROKEN", "DUPLICATE", "FAKEDEV", "NOTCLASS"]
    assert registry.kind_info("fakedev").origin == "entry point 'fakedev' of kilnfakeplugin"
    device = registry["FakeDev:2"]
    assert type(device).__name__ == "FakeDevice" and device.name == "FAKEDEV:2"
    with pytest.raises(
        DeviceUnavailable, match=r"'BROKEN' \(entry point 'BROKEN' of kilnfakeplugin, .*could not be loaded"
    ):
        registry["BROKEN"]
    with pytest.raises(DeviceUnavailable, match="names 'kilnfakeplugin_module', which is not a device class"):
        registry["NOTCLASS"]
    with pytest.raises(DeviceUnavailable, match="provided twice, also by entry point 'DUPLICATE' of") as raised:
        registry["DUPLICATE"]
    assert "kilnfakeplugin" in str(raised.value) and "kilnotherplugin" in str(raised.value)


def test_default_device_comes_from_dev(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = registry_with(CNT=CountingDevice, GONE=MissingHardware)
    monkeypatch.setenv("DEV", "cnt:1")
    assert registry.DEFAULT == "CNT:1"
    monkeypatch.setenv("DEV", "nope")
    with pytest.raises(ValueError, match="unknown device kind 'NOPE'"):
        registry.DEFAULT  # noqa: B018
    registry.DEFAULT = "gone"  # an explicit setting beats DEV
    assert registry.DEFAULT == "GONE"


def test_default_device_is_the_first_that_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEV", raising=False)
    registry = registry_with(GONE=MissingHardware, CNT=CountingDevice)
    assert registry.DEFAULT == "CNT"
    with pytest.raises(DeviceUnavailable, match=r"no device could be opened.*GONE: GONE: no such hardware"):
        registry_with(GONE=MissingHardware).DEFAULT  # noqa: B018


class FirstRenderer:
    pass


class SecondRenderer:
    def __init__(self) -> None:
        self.compiler = None


class RenderingDevice(DeviceBase):
    renderers = (FirstRenderer, SecondRenderer)
    supported_dtypes = frozenset({dtypes.float32})

    def __init__(self, name: str) -> None:
        super().__init__(name, HostAllocator(name))


def test_renderer_is_the_first_unless_the_environment_picks_one(monkeypatch: pytest.MonkeyPatch) -> None:
    device = RenderingDevice("RENDERING:1")
    monkeypatch.delenv("RENDERING_RENDERER", raising=False)
    assert device.renderer_class is FirstRenderer and isinstance(device.renderer, FirstRenderer)
    assert device.renderer is device.renderer  # created once
    monkeypatch.setenv("RENDERING_RENDERER", "second")
    assert device.renderer_class is SecondRenderer and isinstance(device.renderer, SecondRenderer)
    monkeypatch.setenv("RENDERING_RENDERER", "SecondRenderer")
    assert device.renderer_class is SecondRenderer
    monkeypatch.setenv("RENDERING_RENDERER", "third")
    with pytest.raises(ValueError, match=r"RENDERING_RENDERER='third' .* one of: FirstRenderer, SecondRenderer"):
        device.renderer_class  # noqa: B018


def test_device_without_renderers_cannot_render() -> None:
    with pytest.raises(RuntimeError, match="'CNT' has no renderers"):
        CountingDevice("CNT").renderer  # noqa: B018
    assert CountingDevice("CNT").supported_dtypes == frozenset(dtypes.all)
