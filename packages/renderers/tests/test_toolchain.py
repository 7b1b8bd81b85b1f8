"""Tests of toolchain: finding C compilers (CPU_CC), llvmlite, the CPU signature in cache keys; import is free."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.renderers import CPU_CC, ToolchainNotFoundError, find_c_compiler
from kiln.renderers.toolchain import host_cpu_signature
from kiln.uops import Context

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["gcc", "clang"])
def test_a_named_compiler_is_found_and_described(name: str) -> None:
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed")
    toolchain = find_c_compiler(name)
    assert toolchain.family == name
    version = subprocess.run([toolchain.path, "--version"], capture_output=True, text=True, check=True).stdout
    assert Path(toolchain.path).resolve() == Path(shutil.which(name) or "").resolve()
    assert toolchain.version == version.splitlines()[0]
    assert toolchain.target == subprocess.run([name, "-dumpmachine"], capture_output=True, text=True).stdout.strip()
    assert name in toolchain.identity and toolchain.target in toolchain.identity


def test_the_cpu_cc_knob_picks_the_compiler() -> None:
    available = [name for name in ("gcc", "clang") if shutil.which(name) is not None]
    if not available:
        pytest.skip("neither gcc nor clang is installed")
    for name in available:
        with Context(CPU_CC=name):
            assert find_c_compiler().family == name
    assert CPU_CC.name == "CPU_CC"


def test_a_missing_compiler_says_what_to_install() -> None:
    with pytest.raises(ToolchainNotFoundError, match=r"CPU_CC='kiln-missing-cc'.*apt-get install"):
        find_c_compiler("kiln-missing-cc")
    with Context(CPU_CC="kiln-missing-cc"), pytest.raises(ToolchainNotFoundError, match="apt-get install clang"):
        find_c_compiler()


def test_no_compiler_on_path_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ToolchainNotFoundError, match=r"found none of gcc, clang, cc.*apt-get install clang"):
        find_c_compiler("")


def test_host_cpu_signature_names_the_machine_and_is_stable() -> None:
    signature = host_cpu_signature()
    assert signature.startswith(os.uname().machine) and signature == host_cpu_signature()


def test_importing_the_package_loads_no_toolchain() -> None:
    # a missing toolchain must not break `import kiln.renderers`: nothing runs compilers (ptxas included), imports
    # llvmlite or loads a shared library (libnvrtc) there, although the GPU renderers are exported
    code = (
        "import ctypes, subprocess, sys\n"
        "calls = []\n"
        "subprocess.run = lambda *a, **k: calls.append(a)\n"
        "subprocess.Popen = lambda *a, **k: calls.append(a)\n"
        "ctypes.CDLL = lambda *a, **k: calls.append(a)\n"
        "import kiln.renderers\n"
        "assert kiln.renderers.CUDARenderer and kiln.renderers.PTXRenderer and kiln.renderers.load_nvrtc\n"
        "assert not calls and 'llvmlite' not in sys.modules, (calls, sorted(m for m in sys.modules if 'llvm' in m))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE_ROOT)
