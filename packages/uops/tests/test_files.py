"""Tests of kiln.uops.files.write_atomically and of the saves built on it (rewrite traces): a failed write keeps the
previous file byte for byte and leaves no temporary file behind."""

from __future__ import annotations

import errno
import os
import pathlib
import stat
from collections.abc import Iterator

import pytest

from kiln.uops import graph_rewrite, save_trace, tracing
from kiln.uops.files import write_atomically
from kiln.uops.pattern_matcher import PatternMatcher
from kiln.uops.uop import UOp
from kiln.uops.upat import UPat


def _disk_full(*_: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_write_replaces_the_file_and_keeps_its_mode(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    path.chmod(0o600)
    write_atomically(path, [b"new ", b"bytes"])
    assert path.read_bytes() == b"new bytes"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_a_write_through_a_symlink_replaces_its_target(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "real.bin"
    target.write_bytes(b"old")
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    write_atomically(link, [b"new"])
    assert link.is_symlink() and target.read_bytes() == b"new"


@pytest.mark.parametrize("durable", [True, False])
def test_a_failing_producer_keeps_the_previous_file(tmp_path: pathlib.Path, durable: bool) -> None:
    path = tmp_path / "out.bin"
    path.write_bytes(b"previous contents")

    def chunks() -> Iterator[bytes]:
        yield b"half of the new "
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, chunks(), durable=durable)
    assert path.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_a_disk_full_at_fsync_keeps_the_previous_file(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.bin"
    path.write_bytes(b"previous contents")
    monkeypatch.setattr(os, "fsync", _disk_full)
    with pytest.raises(OSError) as caught:
        write_atomically(path, [b"x" * 4096])
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert path.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_save_trace_failing_part_way_keeps_the_previous_trace(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = UOp.variable("a", 0, 9)
    pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x)])
    with tracing() as traces:
        graph_rewrite(a + 0, pm, name="identity")
    path = tmp_path / "trace.json"
    save_trace(path, traces)
    saved = path.read_bytes()
    monkeypatch.setattr(os, "replace", _disk_full)
    with pytest.raises(OSError):
        save_trace(path, [])
    monkeypatch.undo()
    assert path.read_bytes() == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]
