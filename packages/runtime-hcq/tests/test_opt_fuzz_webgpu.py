"""Random legal opt sequences executed on the WEBGPU device (wgpu; Mesa's lavapipe here and in CI), not only
interpreted.

The harness (device_opt_fuzz.py) draws like codegen's opt fuzzer; here each kernel is lowered for the WEBGPU
device's WGSL renderer, validated and built into a pipeline by wgpu, run on the device, and compared with the corpus
case's numpy reference. Only the corpus kernels of the dtypes WEBGPU stores are drawn (32-bit scalars and bool). 300
examples per run, the seed pinned so a CI run is reproducible; a run takes about half a minute.
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
from kiln.renderers import dtypes_for, webgpu_available

STORED = dtypes_for("WEBGPU")
CASES = [
    case for case in CORPUS if case.name != "conv2d" and all(dtype.scalar() in STORED for dtype, _ in case.buffers)
]  # conv2d: its many opt variants each take long to build
inputs_of: dict[int, list[np.ndarray]] = {}
executed: list[tuple[str, tuple[Opt, ...]]] = []

pytestmark = pytest.mark.skipif(
    not webgpu_available(), reason="no WebGPU adapter: pip install wgpu, apt install mesa-vulkan-drivers"
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@seed(20)
@given(data=st.data())
def test_random_legal_opt_sequences_run_on_webgpu(data: st.DataObject) -> None:
    fuzz_one(data, "WEBGPU", CASES, inputs_of, executed)


def test_the_fuzzer_ran_at_least_300_legal_sequences_on_webgpu() -> None:
    check_coverage("WEBGPU", executed, "test_random_legal_opt_sequences_run_on_webgpu")
