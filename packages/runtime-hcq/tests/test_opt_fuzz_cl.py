"""Random legal opt sequences executed on the CL device (OpenCL; PoCL here and in CI), not only interpreted.

The harness (device_opt_fuzz.py) draws like codegen's opt fuzzer; here each kernel is lowered for the CL device's
renderer, compiled by the OpenCL platform, run on the device, and compared with the corpus case's numpy reference.
300 examples per run, the seed pinned so a CI run is reproducible; a run takes about a minute once the kernels are in
the compile caches and two to three minutes from cold caches.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # the shared harness
sys.path.insert(0, str(Path(__file__).parents[2] / "codegen" / "tests"))  # codegen's corpus, by path

from corpus import CORPUS
from device_opt_fuzz import EXAMPLES, check_coverage, fuzz_one

from kiln.codegen import Opt
from kiln.renderers import opencl_available

CASES = [case for case in CORPUS if case.name != "conv2d"]  # its many opt variants each compile for ~1 s
inputs_of: dict[int, list[np.ndarray]] = {}
executed: list[tuple[str, tuple[Opt, ...]]] = []

pytestmark = pytest.mark.skipif(
    not opencl_available(), reason="no OpenCL platform: apt install ocl-icd-libopencl1 pocl-opencl-icd"
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@seed(20)
@given(data=st.data())
def test_random_legal_opt_sequences_run_on_cl(data: st.DataObject) -> None:
    fuzz_one(data, "CL", CASES, inputs_of, executed)


def test_the_fuzzer_ran_at_least_300_legal_sequences_on_cl() -> None:
    check_coverage("CL", executed, "test_random_legal_opt_sequences_run_on_cl")
