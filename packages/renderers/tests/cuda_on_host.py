"""Running the CUDA renderer's kernels on the host, to check what they compute without a GPU.

The CUDA C is compiled as C++ by the host's g++ with a few definitions standing in for CUDA (blockIdx/threadIdx
globals, `__align__` as `alignas`, the bit-cast intrinsics): a launcher runs the kernel once per thread of the grid,
one thread after another. That is faithful for kernels without BARRIER (their threads are independent), which is
what the callers pass. Many kernels go into one shared object, each in its own namespace, so g++ runs once.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

_PRELUDE = r"""
#include <cmath>
#include <cstring>
struct kiln_dim3 { unsigned int x, y, z; };
static kiln_dim3 blockIdx, threadIdx;
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(n)
#define __align__(n) alignas(n)
#define __syncthreads() do {} while (0)
static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline double __longlong_as_double(unsigned long long u) { double d; memcpy(&d, &u, 8); return d; }
"""

_SIGNATURE = re.compile(r'extern "C" __global__ void __launch_bounds__\(\d+\) kiln_kernel\((.*)\) \{')


@dataclass(frozen=True)
class HostLaunch:
    """One kernel compiled for the host: call it with (global dims, local dims, arguments)."""

    function: ctypes._CFuncPtr  # type: ignore[name-defined]

    def __call__(self, global_size: tuple[int, int, int], local_size: tuple[int, int, int], *arguments: int) -> None:
        self.function(*global_size, *local_size, *arguments)


def host_compiler() -> str | None:
    """g++ (or clang++) on PATH, None if there is neither."""
    return shutil.which("g++") or shutil.which("clang++")


def compile_on_host(sources: list[str], directory: Path) -> list[HostLaunch]:
    """Compile CUDA-renderer sources into one shared object; returns one launcher per source."""
    compiler = host_compiler()
    assert compiler is not None
    units = [_PRELUDE]
    argument_types = []
    for number, source in enumerate(sources):
        match = _SIGNATURE.search(source)
        assert match is not None, source
        parameters = [p.strip() for p in match.group(1).split(",") if p.strip()]
        names = [re.split(r"[\s*]+", p)[-1] for p in parameters]
        argument_types.append([_ctype(p) for p in parameters])
        body = source.replace('extern "C" __global__ ', "")
        units.append(f"namespace kernel{number} {{\n{body}}}")
        units.append(
            f'extern "C" void launch{number}(int g0, int g1, int g2, int l0, int l1, int l2'
            + "".join(f", {p}" for p in parameters)
            + ") {\n"
            "  for (int b2 = 0; b2 < g2; b2++) for (int b1 = 0; b1 < g1; b1++) for (int b0 = 0; b0 < g0; b0++)\n"
            "  for (int t2 = 0; t2 < l2; t2++) for (int t1 = 0; t1 < l1; t1++) for (int t0 = 0; t0 < l0; t0++) {\n"
            "    blockIdx = {(unsigned)b0, (unsigned)b1, (unsigned)b2};\n"
            "    threadIdx = {(unsigned)t0, (unsigned)t1, (unsigned)t2};\n"
            f"    kernel{number}::kiln_kernel({', '.join(names)});\n"
            "  }\n}"
        )
    source_path, library_path = directory / "kernels.cpp", directory / "kernels.so"
    source_path.write_text("\n".join(units))
    flags = ["-O1", "-fwrapv", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC", "-std=c++17", "-w"]
    completed = subprocess.run(
        [compiler, *flags, "-o", str(library_path), str(source_path)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr[:4000]
    library = ctypes.CDLL(str(library_path))
    launches = []
    for number, types in enumerate(argument_types):
        function = getattr(library, f"launch{number}")
        function.argtypes = [ctypes.c_int] * 6 + types
        function.restype = None
        launches.append(HostLaunch(function))
    return launches


def _ctype(parameter: str) -> type[ctypes.c_void_p] | type[ctypes.c_int32] | type[ctypes.c_int64]:
    if "*" in parameter:
        return ctypes.c_void_p
    return ctypes.c_int64 if "long long" in parameter else ctypes.c_int32


def temporary_directory() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="kiln-cuda-host-")
