"""CPU kernels loaded into this process: the calling convention the C and LLVM IR renderers share, and loading.

Every CPU kernel is one function named `ENTRY_NAME` returning void, with the parameters of its `KernelSignature`
(`Program.signature`), in this order:
- one pointer per buffer parameter, by ascending slot (`signature.buffers`): the buffer's first element;
- one integer per variable, sorted by name (`signature.variables`), int32 or int64 as its dtype;
- `int core_id` (int32, named `CORE_ID`) last, only if `signature.core_id`: run the function once per core id in
  0..size-1 (`signature.global_size[0]`), concurrently.

A compiler of such kernels is a `HostCompiler`: `load(binary, signature)` returns a `HostKernel` (its address and
argument types; calling it releases the GIL, so cores may run on Python threads). A runtime finds the compiler that
loads a binary through the signature's `CompilerIdentity` (`host_loader(signature)`), not by reading the binary.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kiln.codegen import CORE_ID, Compiler, KernelSignature
from kiln.renderers.c_style import ENTRY_NAME
from kiln.uops import dtypes

CType = type[ctypes.c_void_p] | type[ctypes.c_int32] | type[ctypes.c_int64]


@dataclass(frozen=True)
class KernelParameter:
    """One parameter of a CPU kernel: `kind` "buffer" (name: the slot), "variable" (its name) or CORE_ID."""

    kind: str
    name: str
    ctype: CType


def kernel_parameters(signature: KernelSignature) -> tuple[KernelParameter, ...]:
    """The parameters of the CPU kernel of `signature`, in call order."""
    parameters = [KernelParameter("buffer", str(buffer.slot), ctypes.c_void_p) for buffer in signature.buffers]
    for variable in signature.variables:
        ctype: CType = ctypes.c_int64 if variable.dtype.scalar() == dtypes.int64 else ctypes.c_int32
        parameters.append(KernelParameter("variable", variable.name, ctype))
    if signature.core_id:
        parameters.append(KernelParameter(CORE_ID, CORE_ID, ctypes.c_int32))
    return tuple(parameters)


class HostKernel:
    """A kernel function in this process's memory: `address`, and a ctypes call taking the parameters in order.

    `keepalive` holds what owns the code (a loaded library, an execution engine); the code is valid while this
    object lives.
    """

    def __init__(self, address: int, parameters: Sequence[KernelParameter], keepalive: object) -> None:
        if not address:
            raise RuntimeError(f"the kernel binary has no function {ENTRY_NAME!r}")
        self.address = address
        self.parameters = tuple(parameters)
        self.keepalive = keepalive
        prototype = ctypes.CFUNCTYPE(None, *(p.ctype for p in self.parameters))
        # the ctypes call itself, without `__call__`'s argument count check: for a caller that checked `parameters`
        # once (the CPU runtime does when it loads the kernel) and calls it on every launch
        self.function: Callable[..., None] = prototype(address)

    def __call__(self, *arguments: int) -> None:
        """Run the kernel: buffer addresses, variable values, core id (see `kernel_parameters`)."""
        if len(arguments) != len(self.parameters):
            names = [f"{p.kind} {p.name}" for p in self.parameters]
            raise TypeError(f"the kernel takes {len(self.parameters)} arguments ({names}), got {len(arguments)}")
        self.function(*arguments)

    def __repr__(self) -> str:
        return f"<HostKernel at {self.address:#x} ({', '.join(p.name for p in self.parameters)})>"


class HostCompiler(Compiler):
    """A compiler whose binaries run in this process (the CPU device's renderers).

    A runtime loads a binary with the compiler its program's signature names (`host_loader`), so a subclass can be
    made without arguments: loading needs none of a compile's choices.
    """

    @abstractmethod
    def load(self, binary: bytes, signature: KernelSignature) -> HostKernel:
        """The kernel of `binary` (compiled from a rendering of a program with `signature`), ready to call."""

    def load_functions(self, binary: bytes, names: Sequence[str]) -> tuple[dict[str, int], object]:
        """The addresses of the functions `names` in `binary` (0 for a missing one) and what keeps the code alive:
        for binaries that are not one kernel (the core launcher). NotImplementedError unless a subclass loads them."""
        raise NotImplementedError(f"{type(self).__name__} cannot load functions by name")

    def core_launcher_source(self) -> str | None:
        """The source, in this compiler's language, of the native core launcher (kiln.renderers.core_launcher); None
        when it has none (the runtime then calls a multi-core kernel's cores through ctypes)."""
        return None


def _open_shared_object(binary: bytes, what: str) -> ctypes.CDLL:
    # the dynamic loader needs a file: written to a temporary one, deleted at once
    handle, path = tempfile.mkstemp(prefix="kiln-kernel-", suffix=".so")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(binary)
        return ctypes.CDLL(path)
    except OSError as error:
        raise RuntimeError(f"cannot load {what}'s shared object: {error}") from error
    finally:
        os.unlink(path)


def load_shared_object(binary: bytes, signature: KernelSignature) -> HostKernel:
    """Load shared-object bytes (the C compiler's binary) with the dynamic loader; the file is deleted at once."""
    library = _open_shared_object(binary, "the kernel")
    try:
        entry = getattr(library, ENTRY_NAME)
    except AttributeError as error:
        raise RuntimeError(f"the kernel's shared object has no function {ENTRY_NAME!r}") from error
    address = ctypes.cast(entry, ctypes.c_void_p).value
    return HostKernel(address or 0, kernel_parameters(signature), library)


def shared_object_functions(binary: bytes, names: Sequence[str]) -> tuple[dict[str, int], object]:
    """`HostCompiler.load_functions` for shared-object bytes: the functions' addresses and the loaded library."""
    library = _open_shared_object(binary, "a library")
    addresses = {}
    for name in names:
        function = getattr(library, name, None)
        addresses[name] = (ctypes.cast(function, ctypes.c_void_p).value or 0) if function is not None else 0
    return addresses, library


def objdump_disassembly(binary: bytes) -> str:
    """objdump's disassembly of an object or shared object (NotImplementedError without objdump)."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise NotImplementedError("disassembling needs objdump (Debian/Ubuntu: `apt-get install binutils`)")
    with tempfile.TemporaryDirectory(prefix="kiln-objdump-") as directory:
        path = Path(directory) / "kernel.o"
        path.write_bytes(binary)
        result = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True)
        # the first line names the temporary file
        return "\n".join(line for line in result.stdout.splitlines() if str(path) not in line).strip() + "\n"
