"""A ctypes binding of NVIDIA's runtime compilation library (libnvrtc): CUDA C -> PTX or cubin, no nvcc needed.

The library is looked up when first used, never at import: the knob NVRTC_PATH (a file), then the pip wheel
`nvidia-cuda-nvrtc` (`site-packages/nvidia/cu13/lib`, `nvidia/cu12/lib` or the older `nvidia/cuda_nvrtc/lib`), then
the system loader path and CUDA_HOME / /usr/local/cuda. A missing library raises `NvrtcNotFoundError` naming
`pip install 'kiln-renderers[cuda]'`. Function signatures follow NVIDIA's `nvrtc.h` (shipped in the same wheel).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass

from kiln.renderers.toolchain import ToolchainNotFoundError
from kiln.uops import register_knob

NVRTC_PATH = register_knob(
    "NVRTC_PATH",
    str,
    "",
    "Path of libnvrtc used by the CUDA renderer; empty: the nvidia-cuda-nvrtc wheel, then the system's CUDA.",
)

INSTALL_HINT = "install it with `pip install 'kiln-renderers[cuda]'` (or set NVRTC_PATH to a libnvrtc.so)"

_WHEEL_LIBRARY_DIRS = ("cu13/lib", "cu12/lib", "cuda_nvrtc/lib", "cu13/bin", "cu12/bin", "cuda_nvrtc/bin")
_LIBRARY_PATTERNS = ("libnvrtc.so*", "nvrtc64_*.dll")  # Linux, Windows
_SYSTEM_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64")


class NvrtcNotFoundError(ToolchainNotFoundError):
    """libnvrtc is not installed (or NVRTC_PATH names no loadable library)."""


class NvrtcCompileError(RuntimeError):
    """NVRTC rejected a program; the message carries its log."""


def library_candidates() -> list[str]:
    """Paths tried, in order, when NVRTC_PATH is empty (existing files only)."""
    candidates: list[str] = []
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        for subdirectory in _WHEEL_LIBRARY_DIRS:
            for pattern in _LIBRARY_PATTERNS:
                candidates += sorted(glob.glob(os.path.join(root, subdirectory, pattern)), reverse=True)
    found = ctypes.util.find_library("nvrtc")
    if found:
        candidates.append(found)
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    directories = ((os.path.join(cuda_home, "lib64"),) if cuda_home else ()) + _SYSTEM_DIRS
    for directory in directories:
        candidates += sorted(glob.glob(os.path.join(directory, "libnvrtc.so*")), reverse=True)
    # libnvrtc-builtins is a companion library, not NVRTC itself
    return [path for path in candidates if "builtins" not in os.path.basename(path)]


@dataclass(frozen=True)
class Nvrtc:
    """A loaded libnvrtc: its path, version and the compile entry point."""

    path: str
    library: ctypes.CDLL

    @functools.cached_property
    def version(self) -> tuple[int, int]:
        """(major, minor) of the library."""
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.library.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        return major.value, minor.value

    @functools.cached_property
    def supported_architectures(self) -> tuple[int, ...]:
        """The sm numbers it can compile for, e.g. (75, 80, 86, 89, 90, ...)."""
        count = ctypes.c_int()
        self._check(self.library.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
        architectures = (ctypes.c_int * count.value)()
        self._check(self.library.nvrtcGetSupportedArchs(architectures), "nvrtcGetSupportedArchs")
        return tuple(architectures)

    def error_string(self, result: int) -> str:
        """NVRTC's name of result code `result`."""
        function = self.library.nvrtcGetErrorString
        function.restype = ctypes.c_char_p
        text = function(ctypes.c_int(result))
        return text.decode() if isinstance(text, bytes) else f"NVRTC error {result}"

    def _check(self, result: int, call: str, log: str = "") -> None:
        if result != 0:
            detail = f":\n{log}" if log else ""
            raise NvrtcCompileError(f"{call} failed with {self.error_string(result)}{detail}")

    def compile(self, source: str, options: Sequence[str], output: str, name: str = "kernel.cu") -> bytes:
        """Compile CUDA C `source` with `options`; `output` "ptx" (text, no trailing NUL) or "cubin"."""
        if output not in ("ptx", "cubin"):
            raise ValueError(f"NVRTC output must be 'ptx' or 'cubin', got {output!r}")
        program = ctypes.c_void_p()
        self._check(
            self.library.nvrtcCreateProgram(ctypes.byref(program), source.encode(), name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            encoded = [option.encode() for option in options]
            array = (ctypes.c_char_p * len(encoded))(*encoded)
            result = self.library.nvrtcCompileProgram(program, len(encoded), array)
            if result != 0:
                raise NvrtcCompileError(
                    f"NVRTC {self.version[0]}.{self.version[1]} could not compile {name} "
                    f"({self.error_string(result)}) with {' '.join(options)}:\n{self._log(program)}"
                )
            size_function, get_function = (
                (self.library.nvrtcGetPTXSize, self.library.nvrtcGetPTX)
                if output == "ptx"
                else (self.library.nvrtcGetCUBINSize, self.library.nvrtcGetCUBIN)
            )
            size = ctypes.c_size_t()
            self._check(size_function(program, ctypes.byref(size)), f"get {output} size")
            buffer = ctypes.create_string_buffer(size.value)
            self._check(get_function(program, buffer), f"get {output}")
            data = buffer.raw[: size.value]
            return data.rstrip(b"\x00") if output == "ptx" else data
        finally:
            self.library.nvrtcDestroyProgram(ctypes.byref(program))

    def _log(self, program: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        if self.library.nvrtcGetProgramLogSize(program, ctypes.byref(size)) != 0:
            return "(no log)"
        buffer = ctypes.create_string_buffer(size.value)
        if self.library.nvrtcGetProgramLog(program, buffer) != 0:
            return "(no log)"
        return buffer.value.decode(errors="replace")


@functools.cache
def _load(path: str | None) -> Nvrtc:
    if path:
        candidates = [path]
    else:
        candidates = library_candidates()
        if not candidates:
            raise NvrtcNotFoundError(f"the CUDA renderer needs NVIDIA's NVRTC library and found none; {INSTALL_HINT}")
    errors = []
    for candidate in candidates:
        try:
            library = ctypes.CDLL(candidate)
        except OSError as error:
            errors.append(f"{candidate}: {error}")
            continue
        library.nvrtcCreateProgram.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        library.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        for name in ("nvrtcGetPTXSize", "nvrtcGetCUBINSize", "nvrtcGetProgramLogSize"):
            getattr(library, name).argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        for name in ("nvrtcGetPTX", "nvrtcGetCUBIN", "nvrtcGetProgramLog"):
            getattr(library, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        return Nvrtc(candidate, library)
    where = "NVRTC_PATH" if path else "every candidate"
    raise NvrtcNotFoundError(f"could not load libnvrtc ({where}): {'; '.join(errors)}; {INSTALL_HINT}")


def load_nvrtc() -> Nvrtc:
    """The NVRTC library (NVRTC_PATH knob first); NvrtcNotFoundError naming what to install when missing."""
    return _load(NVRTC_PATH.value().strip() or None)


def nvrtc_available() -> bool:
    """Whether NVRTC can be loaded here (for tests and device selection)."""
    try:
        load_nvrtc()
    except NvrtcNotFoundError:
        return False
    return True
