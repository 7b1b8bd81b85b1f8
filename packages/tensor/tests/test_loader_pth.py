"""`torch_load` on hostile and odd `.pth` files: only ValueError / pickle.UnpicklingError, bounded memory, stride-0
views loaded as the expand they are (issue 44). Files are assembled by pth_builder (no torch needed)."""

from __future__ import annotations

import pathlib
import pickle
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from pth_builder import (
    legacy_checkpoint,
    op_dict,
    op_global,
    op_int,
    op_str,
    op_tensor,
    op_tuple,
    zip_checkpoint,
)

from kiln.tensor.state import ALLOWED_GLOBALS, torch_load
from kiln.uops import Ops, dtypes

EXPANDED = 50_000_000


def _buffer_elements(tensor: object) -> int:
    """The elements of every buffer the tensor's graph reads (what loading it allocated)."""
    return sum(node.arg.size for node in tensor.uop.toposort() if node.op is Ops.BUFFER)  # type: ignore[attr-defined]


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_stride_zero_view_loads_as_an_expand(layout: str, tmp_path: pathlib.Path) -> None:
    """torch.tensor([2.5]).expand(50_000_000) is 1.5 KB on disk; it used to be gathered into 200 MB (1.2 GB peak)."""
    path = str(tmp_path / "expand.pth")
    legacy = layout == "legacy"
    data = op_dict(
        {
            "x": op_tensor("0", 1, 0, [EXPANDED], [0], legacy=legacy),
            "rows": op_tensor("1", 7, 1, [3, 1000, 2], [2, 0, 1], legacy=legacy),  # a broadcast middle dim
        }
    )
    storages = {"0": struct.pack("<f", 2.5), "1": struct.pack("<7f", *range(7))}
    if legacy:
        legacy_checkpoint(path, data, {key: (len(raw) // 4, raw) for key, raw in storages.items()})
    else:
        zip_checkpoint(path, data, storages)
    loaded = torch_load(path)
    x, rows = loaded["x"], loaded["rows"]
    assert x.shape == (EXPANDED,) and x.dtype == dtypes.float32
    assert _buffer_elements(x) <= 1 and _buffer_elements(rows) <= 7
    assert x[EXPANDED - 1].item() == 2.5 and x[:3].tolist() == [2.5, 2.5, 2.5]
    expected = np.lib.stride_tricks.as_strided(np.arange(7, dtype=np.float32)[1:], (3, 1000, 2), (8, 0, 4))
    np.testing.assert_array_equal(rows.numpy(), expected)


def test_stride_zero_view_peak_memory(tmp_path: pathlib.Path) -> None:
    """Loading the expand of 50M float32 must not write them out anywhere (200 MB): the child's peak resident memory
    (VmHWM) grows by far less while it loads."""
    path = str(tmp_path / "expand.pth")
    zip_checkpoint(path, op_dict({"x": op_tensor("0", 1, 0, [EXPANDED], [0])}), {"0": struct.pack("<f", 2.5)})
    script = textwrap.dedent(
        f"""
        from kiln.tensor import Tensor
        from kiln.tensor.state import torch_load
        def peak_mb():
            with open("/proc/self/status") as status:
                return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
        (Tensor([1.0]) + 1).realize().numpy()
        before = peak_mb()
        loaded = torch_load({path!r})
        print(peak_mb() - before)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) < 100, f"loading grew the peak by {done.stdout.split()[-1]} MB"


def _zip_with(tmp_path: pathlib.Path, data_pkl: bytes, storages: dict[str, bytes] | None = None) -> str:
    path = str(tmp_path / "bad.pth")
    zip_checkpoint(path, data_pkl, storages if storages is not None else {"0": struct.pack("<4f", 1, 2, 3, 4)})
    return path


def _tensor_call(*args: bytes) -> bytes:
    return b"\x80\x02" + op_global("torch._utils", "_rebuild_tensor_v2") + op_tuple(list(args)) + b"R."


PID = op_tuple([op_str("storage"), op_global("torch", "FloatStorage"), op_str("0"), op_str("cpu"), op_int(4)]) + b"Q"
# (pickle bytes, what the message says) for malformed data.pkl payloads; each raised something else before
MALFORMED = {
    "stack underflow": (b"\x80\x02s.", "malformed pickle"),
    "pop of an empty stack": (b"\x80\x020.", "malformed pickle"),
    "too few arguments": (_tensor_call(PID), "malformed pickle: TypeError"),
    "a string size": (_tensor_call(PID, op_int(0), op_tuple([op_str("4")]), op_tuple([op_int(1)])), "size"),
    "a negative stride": (_tensor_call(PID, op_int(0), op_tuple([op_int(2)]), op_tuple([op_int(-1)])), "stride"),
    "a float offset": (_tensor_call(PID, b"G" + struct.pack(">d", 0.5), op_tuple([]), op_tuple([])), "offset"),
    "a short storage id": (
        b"\x80\x02" + op_tuple([op_str("storage"), op_global("torch", "FloatStorage")]) + b"Q.",
        "storage persistent id",
    ),
    "a storage id of a list": (
        b"\x80\x02" + op_tuple([op_str("storage"), b"]", op_str("0"), op_str("cpu"), op_int(4)]) + b"Q.",
        "expected a torch storage class",
    ),
    "state set on a storage class": (
        b"\x80\x02" + op_global("torch", "FloatStorage") + b"}" + op_str("dtype") + op_int(1) + b"sb.",
        "may not set the state of a StorageType",
    ),
    "a huge BYTEARRAY8": (b"\x80\x05\x96" + struct.pack("<Q", 2**60) + b".", "BYTEARRAY8 of 1152921504606846976"),
    "a huge BINBYTES8": (b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b".", "truncated pickle"),
    "a huge int text": (b"\x80\x02L" + b"9" * 100_000 + b"L\n.", "malformed pickle"),
    "an unknown opcode": (b"\x80\x02\xff.", "malformed pickle"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_pickles_raise_unpickling_error(case: str, tmp_path: pathlib.Path) -> None:
    payload, message = MALFORMED[case]
    with pytest.raises(pickle.UnpicklingError, match=message):
        torch_load(_zip_with(tmp_path, payload))
    assert ALLOWED_GLOBALS["torch", "FloatStorage"].dtype == dtypes.float32  # nothing rewrote the allow-list


def test_deep_and_cyclic_containers(tmp_path: pathlib.Path) -> None:
    deep = b"\x80\x02" + b"]" * 100_000 + b"a" * 99_999 + b"."  # 100k lists, each appended to the one before
    with pytest.raises(ValueError, match="containers nest deeper than 200 levels"):
        torch_load(_zip_with(tmp_path, deep, {}))
    cyclic = b"\x80\x02]q\x00h\x00a."  # a list that contains itself
    loaded = torch_load(_zip_with(tmp_path, cyclic, {}))
    assert isinstance(loaded, list) and loaded[0] is loaded


def test_legacy_storage_count_is_checked_before_allocating(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "huge.pth")
    data = op_dict({"x": op_tensor("0", 4, 0, [4], [1], legacy=True)})
    legacy_checkpoint(path, data, {"0": (2**60, struct.pack("<4f", 1, 2, 3, 4))})
    with pytest.raises(ValueError, match=r"storage '0' needs 1152921504606846976 x 4 bytes at offset \d+; the file"):
        torch_load(path)
    legacy_checkpoint(path, data, {"0": (-1, b"")})
    with pytest.raises(ValueError, match="storage '0' needs -1 x 4 bytes"):
        torch_load(path)


def test_zip_storage_size_must_match_its_declared_elements(tmp_path: pathlib.Path) -> None:
    data = op_dict({"x": op_tensor("0", 4, 0, [2], [1])})
    path = _zip_with(tmp_path, data, {"0": struct.pack("<3f", 1, 2, 3)})
    with pytest.raises(ValueError, match=r"holds 12 bytes; storage '0' of 4 elements of dtypes.float32 needs 16"):
        torch_load(path)


def test_broken_zip_directory_is_a_value_error(tmp_path: pathlib.Path) -> None:
    path = _zip_with(tmp_path, op_dict({"x": op_tensor("0", 4, 0, [4], [1])}))
    raw = bytearray(pathlib.Path(path).read_bytes())
    directory = raw.rfind(b"PK\x01\x02")  # the last central directory entry: point it past the file end
    raw[directory + 42 : directory + 46] = struct.pack("<I", len(raw) + 1000)
    pathlib.Path(path).write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="zip"):
        torch_load(path)
