"""PTX emitted directly from the linear program (no C compiler in between), validated by `ptxas` when present.

Each uop is printed by the first rule of `pm_ptx` (ptx_rules.py) that matches it, into typed virtual registers
(ptxas allocates the real ones). float16, fp8 and bfloat16 are emulated by codegen (`emulated_dtypes`).
Transcendentals are decomposed by codegen (PTX only has approximate ex2/lg2/sin); sqrt, division and reciprocals use
the correctly rounded `.rn` forms and adds and multiplies are `.rn` too, so ptxas never fuses them.

The kernel is `.entry kiln_kernel(.param .u64 data<slot>..., .param .s32|.s64 var_<name>...)`, PTX ISA 7.8
(CUDA 11.8+) for sm_75 .. sm_90, newer ISAs for newer targets (`ptx_version`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

from kiln.codegen import KernelSignature
from kiln.renderers.c_style import ENTRY_NAME, local_size
from kiln.renderers.ptx_rules import REGISTER_PREFIX, PTXWriter, parameter_declarations, pm_ptx
from kiln.renderers.target import NVIDIA, WITHOUT_MATH_LIBRARY, TargetRenderer, architecture_number, nvidia_target
from kiln.renderers.toolchain import ToolchainCompiler, ToolchainNotFoundError
from kiln.uops import UOp, register_knob

PTXAS = register_knob("PTXAS", str, "", "ptxas used to validate PTX; empty: `ptxas` on PATH, else /usr/local/cuda/bin.")

PTX_VERSION = "7.8"
"""The PTX ISA of code for sm_75 .. sm_90: the first with sm_90 (CUDA 11.8)."""
_NEWER_PTX_VERSIONS = {100: "8.8", 103: "8.8", 120: "8.8", 121: "8.8", 110: "9.0"}
"""Newer targets need newer ISAs (PTX ISA release notes: sm_100/103/120/121 by 8.8, sm_110 by 9.0)."""


def ptx_version(arch: str) -> str:
    """The PTX ISA version the renderer writes for `arch`."""
    return _NEWER_PTX_VERSIONS.get(architecture_number(arch), PTX_VERSION)


# ---- the compiler -------------------------------------------------------------------------------------------------


class PTXAssemblerError(RuntimeError):
    """ptxas rejected a PTX module; the message carries its log."""


def find_ptxas() -> str | None:
    """The ptxas binary: the PTXAS knob, else `ptxas` on PATH, else under CUDA_HOME or /usr/local/cuda."""
    chosen = PTXAS.value().strip()
    if chosen:
        found = shutil.which(chosen)
        if found is None:
            raise ToolchainNotFoundError(f"PTXAS={chosen!r} names no executable; install the CUDA toolkit's ptxas")
        return found
    homes = [home for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if home]
    candidates = [os.path.join(home, "bin", "ptxas") for home in homes]
    found = shutil.which("ptxas")
    if found is not None:
        return found
    return next((path for path in candidates if os.path.isfile(path) and os.access(path, os.X_OK)), None)


@functools.cache
def _ptxas_version(path: str) -> str:
    output = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False).stdout
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown"


class PTXCompiler(ToolchainCompiler):
    """Returns the PTX text (the driver JIT-compiles it); when `ptxas` is found it first assembles it for `arch`
    to catch errors early (PTXAssemblerError with ptxas's log)."""

    def __init__(self, arch: str = "sm_80", validate: bool = True) -> None:
        self.arch = f"sm_{architecture_number(arch)}"
        self.validate = validate
        self.flags = (self.arch, "validated" if validate else "unvalidated")

    @property
    def ptxas(self) -> str | None:
        """Path of the ptxas used for validation (None: not found or validation off)."""
        return find_ptxas() if self.validate else None

    def toolchain_identity(self) -> str:
        ptxas = self.ptxas
        version = ptx_version(self.arch)
        return f"ptx {version} ptxas {_ptxas_version(ptxas)}" if ptxas else f"ptx {version}"

    def compile(self, source: str) -> bytes:
        ptxas = self.ptxas
        if ptxas is not None:
            self.assemble(source, ptxas)
        return source.encode()

    def assemble(self, source: str, ptxas: str | None = None) -> bytes:
        """A cubin of `source` made by ptxas (ToolchainNotFoundError without ptxas)."""
        ptxas = ptxas or find_ptxas()
        if ptxas is None:
            raise ToolchainNotFoundError("assembling PTX needs ptxas from the CUDA toolkit; install it or set PTXAS")
        with tempfile.TemporaryDirectory(prefix="kiln-ptx-") as directory:
            source_path, output_path = os.path.join(directory, "kernel.ptx"), os.path.join(directory, "kernel.cubin")
            with open(source_path, "w", encoding="utf-8") as file:
                file.write(source)
            completed = subprocess.run(
                [ptxas, f"-arch={self.arch}", "-o", output_path, source_path],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if completed.returncode != 0:
                log = (completed.stderr + completed.stdout).strip()
                raise PTXAssemblerError(f"ptxas -arch={self.arch} rejected the PTX:\n{log}")
            with open(output_path, "rb") as file:
                return file.read()

    def disassemble(self, binary: bytes) -> str:
        """The binary is the PTX text itself."""
        return binary.decode()

    def __repr__(self) -> str:
        return f"PTXCompiler(arch={self.arch!r})"


# ---- the renderer -------------------------------------------------------------------------------------------------


class PTXRenderer(TargetRenderer[PTXCompiler], target=NVIDIA):
    """PTX kernels for one architecture (`arch`, e.g. "sm_80"); its compiler validates them with ptxas."""

    vector_widths = (2, 4)
    native_ops = WITHOUT_MATH_LIBRARY

    def __init__(self, arch: str = "sm_80", device: str = "CUDA") -> None:
        self.use_architecture(nvidia_target(arch), device)

    def make_compiler(self) -> PTXCompiler:
        """ptxas validation for this architecture."""
        return PTXCompiler(self.arch)

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        """The PTX module of kernel `name` (entry ENTRY_NAME, the name in the first comment) from `uops`, its
        parameters those of `signature`."""
        signature = signature or KernelSignature.of(uops)
        writer = PTXWriter(self)
        for uop in uops:
            registers, _ = pm_ptx.rewrite_with_rule(uop, writer)
            if registers is None:
                raise ValueError(f"{type(self).__name__} cannot render {uop.op!r} of dtype {uop.dtype!r}")
            writer.values[uop] = registers
        counts = sorted(writer.counts.items())
        registers = [f"\t.reg .{kind} {REGISTER_PREFIX[kind]}<{count}>;" for kind, count in counts]
        header = [
            f"// kiln {type(self).__name__} kernel {name}",
            f".version {ptx_version(self.arch)}",
            f".target {self.arch}",
            ".address_size 64",
            "",
            f".visible .entry {ENTRY_NAME}(",
            ",\n".join(f"\t{parameter}" for parameter in parameter_declarations(signature)),
            f")\n.maxntid {local_size(signature)}, 1, 1",
            "{",
        ]
        return "\n".join([*header, *registers, *writer.declarations, *writer.lines, "\tret;", "}"]) + "\n"
