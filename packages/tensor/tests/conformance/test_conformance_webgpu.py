"""The tensor op conformance table (cases.py) replayed on the WEBGPU device (wgpu; Mesa's lavapipe here and in CI)
against the same torch recordings as on the CPU (test_conformance.py's oracle and tolerances).

WEBGPU stores only 32-bit scalars and bool (WGSL has no 64-bit types and no 8/16-bit storage), so a case whose
recorded inputs, or whose computation, need another dtype is skipped with the TypeError that tensor creation or
the cast raises ("device 'WEBGPU' cannot store ..."). Every kernel is a wgpu pipeline build on first use, so CI
replays a fixed sample of the table: every SAMPLE_STRIDE-th case in table order; `DEV=WEBGPU uv run pytest
packages/tensor/tests/conformance` replays all of it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from conformance.cases import CASES, Case
from conformance.test_conformance import test_matches_torch as replay

from kiln.renderers import webgpu_available
from kiln.runtime import Device
from kiln.tensor import Tensor

SAMPLE_STRIDE = 8
SAMPLE = CASES[::SAMPLE_STRIDE]

pytestmark = pytest.mark.skipif(
    not webgpu_available(), reason="no WebGPU adapter: pip install wgpu, apt install mesa-vulkan-drivers"
)


@pytest.fixture
def on_webgpu() -> Iterator[None]:
    """WEBGPU as the default device for the test (the cases create their tensors on the default device)."""
    saved = Device._default
    Device.DEFAULT = "WEBGPU"
    try:
        yield
    finally:
        Device._default = saved


@pytest.mark.parametrize("case", SAMPLE, ids=[case.name for case in SAMPLE])
def test_matches_torch_on_webgpu(case: Case, on_webgpu: None) -> None:
    assert Device.DEFAULT == "WEBGPU"
    try:
        replay(case)
    except TypeError as error:
        if "device 'WEBGPU' cannot store" not in str(error):
            raise
        pytest.skip(str(error).split(";")[0])


def test_a_tensor_the_device_refuses_does_not_stay_registered_for_backward(on_webgpu: None) -> None:
    with pytest.raises(TypeError, match=r"cannot store dtypes\.float64"):
        Tensor(np.ones(3, np.float64), requires_grad=True)
    x = Tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    (x * x).sum().backward()  # walked every registered leaf, the refused one included, before the fix
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
