"""`python -m kiln.runtime`: lists every known device kind, whether it opens here (with the platform / device names
of devices that have them, e.g. CL's OpenCL platform and device), its renderers (each with the compiler it owns),
the dtypes it stores when the device table restricts them, and the result of a one-kernel smoke test per
(device, renderer)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from kiln.codegen import Renderer
from kiln.runtime.device import Device, DeviceBase, DeviceRegistry, find_dtypes
from kiln.runtime.smoke_test import smoke_test
from kiln.uops import dtypes

__all__ = ["DeviceReport", "main", "survey"]


@dataclass(frozen=True)
class DeviceReport:
    """What `python -m kiln.runtime` prints for one device kind."""

    kind: str
    origin: str
    opens: str
    renderers: str
    smoke_test: str
    hardware: str = ""
    """The device's own description (platform / device names) when it gives one."""


def _describe_renderers(device: DeviceBase, run_smoke_tests: bool) -> tuple[str, str]:
    """("Renderer (compiler: Compiler); ...", "Renderer: ok (...); ...") for the device's renderers."""
    if not device.renderers:
        return "none", "n/a"
    described, smoke = [], []
    for renderer_class in device.renderers:
        try:
            renderer = device.create_renderer(renderer_class)
        except Exception as error:
            described.append(f"{renderer_class.__name__} (unusable: {type(error).__name__}: {error})")
            smoke.append(f"{renderer_class.__name__}: not run")
            continue
        compiler = renderer.compiler if isinstance(renderer, Renderer) else getattr(renderer, "compiler", None)
        compiler_name = "none" if compiler is None else type(compiler).__name__
        described.append(f"{renderer_class.__name__} (compiler: {compiler_name})")
        if run_smoke_tests and isinstance(renderer, Renderer):
            smoke.append(f"{renderer_class.__name__}: {smoke_test(device, renderer)}")
        else:
            smoke.append(f"{renderer_class.__name__}: not run")
    return "; ".join(described), "; ".join(smoke)


def survey(registry: DeviceRegistry = Device, run_smoke_tests: bool = True) -> list[DeviceReport]:
    """Opens each known device kind and reports on it; never raises for a device that fails to open."""
    reports = []
    for info in registry.kind_infos():
        try:
            if info.problem is not None:
                info.load()  # raises DeviceUnavailable describing the problem
            device = registry[info.kind]
        except Exception as error:  # a broken plugin must not stop the listing of the others
            reports.append(DeviceReport(info.kind, info.origin, f"no: {type(error).__name__}: {error}", "-", "-"))
            continue
        renderers, smoke = _describe_renderers(device, run_smoke_tests)
        hardware = getattr(device, "description", "")
        reports.append(DeviceReport(info.kind, info.origin, "yes", renderers, smoke, str(hardware)))
    return reports


def main() -> int:
    """Prints the device survey; returns the process exit status."""
    reports = survey()
    if not reports:
        print("no device kinds are known (no built-in device and no package registers a 'kiln.devices' entry point)")
        return 0
    for report in reports:
        print(f"{report.kind}  [{report.origin}]")
        print(f"    opens:      {report.opens}")
        if report.hardware:
            print(f"    hardware:   {report.hardware}")
        stored = find_dtypes(report.kind)
        if stored != frozenset(dtypes.all):
            print(f"    dtypes:     {', '.join(sorted(dtype.name for dtype in stored))}")
        print(f"    renderers:  {report.renderers}")
        print(f"    smoke test: {report.smoke_test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
