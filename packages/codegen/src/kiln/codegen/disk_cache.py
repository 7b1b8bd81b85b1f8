"""A small on-disk key -> bytes cache that several processes may share (compiled binaries, BEAM results).

Each entry is one file written to a temporary name and moved into place with `os.replace`, which is atomic on
POSIX and Windows: a reader sees the old entry, the new one, or none, never half a file. Entries carry a sha256 of
their payload, so a truncated or corrupted file reads as missing (and is rewritten by the next `put`), and the
sha256 of the key they were stored under, so an entry found under another key's name (a file copied or swapped by
hand, a hash collision of the file names) also reads as missing instead of handing back the wrong binary.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from kiln.uops import knobs
from kiln.uops.files import write_atomically

_MAGIC = b"KILNDC2\n"  # format 2: the key's digest follows the magic
_DIGEST_SIZE = 32


def cache_root() -> Path:
    """The directory kiln caches live in: the CACHEDIR knob (default: the user's cache directory + /kiln)."""
    return _expanded(knobs.CACHEDIR)


@functools.lru_cache(maxsize=16)
def _expanded(directory: str) -> Path:
    # each compile reads the root twice (lookup and write): Path(...).expanduser() cost ~10 us a time
    return Path(directory).expanduser()


class DiskCache:
    """A namespace of the cache root: `get(key)` / `put(key, value)` with string keys and bytes values."""

    def __init__(self, namespace: str, root: Path | None = None) -> None:
        if not namespace or "/" in namespace or namespace.startswith("."):
            raise ValueError(f"cache namespace must be a plain directory name, got {namespace!r}")
        self.namespace = namespace
        self._root = root

    @property
    def directory(self) -> Path:
        """Where this namespace's entries live (the root is read when used, so knob changes apply)."""
        return (self._root if self._root is not None else cache_root()) / self.namespace

    def path_of(self, key: str) -> Path:
        """The file holding `key` (keys are hashed, so any string is a valid key)."""
        return self._path_of(hashlib.sha256(key.encode()).digest())

    def _path_of(self, key_digest: bytes) -> Path:
        # one Path built from text: each `/` join costs about as much as hashing a kernel's source
        root = self._root if self._root is not None else cache_root()
        name = key_digest.hex()
        return Path(f"{root}/{self.namespace}/{name[:2]}/{name}.bin")

    def get(self, key: str) -> bytes | None:
        """The stored value of `key`, or None when it is missing, truncated or corrupted."""
        key_digest = hashlib.sha256(key.encode()).digest()
        try:
            data = self._path_of(key_digest).read_bytes()
        except OSError:
            return None
        key_end = len(_MAGIC) + _DIGEST_SIZE
        header = key_end + _DIGEST_SIZE
        if len(data) < header or not data.startswith(_MAGIC):
            return None
        if data[len(_MAGIC) : key_end] != key_digest:
            return None  # an entry of another key
        payload = data[header:]
        if hashlib.sha256(payload).digest() != data[key_end:header]:
            return None
        return payload

    def put(self, key: str, value: bytes) -> None:
        """Store `value` under `key` atomically; an unwritable cache directory is silently skipped (it is a cache)."""
        key_digest = hashlib.sha256(key.encode()).digest()
        path = self._path_of(key_digest)
        entry = _MAGIC + key_digest + hashlib.sha256(value).digest() + value
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, [entry], durable=False)
        except OSError:
            return
