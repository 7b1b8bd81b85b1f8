"""The C renderer for CPUs and its compiler (clang or gcc, to a shared object the CPU device loads).

The source is portable GNU C: GCC/Clang vector extensions for wide loads and stores, `restrict` buffers (`const`
when only read), no headers. The compiler builds for the host CPU (`-march=native`) without changing numerics:
no fast-math, `-ffp-contract=off` (the IR rounds every op; a fused multiply-add would not), `-fwrapv` (the IR's
integers wrap around), `-fno-math-errno` (lets sqrt inline; no value changes).
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kiln.codegen import CORE_ID, KernelSignature
from kiln.renderers.c_style import CStyleRenderer, CStyleWriter
from kiln.renderers.core_launcher import c_launcher_source
from kiln.renderers.host_kernel import (
    HostCompiler,
    HostKernel,
    load_shared_object,
    objdump_disassembly,
    shared_object_functions,
)
from kiln.renderers.target import CPU, WITHOUT_MATH_LIBRARY
from kiln.renderers.toolchain import CToolchain, ToolchainCompiler, find_c_compiler, host_cpu_signature
from kiln.uops import DType, PtrDType, UOp, dtypes

C_FLAGS: tuple[str, ...] = (
    "-O2",
    "-march=native",
    "-ffp-contract=off",
    "-fwrapv",
    "-fno-math-errno",
    "-fPIC",
    "-shared",
    "-nostartfiles",
)
"""Flags of every C compile (the GCC-only `-fexcess-precision=standard` is added for gcc: it makes _Float16
results round at every assignment, which clang always does)."""


class CompileError(RuntimeError):
    """The C compiler rejected a kernel; the message has its diagnostics."""


class CCompiler(HostCompiler, ToolchainCompiler):
    """C source -> shared object bytes, with clang or gcc (the CPU_CC knob, or `choice`, picks one).

    The toolchain is looked up on first use; a missing one raises `ToolchainNotFoundError` naming what to install.
    Temporary files live in a private directory that is always removed.
    """

    def __init__(self, choice: str | None = None) -> None:
        self.choice = choice
        self._toolchain: CToolchain | None = None

    @property
    def toolchain(self) -> CToolchain:
        """The C compiler this instance uses."""
        if self._toolchain is None:
            self._toolchain = find_c_compiler(self.choice)
        return self._toolchain

    def toolchain_identity(self) -> str:
        """Compiler name, version and target, plus the host CPU (binaries are built for it)."""
        return f"{self.toolchain.identity} cpu={host_cpu_signature()}"

    @property
    def flags(self) -> tuple[str, ...]:
        """The compile flags (see C_FLAGS)."""
        extra = ("-fexcess-precision=standard",) if self.toolchain.family == "gcc" else ()
        return (*C_FLAGS, *extra)

    @flags.setter
    def flags(self, value: tuple[str, ...]) -> None:
        raise AttributeError("a CCompiler's flags are C_FLAGS")

    def compile(self, source: str) -> bytes:
        """The shared object (.so file contents) of C `source`; CompileError with the compiler's messages."""
        with tempfile.TemporaryDirectory(prefix="kiln-cc-") as directory:
            output = Path(directory) / "kernel.so"
            command = [self.toolchain.path, *self.flags, "-x", "c", "-", "-o", str(output), "-lm"]
            result = subprocess.run(command, input=source, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise CompileError(
                    f"{self.toolchain.family} failed (exit {result.returncode}):\n{result.stderr.strip()}\n"
                    f"--- source ---\n{source}"
                )
            return output.read_bytes()

    def load(self, binary: bytes, signature: KernelSignature) -> HostKernel:
        """The kernel function of shared object `binary` (see host_kernel for the calling convention)."""
        return load_shared_object(binary, signature)

    def load_functions(self, binary: bytes, names: Sequence[str]) -> tuple[dict[str, int], object]:
        """The functions `names` of shared object `binary` (their addresses) and the loaded library."""
        return shared_object_functions(binary, names)

    def core_launcher_source(self) -> str | None:
        """The core launcher in C (kiln.renderers.core_launcher)."""
        return c_launcher_source()

    def disassemble(self, binary: bytes) -> str:
        """objdump's disassembly of `binary` (NotImplementedError without objdump)."""
        return objdump_disassembly(binary)

    def supports_float16(self) -> bool:
        """Whether this compiler has arithmetic on _Float16 for the host CPU (clang < 15 needs AVX512-FP16)."""
        return _supports_float16(self.toolchain, self.flags)


@functools.cache
def _supports_float16(toolchain: CToolchain, flags: tuple[str, ...]) -> bool:
    probe = "_Float16 kiln_probe(_Float16 a, _Float16 b) { return a * b + (_Float16)1; }\n"
    command = [toolchain.path, *(f for f in flags if f.startswith(("-m", "-f"))), "-fsyntax-only", "-x", "c", "-"]
    result = subprocess.run(command, input=probe, capture_output=True, text=True, check=False)
    return result.returncode == 0


class CRenderer(CStyleRenderer[CCompiler], target=CPU):
    """C for the CPU device: scalar ALU ops (the C compiler vectorizes), wide loads/stores of 2, 4 or 8 lanes,
    THREAD axes over the host's cores (`CORE_ID` parameter). Owns a `CCompiler`, created on first use.

    Native: every dtype but bfloat16 (codegen computes it through float32), fp8 emulated here, float16 as _Float16
    (emulated where the compiler lacks it). Transcendentals (EXP2, LOG2, SIN, POW) are decomposed by codegen:
    libm's results differ from the IR's reference; SQRT is the exact hardware instruction, MULACC a true fma.
    """

    vector_widths = (2, 4, 8)
    native_ops = WITHOUT_MATH_LIBRARY

    def __init__(self, compiler_choice: str | None = None) -> None:
        self._compiler_choice = compiler_choice
        self._emulated: frozenset[DType] | None = None

    def make_compiler(self) -> CCompiler:
        """The C compiler (clang or gcc: `compiler_choice`, else the CPU_CC knob)."""
        return CCompiler(self._compiler_choice)

    @property
    def emulated_dtypes(self) -> frozenset[DType]:
        """bfloat16 and fp8 always; float16 too when the compiler has no _Float16 arithmetic for this CPU (asked
        on first use: codegen reads this only for kernels using one of these dtypes)."""
        if self._emulated is None:
            emulated = self.target.emulated_dtypes
            self._emulated = emulated if self.compiler.supports_float16() else emulated | {dtypes.float16}
        return self._emulated

    @emulated_dtypes.setter
    def emulated_dtypes(self, emulated: frozenset[DType]) -> None:
        self._emulated = emulated

    def special_is_parameter(self, uop: UOp) -> bool:
        """The core index (CORE_ID) is the kernel's last parameter."""
        return bool(uop.arg.name == CORE_ID)

    def special(self, writer: CStyleWriter, uop: UOp) -> str:
        """The core index, CORE_ID (the CPU has no block or thread indices)."""
        if uop.arg.name != CORE_ID:
            raise ValueError(f"the CPU has no hardware index {uop.arg.name!r}; only {CORE_ID} (THREAD axes)")
        if uop.dtype != dtypes.int32:
            raise ValueError(f"{CORE_ID} is the kernel's int parameter, got a SPECIAL of {uop.dtype!r}")
        return CORE_ID

    def parameters(self, writer: CStyleWriter, signature: KernelSignature) -> list[str]:
        """Buffers, variables, then `int core_id` when the kernel runs on several cores."""
        declarations = super().parameters(writer, signature)
        if signature.core_id:
            declarations.append(f"int {CORE_ID}")
        return declarations


def _scalar_of(dtype: DType) -> DType:
    return (dtype.base if isinstance(dtype, PtrDType) else dtype).scalar()
