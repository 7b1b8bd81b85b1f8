"""Fixtures of the renderer tests: `requires_ptxas` for the tests that assemble PTX with the CUDA toolkit's ptxas, and
`compile_every_time` for the modules about compiling (C, LLVM IR: `pytestmark = pytest.mark.usefixtures(...)`).

Without ptxas such a test skips (and `scripts/test.sh` lists it as not run, `-rs`), except where
`KILN_REQUIRE_PTXAS=1` says ptxas was installed on purpose: .ci/run installs it (the `nvidia-cuda-nvcc` wheel when no
toolkit is present) and sets it, so in CI a missing ptxas fails these tests instead of hiding them.

The helper modules here (`cpu_kernels`, `gpu_kernels`, `cuda_on_host`, `ptx_model`) import by name: this folder
is on pytest's `pythonpath` (root pyproject.toml), as is codegen's tests folder whose kernel corpus they use.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kiln.renderers import ptx
from kiln.uops import Context


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


@pytest.fixture
def compile_every_time() -> Iterator[None]:
    """The disk cache of compiled binaries off, so that each test compiles what it renders."""
    with Context(DISABLE_COMPILER_CACHE=True):
        yield
