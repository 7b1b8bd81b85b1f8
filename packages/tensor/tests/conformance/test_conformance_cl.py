"""The tensor op conformance table (cases.py) replayed on the CL device (OpenCL; PoCL here and in CI) against the
same torch recordings as on the CPU (test_conformance.py's oracle and tolerances).

Every kernel is a PoCL program build (0.2-0.7 s) on first use, so CI replays a fixed sample of the table: every
SAMPLE_STRIDE-th case in table order, which still covers elementwise, reduce, movement, indexing, linear algebra
and gradient kernels; `DEV=CL uv run pytest packages/tensor/tests/conformance` replays all of it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conformance.cases import CASES, Case
from conformance.test_conformance import test_matches_torch as replay

from kiln.renderers import opencl_available
from kiln.runtime import Device

SAMPLE_STRIDE = 8
SAMPLE = CASES[::SAMPLE_STRIDE]

pytestmark = pytest.mark.skipif(
    not opencl_available(), reason="no OpenCL platform: apt install ocl-icd-libopencl1 pocl-opencl-icd"
)


@pytest.fixture
def on_cl() -> Iterator[None]:
    """CL as the default device for the test (the cases create their tensors on the default device)."""
    saved = Device._default
    Device.DEFAULT = "CL"
    try:
        yield
    finally:
        Device._default = saved


@pytest.mark.parametrize("case", SAMPLE, ids=[case.name for case in SAMPLE])
def test_matches_torch_on_cl(case: Case, on_cl: None) -> None:
    assert Device.DEFAULT == "CL"
    replay(case)
