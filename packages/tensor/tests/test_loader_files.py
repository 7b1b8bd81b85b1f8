"""Checkpoint files that cannot be lost or change under a loaded tensor, and headers that are refused (issue 44).

GGUF files here are built byte by byte from the format's spec (tests/state/test_gguf.py reads gguf-py's files), so a
writer that refuses duplicates or overlaps cannot hide what kiln does with them.
"""

from __future__ import annotations

import errno
import io
import json
import os
import pathlib
import resource
import signal
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes
from kiln.tensor.state import gguf_load, safe_load, safe_save
from kiln.tensor.state.host_bytes import tensor_from_file

F32, ARRAY, UINT32 = 0, 9, 4  # ggml type F32; GGUF value types array and uint32


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _gguf(kvs: list[bytes], infos: list[tuple[str, tuple[int, ...], int]], data: bytes, alignment: int = 32) -> bytes:
    """A GGUF v3 file: `kvs` are encoded key/values, `infos` (name, dims innermost first, data offset) F32 tensors."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kvs)) + b"".join(kvs)
    for name, dims, offset in infos:
        out += _string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", F32, offset)
    return out + b"\0" * (-len(out) % alignment) + data


def _kv_u32(key: str, value: int) -> bytes:
    return _string(key) + struct.pack("<II", UINT32, value)


def _write_safetensors(path: pathlib.Path, header: bytes, data: bytes) -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


# --- atomic saves ---------------------------------------------------------------------------------------------------


def _leftovers(folder: pathlib.Path, keep: str) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir() if entry.name != keep)


def test_save_failing_at_fsync_keeps_the_previous_file(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "model.safetensors"
    safe_save({"w": Tensor([7.0, 7.0, 7.0])}, path)
    before = path.read_bytes()

    def disk_full(handle: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError) as caught:
        safe_save({"w": Tensor(np.arange(1000, dtype=np.float32))}, path)
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _leftovers(tmp_path, path.name) == []
    assert safe_load(path)["w"].tolist() == [7.0, 7.0, 7.0]


def test_save_failing_mid_write_keeps_the_previous_file(tmp_path: pathlib.Path) -> None:
    """A real short write: RLIMIT_FSIZE makes the kernel refuse bytes past the limit (EFBIG), as a full disk would."""
    path = tmp_path / "model.safetensors"
    safe_save({"w": Tensor([7.0, 7.0, 7.0])}, path)
    before = path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        with pytest.raises(OSError) as caught:
            safe_save({"w": Tensor(np.arange(100_000, dtype=np.float32))}, path)  # 400 KB
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)
    assert caught.value.errno == errno.EFBIG
    assert path.read_bytes() == before
    assert _leftovers(tmp_path, path.name) == []


def test_save_keeps_the_mode_and_follows_a_link(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "real.safetensors"
    safe_save({"w": Tensor([1.0])}, target)
    os.chmod(target, 0o600)
    link = tmp_path / "link.safetensors"
    link.symlink_to(target)
    safe_save({"w": Tensor([2.0])}, link)
    assert link.is_symlink() and os.stat(target).st_mode & 0o777 == 0o600
    assert safe_load(target)["w"].tolist() == [2.0]


# --- loaded values never change under the user ----------------------------------------------------------------------


def test_resaving_the_path_leaves_loaded_tensors_unchanged(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "model.safetensors"
    safe_save({"w": Tensor([7.0, 7.0, 7.0])}, path)
    loaded = safe_load(path)["w"]
    safe_save({"w": Tensor([2032.0, 2033.0, 2034.0])}, path)
    assert loaded.tolist() == [7.0, 7.0, 7.0]
    assert (loaded + 1).tolist() == [8.0, 8.0, 8.0]


def test_writing_the_file_in_place_leaves_loaded_tensors_unchanged(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "model.safetensors"
    safe_save({"w": Tensor([7.0, 7.0, 7.0])}, path)
    loaded = safe_load(path)["w"]
    size = path.stat().st_size
    with open(path, "r+b") as file:  # another program rewriting the data bytes of the same inode
        file.seek(size - 12)
        file.write(np.array([1.0, 2.0, 3.0], np.float32).tobytes())
    assert loaded.tolist() == [7.0, 7.0, 7.0]
    gguf_path = tmp_path / "model.gguf"
    gguf_path.write_bytes(_gguf([], [("w", (3,), 0)], np.array([7.0, 7.0, 7.0], np.float32).tobytes()))
    _, tensors = gguf_load(gguf_path)
    with open(gguf_path, "r+b") as file:
        file.seek(gguf_path.stat().st_size - 12)
        file.write(np.array([1.0, 2.0, 3.0], np.float32).tobytes())
    assert tensors["w"].tolist() == [7.0, 7.0, 7.0]


def test_truncating_the_file_after_loading_does_not_fault(tmp_path: pathlib.Path) -> None:
    """Run in a child process: with a file mapping the read after truncation kills the process with SIGBUS."""
    script = textwrap.dedent(
        f"""
        import os, pathlib, struct
        import numpy as np
        from kiln.tensor import Tensor
        from kiln.tensor.state import gguf_load, safe_load, safe_save
        path = pathlib.Path({str(tmp_path)!r}) / "model.safetensors"
        safe_save({{"w": Tensor(np.full(4096, 7.0, np.float32))}}, path)
        loaded = safe_load(path)["w"]
        os.truncate(path, 0)
        print("safetensors", float(loaded.sum().item()))
        gguf = pathlib.Path({str(tmp_path)!r}) / "model.gguf"
        head = b"GGUF" + struct.pack("<IQQQ", 3, 1, 0, 1) + b"w" + struct.pack("<IQIQ", 1, 4096, 0, 0)
        gguf.write_bytes(head + b"\\0" * (-len(head) % 32) + np.full(4096, 7.0, np.float32).tobytes())
        _, tensors = gguf_load(gguf)
        os.truncate(gguf, 0)
        print("gguf", float(tensors["w"].sum().item()))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"child exited with {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.split() == ["safetensors", "28672.0", "gguf", "28672.0"]


