"""Repository-wide test configuration: tests that run kernels on the WEBGPU device get the `webgpu` marker.

WEBGPU runs on Mesa's lavapipe here, which loads its own LLVM into the process beside llvmlite's; a pytest worker that
has opened it crashed now and then later on, in LLVM-heavy CPU tests (three full runs of three; none with the Vulkan
driver hidden). scripts/test.sh therefore runs `-m "not webgpu"` first and the WEBGPU tests in a pytest process of
their own (scripts/ci.d/20-webgpu.sh).
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = item.nodeid.lower()
        if "webgpu" in name or "wgsl" in name:
            item.add_marker(pytest.mark.webgpu)
