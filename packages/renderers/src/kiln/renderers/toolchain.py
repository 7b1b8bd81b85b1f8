"""Finding the toolchains the CPU renderers compile with: a C compiler (clang or gcc) and llvmlite.

Nothing here runs at import: a renderer looks its toolchain up when it first needs it, and a missing one raises
`ToolchainNotFoundError` naming what to install. Results are cached per process.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
from abc import abstractmethod
from dataclasses import dataclass
from types import ModuleType

from kiln.codegen import Compiler
from kiln.uops import register_knob

CPU_CC = register_knob(
    "CPU_CC",
    str,
    "",
    "C compiler of the CPU C renderer: 'gcc', 'clang', or a path to a compiler; empty: the first of gcc, clang, cc.",
)

LLVM_PIPELINE = register_knob(
    "LLVM_PIPELINE",
    str,
    "kernel",
    "IR optimization pipeline of the LLVM IR renderer's compiler: 'kernel' (a few cleanup passes: kiln's own opts "
    "already upcast and unrolled the kernel; about half the compile time of 'O2'; kernels the renderer marks for "
    "narrow types (float16/bfloat16 math, 8/16-bit integers loaded or stored) still take -O2, whose SLP vectorizer "
    "packs their lane conversions) or 'O2' (LLVM's default "
    "-O2 pipeline with the loop and SLP vectorizers for every kernel). Part of the compile-cache key.",
    choices=("kernel", "O2"),
)

C_COMPILER_CANDIDATES: tuple[str, ...] = ("gcc", "clang", "cc")
"""The compilers tried in order when CPU_CC is empty (gcc first: it compiled the corpus fastest, see the README)."""


class ToolchainNotFoundError(RuntimeError):
    """A renderer's toolchain (C compiler, llvmlite) is not installed; the message says what to install."""


class ToolchainCompiler(Compiler):
    """A compiler whose `identity` (part of every compile-cache key) is asked of its toolchain when a key needs it,
    never when the compiler is made: finding the toolchain may be slow or fail, and must fail at first use."""

    @property
    def identity(self) -> str:
        """The toolchain's name, version and target (`toolchain_identity`)."""
        return self.toolchain_identity()

    @identity.setter
    def identity(self, value: str) -> None:
        raise AttributeError(f"a {type(self).__name__}'s identity comes from its toolchain, not {value!r}")

    @abstractmethod
    def toolchain_identity(self) -> str:
        """The toolchain's name, version and target, as the compile cache keys binaries by."""


@dataclass(frozen=True)
class CToolchain:
    """One C compiler: its path, family ("clang" or "gcc"), version line and target triple."""

    path: str
    family: str
    version: str
    target: str

    @property
    def identity(self) -> str:
        """Name, version and target: part of every compile-cache key."""
        return f"{self.family} {self.version} {self.target}"


def find_c_compiler(choice: str | None = None) -> CToolchain:
    """The C compiler named by `choice` (default: the CPU_CC knob), else the first of gcc, clang, cc on PATH.

    Raises ToolchainNotFoundError naming what to install when none is found or the chosen one does not run.
    """
    wanted = (CPU_CC.value() if choice is None else choice).strip()
    candidates = (wanted,) if wanted else C_COMPILER_CANDIDATES
    for candidate in candidates:
        path = shutil.which(candidate)
        if path is not None:
            return _describe(os.path.realpath(path), candidate)
    if wanted:
        raise ToolchainNotFoundError(
            f"CPU_CC={wanted!r} names no compiler on PATH; install it (Debian/Ubuntu: `apt-get install clang` or "
            "`apt-get install gcc`) or set CPU_CC to 'clang', 'gcc' or a compiler's full path"
        )
    raise ToolchainNotFoundError(
        "the C renderer needs a C compiler and found none of gcc, clang, cc on PATH; install one "
        "(Debian/Ubuntu: `apt-get install clang`; macOS: `xcode-select --install`) or set CPU_CC to a compiler's path"
    )


@functools.cache
def _describe(path: str, name: str) -> CToolchain:
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
        target = subprocess.run([path, "-dumpmachine"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as error:
        raise ToolchainNotFoundError(
            f"the C compiler {name!r} at {path} does not run ({error}); reinstall it or set CPU_CC to another one"
        ) from error
    first_line = version.strip().splitlines()[0] if version.strip() else name
    family = "clang" if "clang" in version.lower() else "gcc"
    return CToolchain(path, family, first_line, target.strip())


LLVM_OPTIONS: dict[int, tuple[str, ...]] = {22: ("-disable-loop-idiom-hashrecognize",)}
"""LLVM command-line options set once per process, by LLVM major version.

LLVM 22's loop idiom pass looks for CRC loops (HashRecognize) by walking a loop's use-def chains without a visited
set: exponential in the depth of a DAG whose values are used twice, so a kernel keeping an integer accumulator over
a fused Threefry (`Tensor.normal(16, 64, 3).max()`: its NaN flag, next to three unrolled lanes of 20 rounds) never
finished compiling; 16 rounds took 16 s (fixed upstream after 22: llvm/llvm-project#211711 and #211887). Kernels
hold no CRC loops, so nothing is lost. Only versions known to have the option get it: LLVM ends the process on an
option it does not know."""


def llvm_options(llvm: ModuleType) -> tuple[str, ...]:
    """The LLVM_OPTIONS of the LLVM version `llvm` (llvmlite.binding) carries."""
    return LLVM_OPTIONS.get(int(llvm.llvm_version_info[0]), ())


def llvmlite_binding() -> ModuleType:
    """`llvmlite.binding`, with the native target initialized; ToolchainNotFoundError if llvmlite is missing."""
    try:
        import llvmlite.binding as llvm
    except ImportError as error:
        raise ToolchainNotFoundError(
            "the LLVM IR renderer needs llvmlite: install it with `pip install 'kiln-renderers[llvm]'` "
            "(or `pip install llvmlite`)"
        ) from error
    binding: ModuleType = llvm
    _initialize_llvm(binding)
    return binding


@functools.cache
def _initialize_llvm(llvm: ModuleType) -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for option in llvm_options(llvm):
        llvm.set_option("kiln", option)


@functools.cache
def host_cpu_signature() -> str:
    """The host CPU's model and feature flags, hashed: binaries built for the native CPU are keyed by it."""
    description = platform.machine() + " " + platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if not line.strip() and description.count("\n"):
                    break  # the first processor's entry is enough
                key = line.split(":", 1)[0].strip()
                if key in ("model name", "flags", "Features", "CPU part", "CPU implementer", "CPU variant"):
                    description += "\n" + line.strip()
    except OSError:
        pass
    digest = hashlib.sha256(description.encode()).hexdigest()[:16]
    return f"{platform.machine()}-{digest}"
