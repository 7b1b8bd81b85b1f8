"""get_programs: several kernels built with each compile on a compile thread, overlapping the next kernel's lowering.

The sequential path (`get_program`, one kernel after the other) is the oracle for what is built; the overlap itself
is shown with a compiler that refuses to finish a kernel until the next kernel has been rendered, which only a
pipelined build can satisfy.
"""

from __future__ import annotations

import hashlib
import threading

import pytest
from renderers_for_tests import CPULikeRenderer
from sinks_for_tests import elementwise_add, matmul, row_sum

from kiln.codegen import Compiler, KernelSignature, Program, get_program
from kiln.codegen.lifecycle import get_programs
from kiln.uops import Context, Ops, UOp, dtypes


class HashingCompiler(Compiler):
    """Binary = sha256 of the source + the source; records the thread of each compile."""

    identity = "hashing compiler 1.0"

    def __init__(self) -> None:
        self.threads: list[str] = []

    def compile(self, source: str) -> bytes:
        self.threads.append(threading.current_thread().name)
        if "refuse" in source:
            raise RuntimeError("the compiler refuses this kernel")
        return hashlib.sha256(source.encode()).digest() + source.encode()


class CompilingRenderer(CPULikeRenderer):
    """The CPU-like test target with a compiler (its binaries are checkable: see HashingCompiler)."""

    def __init__(self, compiler: Compiler) -> None:
        self.compiler = compiler


def _sinks() -> list[UOp]:
    return [elementwise_add(64), row_sum(8, 32), matmul(8, 8, 8), elementwise_add(48)]


def test_the_pipelined_build_gives_each_kernel_the_sequential_build_s_program() -> None:
    sinks = _sinks()
    with Context(DISABLE_COMPILER_CACHE=True):
        compiler = HashingCompiler()
        pipelined = get_programs(sinks, CompilingRenderer(compiler))
        sequential = [get_program(sink, CompilingRenderer(HashingCompiler())) for sink in sinks]
    assert pipelined == sequential  # hash-consed UOps: equal content is the same node
    for program in map(Program, pipelined):
        assert program.binary == hashlib.sha256(program.source.encode()).digest() + program.source.encode()
        assert isinstance(program.signature, KernelSignature)
        assert program.signature.compiler is not None
    # every compile ran on the compile thread, none on the caller's
    assert len(compiler.threads) == len(sinks)
    assert all(name.startswith("kiln-compile") for name in compiler.threads)


class HandshakeCompiler(HashingCompiler):
    """Finishes kernel k's compile only once kernel k+1 has been rendered (the last one at once)."""

    def __init__(self, kernels: int) -> None:
        super().__init__()
        self.rendered = [threading.Event() for _ in range(kernels)]
        self.compiled = 0

    def compile(self, source: str) -> bytes:
        index = self.compiled
        self.compiled += 1
        if index + 1 < len(self.rendered) and not self.rendered[index + 1].wait(timeout=10):
            raise RuntimeError(f"kernel {index + 1} was not rendered while kernel {index} compiled")
        return super().compile(source)


class HandshakeRenderer(CompilingRenderer):
    def __init__(self, compiler: HandshakeCompiler) -> None:
        super().__init__(compiler)
        self.handshake = compiler
        self.renders = 0

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        source = super().render(uops, name, signature)
        self.handshake.rendered[self.renders].set()
        self.renders += 1
        return source


def test_a_kernel_is_rendered_while_the_one_before_it_compiles() -> None:
    sinks = _sinks()
    with Context(DISABLE_COMPILER_CACHE=True):
        compiler = HandshakeCompiler(len(sinks))
        programs = get_programs(sinks, HandshakeRenderer(compiler))
    assert [Program(program).uop.src[-1].op for program in programs] == [Ops.BINARY] * len(sinks)


class RefusingCompiler(HashingCompiler):
    """Refuses its second compile."""

    def compile(self, source: str) -> bytes:
        return super().compile(source + "// refuse" if len(self.threads) == 1 else source)


def test_a_compile_error_is_raised_after_the_queued_compiles() -> None:
    compiler = RefusingCompiler()
    with Context(DISABLE_COMPILER_CACHE=True), pytest.raises(RuntimeError, match="the compiler refuses this kernel"):
        get_programs(_sinks(), CompilingRenderer(compiler))
    assert len(compiler.threads) == len(_sinks())  # the kernels after the refused one were still compiled


def test_a_bad_sink_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match="get_program needs a kernel SINK"):
        get_programs([elementwise_add(8), UOp.const(dtypes.float32, 1.0)], CompilingRenderer(HashingCompiler()))


def test_without_a_compiler_the_kernels_are_built_one_after_the_other() -> None:
    sinks = _sinks()
    assert get_programs(sinks, CPULikeRenderer()) == [get_program(sink, CPULikeRenderer()) for sink in sinks]
