"""Random legal opt sequences executed on the CL device (OpenCL; PoCL here and in CI), not only interpreted.

The harness (device_opt_fuzz.py) draws like codegen's opt fuzzer; here each kernel is lowered for the CL device's
renderer, compiled by the OpenCL platform, run on the device, and compared with the corpus case's numpy reference.
300 examples per run, the seed pinned so a CI run is reproducible; a run takes about a minute once the kernels are in
the compile caches and two to three minutes from cold caches.
"""

from __future__ import annotations

import pytest
from corpus import CORPUS
from device_opt_fuzz import check_coverage, fuzz

from kiln.renderers import opencl_available

CASES = [case for case in CORPUS if case.name != "conv2d"]  # its many opt variants each compile for ~1 s

pytestmark = pytest.mark.skipif(
    not opencl_available(), reason="no OpenCL platform: apt install ocl-icd-libopencl1 pocl-opencl-icd"
)


def test_random_legal_opt_sequences_run_on_cl() -> None:
    executed = fuzz("CL", CASES, seed_value=20)
    check_coverage("CL", executed)  # in the same test as the loop: it holds under xdist too
