"""Random legal opt sequences executed on the CPU device (the LLVM IR renderer: vector ALU ops,
the deferred fold of unrolled reduce lanes, threads), not only interpreted.

The harness (device_opt_fuzz.py) draws like codegen's opt fuzzer; here each kernel is lowered for the CPU device's
renderer, compiled by LLVM, run on the device's threads, and compared with the corpus case's numpy reference. The
codegen fuzzer's test renderers all split vector ALU ops into scalars, so the paths only a vector-ALU renderer takes
are fuzzed here. 300 examples per run, the seed pinned so a CI run is reproducible.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # the shared harness
sys.path.insert(0, str(Path(__file__).parents[2] / "codegen" / "tests"))  # codegen's corpus, by path

from corpus import CORPUS
from device_opt_fuzz import EXAMPLES, check_coverage, fuzz_one

from kiln.codegen import Opt

CASES = [case for case in CORPUS if case.name != "conv2d"]  # its many opt variants each compile for ~1 s
inputs_of: dict[int, list[np.ndarray]] = {}
executed: list[tuple[str, tuple[Opt, ...]]] = []


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@seed(21)
@given(data=st.data())
def test_random_legal_opt_sequences_run_on_cpu(data: st.DataObject) -> None:
    fuzz_one(data, "CPU", CASES, inputs_of, executed)


def test_the_fuzzer_ran_at_least_300_legal_sequences_on_cpu() -> None:
    check_coverage("CPU", executed, "test_random_legal_opt_sequences_run_on_cpu")
