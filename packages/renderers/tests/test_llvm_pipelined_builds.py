"""kiln.codegen.lifecycle.get_programs with the LLVM IR renderer: kernels compiled by llvmlite on a compile thread.

Each pipelined program is run natively against its corpus case's numpy reference (the oracle), and is the program
`get_program` builds for the same sink.
"""

from __future__ import annotations

import cpu_kernels as kernels
import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="llvmlite is not installed (pip install 'kiln-renderers[llvm]')")

from kiln.codegen import Program, get_program
from kiln.codegen.lifecycle import get_programs
from kiln.renderers import LLVMRenderer
from kiln.renderers.host_kernel import HostCompiler

CORPUS = kernels.load_corpus().CORPUS

pytestmark = pytest.mark.usefixtures("compile_every_time")  # the tests are about compiling (conftest.py)


def test_pipelined_llvm_builds_run_like_numpy_and_match_one_by_one_builds() -> None:
    cases = CORPUS[:12]
    renderer = LLVMRenderer()
    programs = get_programs([case.sink for case in cases], renderer)
    assert programs == [get_program(case.sink, renderer) for case in cases]
    corpus = kernels.load_corpus()
    compiler = renderer.compiler
    assert isinstance(compiler, HostCompiler)
    rng = np.random.default_rng(3)
    for case, uop in zip(cases, programs):
        program = Program(uop)
        assert program.binary is not None
        inputs = case.inputs(rng)
        outputs = case.output_buffers()
        stored = [corpus.to_storage(values, dtype) for values, (dtype, _) in zip(inputs, case.buffers[case.outputs :])]
        kernels.run_native(program, compiler, [*outputs, *stored], case.var_vals)
        got = [corpus.from_storage(raw, dtype) for raw, (dtype, _) in zip(outputs, case.buffers)]
        corpus.assert_matches(case, got, case.reference(inputs, case.var_vals), case.exact)
