"""Files every kiln package writes (checkpoints, traces, profiles, cache entries): written atomically.

`write_atomically` writes a temporary file in the target's folder, flushes and fsyncs it, then renames it over the
target (`os.replace`, atomic on POSIX and Windows) and fsyncs the folder: a write that fails part-way (disk full, an
exception while the bytes are produced, Ctrl-C) leaves the previous file as it was and removes the temporary file.
It lives in the lowest package so that every layer shares one implementation.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable

__all__ = ["write_atomically"]


def write_atomically(path: str | os.PathLike[str], chunks: Iterable[bytes], *, durable: bool = True) -> None:
    """Writes the concatenated `chunks` to `path` all at once or not at all (see the module docstring).

    The new file keeps the mode of the file it replaces (0o644 when there was none); a symbolic link at `path` is
    followed, so its target is the file replaced. `durable=False` skips the fsyncs (a cache entry that may be lost
    in a power cut but must never be seen half-written).
    """
    target = os.path.realpath(os.fspath(path))
    folder, name = os.path.split(target)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o644
    handle, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=folder)
    try:
        with os.fdopen(handle, "wb") as file:
            for chunk in chunks:
                file.write(chunk)
            file.flush()
            if durable:
                os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    if durable:
        _sync_folder(folder)


def _sync_folder(folder: str) -> None:
    """Makes the rename durable (POSIX: fsync of the folder); skipped where folders cannot be opened (Windows)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(handle)
    finally:
        os.close(handle)
