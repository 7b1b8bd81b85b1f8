"""The `Compiler` interface: source -> binary, with a disk cache shared by every process of the user."""

from __future__ import annotations

from abc import ABC, abstractmethod

from kiln.codegen.disk_cache import DiskCache
from kiln.uops import knobs

_compile_cache = DiskCache("compile")


class Compiler(ABC):
    """Turns rendered source into a binary. Each renderer owns its compiler (ARCHITECTURE.md).

    Subclasses implement `compile` and set `identity` (the compiler and its version) and `flags`; together with the
    source they key the disk cache, so a new compiler version or new flags never reuse an old binary.
    """

    identity: str = ""
    """Name and version of the toolchain, e.g. "clang 17.0.6 x86_64"."""
    flags: tuple[str, ...] = ()
    """Options that change the binary (optimization level, target architecture ...)."""

    @abstractmethod
    def compile(self, source: str) -> bytes:
        """The binary of `source`; raises RuntimeError (or a subclass) naming the compiler's error."""

    def cache_key(self, source: str) -> str:
        """The disk-cache key of `source` for this compiler."""
        identity = self.identity or type(self).__qualname__
        return "\x00".join((identity, *self.flags, source))

    def compile_cached(self, source: str) -> bytes:
        """`compile(source)`, reusing a binary from the disk cache (knob DISABLE_COMPILER_CACHE turns it off).

        A missing or corrupted entry is compiled again and rewritten; concurrent processes may race on the same
        entry harmlessly (each writes a whole file atomically).
        """
        if knobs.DISABLE_COMPILER_CACHE:
            return self.compile(source)
        key = self.cache_key(source)
        cached = _compile_cache.get(key)
        if cached is not None:
            return cached
        binary = self.compile(source)
        if not isinstance(binary, bytes):
            raise TypeError(f"{type(self).__name__}.compile must return bytes, got {type(binary).__name__}")
        _compile_cache.put(key, binary)
        return binary

    def disassemble(self, binary: bytes) -> str:
        """Human-readable assembly of `binary`; compilers without a disassembler raise NotImplementedError."""
        raise NotImplementedError(f"{type(self).__name__} has no disassembler")
