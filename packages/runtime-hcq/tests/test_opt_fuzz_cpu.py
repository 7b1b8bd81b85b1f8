"""Random legal opt sequences executed on the CPU device (the LLVM IR renderer: vector ALU ops,
the deferred fold of unrolled reduce lanes, threads), not only interpreted.

The harness (device_opt_fuzz.py) draws like codegen's opt fuzzer; here each kernel is lowered for the CPU device's
renderer, compiled by LLVM, run on the device's threads, and compared with the corpus case's numpy reference. The
codegen fuzzer's test renderers all split vector ALU ops into scalars, so the paths only a vector-ALU renderer takes
are fuzzed here. 300 examples per run, the seed pinned so a CI run is reproducible.
"""

from __future__ import annotations

import pytest
from corpus import CORPUS
from device_opt_fuzz import check_coverage, fuzz

CASES = [case for case in CORPUS if case.name != "conv2d"]  # its many opt variants each compile for ~1 s


def test_random_legal_opt_sequences_run_on_cpu() -> None:
    executed = fuzz("CPU", CASES, seed_value=21)
    check_coverage("CPU", executed)  # in the same test as the loop: it holds under xdist too


def test_the_coverage_check_fails_when_no_sequence_ran() -> None:
    # it used to skip on an empty list (the loop had run on another xdist worker), so it never held under xdist
    with pytest.raises(AssertionError, match="only 0 legal sequences ran on CPU"):
        check_coverage("CPU", [])
    repeated = [("sum", ())] * 400  # enough runs, but one sequence over and over
    with pytest.raises(AssertionError, match="only 1 distinct"):
        check_coverage("CPU", repeated)
