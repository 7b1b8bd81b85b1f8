"""Fixtures of the renderer tests: `requires_ptxas` for the tests that assemble PTX with the CUDA toolkit's ptxas.

Without ptxas such a test skips (and `scripts/test.sh` lists it as not run, `-rs`), except where
`KILN_REQUIRE_PTXAS=1` says ptxas was installed on purpose: .ci/run installs it (the `nvidia-cuda-nvcc` wheel when no
toolkit is present) and sets it, so in CI a missing ptxas fails these tests instead of hiding them.
"""

from __future__ import annotations

import os

import pytest

from kiln.renderers import ptx


@pytest.fixture
def requires_ptxas() -> str:
    """The path of ptxas; a skip without one, or a failure when KILN_REQUIRE_PTXAS=1."""
    path = ptx.find_ptxas()
    if path is None:
        message = "ptxas (CUDA toolkit) not found: set PTXAS=/path/to/ptxas or put it on PATH"
        if os.environ.get("KILN_REQUIRE_PTXAS") == "1":
            pytest.fail(message + "; KILN_REQUIRE_PTXAS=1 is set, so the ptxas tests must run")
        pytest.skip(message)
    return path