# --- headers that are refused ---------------------------------------------------------------------------------------


def test_safetensors_duplicate_key_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "dup.safetensors"
    entry = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    _write_safetensors(path, f'{{"w":{entry},"w":{entry}}}'.encode(), b"\0" * 4)
    with pytest.raises(ValueError, match="the key 'w' appears twice"):
        safe_load(path)
    meta = '{"__metadata__":{"a":"1","a":"2"}}'
    _write_safetensors(path, meta.encode(), b"")
    with pytest.raises(ValueError, match="the key 'a' appears twice"):
        safe_load(path)


def test_safetensors_deeply_nested_header_is_a_value_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "deep.safetensors"
    _write_safetensors(path, b'{"__metadata__":' + b"[" * 200_000 + b"]" * 200_000 + b"}", b"")
    with pytest.raises(ValueError, match="nested too deeply"):
        safe_load(path)


def test_gguf_duplicate_metadata_key_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "dup.gguf"
    path.write_bytes(_gguf([_kv_u32("general.x", 1), _kv_u32("general.x", 2)], [], b""))
    with pytest.raises(ValueError, match=r"metadata key 'general\.x' appears twice"):
        gguf_load(path)


def test_gguf_duplicate_tensor_name_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "dup.gguf"
    path.write_bytes(_gguf([], [("w", (1,), 0), ("w", (1,), 32)], b"\0" * 36))
    with pytest.raises(ValueError, match="tensor name 'w' appears twice"):
        gguf_load(path)


@pytest.mark.parametrize(
    ("infos", "message"),
    [
        ([("a", (4,), 0), ("b", (4,), 0)], "tensors 'a' and 'b' overlap: 'b' starts at data offset 0, before 'a' ends"),
        (
            [("a", (16,), 0), ("b", (2,), 32)],
            "'a' and 'b' overlap: 'b' starts at data offset 32, before 'a' ends at 64",
        ),
        ([("b", (2,), 32), ("a", (16,), 0)], "'a' and 'b' overlap"),  # the order of the infos does not matter
    ],
)
def test_gguf_overlapping_tensors_are_refused(
    infos: list[tuple[str, tuple[int, ...], int]], message: str, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "overlap.gguf"
    path.write_bytes(_gguf([], infos, b"\0" * 64))
    with pytest.raises(ValueError, match=message):
        gguf_load(path)


def test_gguf_adjacent_tensors_load(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "adjacent.gguf"
    data = np.arange(16, dtype=np.float32).tobytes()
    path.write_bytes(_gguf([], [("a", (8,), 0), ("b", (8,), 32)], data))
    _, tensors = gguf_load(path)
    assert tensors["a"].tolist() == list(range(8)) and tensors["b"].tolist() == list(range(8, 16))


def _nested_array(depth: int) -> bytes:
    """A metadata value of `depth` arrays, each holding the next; the innermost holds one uint32."""
    value = struct.pack("<IQI", UINT32, 1, 5)
    for _ in range(depth - 1):
        value = struct.pack("<IQ", ARRAY, 1) + value
    return struct.pack("<I", ARRAY) + value


@pytest.mark.parametrize("depth", [9, 100_000])
def test_gguf_nesting_is_bounded(depth: int, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "deep.gguf"
    path.write_bytes(_gguf([_string("deep") + _nested_array(depth)], [], b""))
    with pytest.raises(ValueError, match="metadata value 'deep' nests arrays deeper than 8"):
        gguf_load(path)
    path.write_bytes(_gguf([_string("ok") + _nested_array(8)], [], b""))
    metadata, _ = gguf_load(path)
    value = metadata["ok"]
    for _ in range(7):
        value = value[0]
    assert value == [5]


def test_gguf_counts_are_checked_against_the_file_size(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "counts.gguf"
    huge_array = _string("a") + struct.pack("<IIQ", ARRAY, UINT32, 2**60)
    path.write_bytes(_gguf([huge_array], [], b""))
    with pytest.raises(ValueError, match="the item count of metadata value 'a' is 1152921504606846976"):
        gguf_load(path)
    huge_string = _string("s") + struct.pack("<IQ", 8, 2**62)
    path.write_bytes(_gguf([huge_string], [], b""))
    with pytest.raises(ValueError, match="the length of metadata value 's' is 4611686018427387904"):
        gguf_load(path)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2**63))
    with pytest.raises(ValueError, match="the key/value count is 9223372036854775808"):
        gguf_load(path)


def test_safetensors_header_overlaps_are_still_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "overlap.safetensors"
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
    }
    _write_safetensors(path, json.dumps(header).encode(), b"\0" * 8)
    with pytest.raises(ValueError, match=r"tensor 'b' data_offsets \[4, 8\] overlap the previous tensor"):
        safe_load(path)


def test_a_file_shrinking_under_the_read_raises_value_error() -> None:
    """What a loader sees when the file is cut between its header check and the tensor read."""
    message = r"f\.bin: truncated file: 16 bytes needed at offset 4, the file ended after 6"
    with pytest.raises(ValueError, match=message):
        tensor_from_file(io.BytesIO(b"\0" * 10), 4, dtypes.float32, (4,), where="f.bin")
    assert tensor_from_file(io.BytesIO(b"\0" * 4 + b"\1" * 16), 4, dtypes.uint8, (2, 8)).numpy().sum() == 16
