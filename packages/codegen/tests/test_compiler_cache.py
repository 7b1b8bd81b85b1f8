"""Compiler.compile_cached: one compile per (compiler, flags, source), shared by processes, robust to bad entries."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kiln.codegen import Compiler, DiskCache
from kiln.uops import Context


class CountingCompiler(Compiler):
    """Binary = sha256(flags + source) + source: checkable; every real compile appends a line to `log`."""

    identity = "counting compiler 1.0"

    def __init__(self, log: Path, flags: tuple[str, ...] = ()) -> None:
        self.log = log
        self.flags = flags

    def compile(self, source: str) -> bytes:
        with self.log.open("a") as file:
            file.write(source + "\n")
        return expected_binary(source, self.flags)


def expected_binary(source: str, flags: tuple[str, ...]) -> bytes:
    return hashlib.sha256(("|".join(flags) + source).encode()).digest() + source.encode()


def compiles(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_second_call_reads_the_cache(tmp_path: Path) -> None:
    log = tmp_path / "log"
    compiler = CountingCompiler(log)
    with Context(CACHEDIR=str(tmp_path / "cache")):
        assert compiler.compile_cached("int f;") == expected_binary("int f;", ())
        assert compiler.compile_cached("int f;") == expected_binary("int f;", ())
        assert compiler.compile_cached("int g;") == expected_binary("int g;", ())
    assert compiles(log) == ["int f;", "int g;"]


def test_key_includes_identity_and_flags(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Context(CACHEDIR=str(tmp_path / "cache")):
        CountingCompiler(log).compile_cached("x")
        assert CountingCompiler(log, ("-O3",)).compile_cached("x") == expected_binary("x", ("-O3",))
        newer = CountingCompiler(log)
        newer.identity = "counting compiler 2.0"
        newer.compile_cached("x")
        CountingCompiler(log).compile_cached("x")  # the first one again: cached
    assert compiles(log) == ["x", "x", "x"]


@pytest.mark.parametrize("damage", ["garbage", "truncate", "flip", "empty"])
def test_corrupted_entry_is_recompiled_and_rewritten(tmp_path: Path, damage: str) -> None:
    log = tmp_path / "log"
    compiler = CountingCompiler(log)
    with Context(CACHEDIR=str(tmp_path / "cache")):
        compiler.compile_cached("source")
        entry = DiskCache("compile").path_of(compiler.cache_key("source"))
        data = entry.read_bytes()
        if damage == "garbage":
            entry.write_bytes(b"\x00not a cache entry")
        elif damage == "truncate":
            entry.write_bytes(data[: len(data) - 5])
        elif damage == "flip":
            entry.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        else:
            entry.write_bytes(b"")
        assert compiler.compile_cached("source") == expected_binary("source", ())
        assert entry.read_bytes() == data  # rewritten whole
        assert compiler.compile_cached("source") == expected_binary("source", ())
    assert compiles(log) == ["source", "source"]


def test_an_entry_swapped_in_from_another_key_reads_as_missing(tmp_path: Path) -> None:
    # a valid entry (good checksum) under the wrong file name must not hand back another kernel's binary
    log = tmp_path / "log"
    compiler = CountingCompiler(log)
    with Context(CACHEDIR=str(tmp_path / "cache")):
        compiler.compile_cached("kernel a")
        compiler.compile_cached("kernel b")
        cache = DiskCache("compile")
        entry_a = cache.path_of(compiler.cache_key("kernel a"))
        entry_b = cache.path_of(compiler.cache_key("kernel b"))
        entry_b.write_bytes(entry_a.read_bytes())
        assert compiler.compile_cached("kernel b") == expected_binary("kernel b", ())
        assert compiler.compile_cached("kernel a") == expected_binary("kernel a", ())
    assert compiles(log) == ["kernel a", "kernel b", "kernel b"]


def test_disable_knob_and_unwritable_directory(tmp_path: Path) -> None:
    log = tmp_path / "log"
    compiler = CountingCompiler(log)
    with Context(CACHEDIR=str(tmp_path / "cache"), DISABLE_COMPILER_CACHE=True):
        compiler.compile_cached("a")
        compiler.compile_cached("a")
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    with Context(CACHEDIR=str(blocker)):
        assert compiler.compile_cached("b") == expected_binary("b", ())
    assert compiles(log) == ["a", "a", "b"]


def test_compile_must_return_bytes(tmp_path: Path) -> None:
    class Broken(Compiler):
        def compile(self, source: str) -> bytes:
            return source  # type: ignore[return-value]

    with Context(CACHEDIR=str(tmp_path)), pytest.raises(TypeError, match="must return bytes, got str"):
        Broken().compile_cached("x")
    with pytest.raises(NotImplementedError, match="Broken has no disassembler"):
        Broken().disassemble(b"")


_WORKER = textwrap.dedent(
    """
    import time
    from test_compiler_cache import CountingCompiler, expected_binary
    from pathlib import Path
    from kiln.uops import Context

    class Slow(CountingCompiler):
        def compile(self, source):
            time.sleep(0.01)  # widen the window in which processes race on one entry
            return super().compile(source)

    compiler = Slow(Path({log!r}))
    with Context(CACHEDIR={cache!r}):
        for round in range(3):
            for n in range(20):
                source = f"kernel {{n}}"
                assert compiler.compile_cached(source) == expected_binary(source, ()), source
    print("ok")
    """
)


def test_concurrent_processes_share_the_cache(tmp_path: Path) -> None:
    workers = []
    for number in range(4):
        script = _WORKER.format(log=str(tmp_path / f"log{number}"), cache=str(tmp_path / "cache"))
        # in this folder: `python -c` puts the working directory first on sys.path, so test_compiler_cache imports
        command, folder = [sys.executable, "-c", script], Path(__file__).parent
        workers.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=folder))
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err.decode()
        assert out.decode().strip() == "ok"
    logs = [compiles(tmp_path / f"log{number}") for number in range(4)]
    # every source compiled at least once overall, and no process compiled one source twice (rounds 2-3 hit)
    assert {line for log in logs for line in log} == {f"kernel {n}" for n in range(20)}
    assert all(len(log) == len(set(log)) for log in logs)
    leftovers = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name.startswith(".")]
    assert leftovers == []
    assert all(os.path.getsize(p) > 0 for p in (tmp_path / "cache").rglob("*.bin"))
