"""Finding the LLVM tools the AMD renderer compiles with: a clang whose amdgcn backend knows the architecture,
ld.lld and llvm-objdump (of the same LLVM version where versioned names exist, e.g. Debian's clang-19).

Nothing runs at import; a lookup probes each candidate clang once per architecture (an empty C file compiled for
it) and is cached per process. A missing toolchain raises `ToolchainNotFoundError` naming what to install.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass

from kiln.renderers.toolchain import ToolchainNotFoundError
from kiln.uops import register_knob

AMD_CLANG = register_knob(
    "AMD_CLANG",
    str,
    "",
    "clang of the AMD renderer (a name on PATH or a path); empty: the newest clang-N, then clang, that targets the "
    "architecture.",
)

CLANG_VERSIONS: tuple[int, ...] = tuple(range(22, 14, -1))
"""Versioned clang names tried newest first (gfx1100 needs LLVM 15 or newer, gfx942 LLVM 17 or newer)."""

INSTALL_HINT = "install one (Debian/Ubuntu: `apt-get install clang-19 lld-19 llvm-19`) or set AMD_CLANG to its path"


@dataclass(frozen=True)
class AMDToolchain:
    """The three tools of one LLVM installation and clang's version line."""

    clang: str
    linker: str
    objdump: str
    version: str


def find_amd_toolchain(arch: str) -> AMDToolchain:
    """clang, ld.lld and llvm-objdump for `arch`; ToolchainNotFoundError saying what to install otherwise."""
    wanted = AMD_CLANG.value().strip()
    candidates = (wanted,) if wanted else (*(f"clang-{v}" for v in CLANG_VERSIONS), "clang")
    rejected: list[str] = []
    for candidate in candidates:
        path = shutil.which(candidate)
        if path is None:
            continue
        toolchain = _probe(path, arch)
        if toolchain is not None:
            return toolchain
        rejected.append(path)
    tried = f" (these cannot: {', '.join(rejected)})" if rejected else ""
    raise ToolchainNotFoundError(
        f"the AMD renderer needs a clang with the amdgcn target that knows {arch!r}, plus ld.lld, and found none"
        f"{tried}; {INSTALL_HINT}"
    )


def amd_toolchain_available(arch: str) -> bool:
    """Whether `find_amd_toolchain(arch)` would succeed."""
    try:
        find_amd_toolchain(arch)
    except ToolchainNotFoundError:
        return False
    return True


@functools.cache
def _probe(clang: str, arch: str) -> AMDToolchain | None:
    command = [clang, "--target=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-nogpulib", "-x", "c", "-c", "-", "-o", "-"]
    try:
        probe = subprocess.run(command, input="", capture_output=True, timeout=60, check=False)
        version = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if probe.returncode != 0:
        return None
    suffix = clang.rsplit("clang", 1)[1]  # "-19" for clang-19: its linker and disassembler carry the same suffix
    linker = shutil.which(f"ld.lld{suffix}") or shutil.which("ld.lld")
    objdump = shutil.which(f"llvm-objdump{suffix}") or shutil.which("llvm-objdump")
    if linker is None or objdump is None:
        return None
    lines = version.stdout.strip().splitlines()
    return AMDToolchain(clang, linker, objdump, lines[0] if lines else clang)
