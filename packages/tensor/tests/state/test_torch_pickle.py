"""torch_load against checkpoints written by torch 2.13 (scripts/make_pth_fixtures.py) and malicious pickles."""

from __future__ import annotations

import collections
import io
import os
import pathlib
import pickle
import struct
import zipfile
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor import Tensor, dtypes
from kiln.tensor.state import torch_load
from kiln.tensor.state.torch_pickle import _StorageRef, _StorageTensors, _strided_view, _TensorRef

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
MARKER = "kiln_pickle_marker"


def _flatten(value: Any, prefix: str, out: dict[str, Tensor]) -> None:
    if isinstance(value, Tensor):
        out[prefix] = value
    elif isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _flatten(item, f"{prefix}.{index}" if prefix else str(index), out)


CHECKPOINTS = ["dtypes", "views", "model", "parameter"]


@pytest.mark.parametrize(
    ("name", "layout"), [(name, layout) for name in CHECKPOINTS for layout in ("", "_legacy")] + [("v3", "")]
)
def test_values_match_torch(name: str, layout: str) -> None:
    loaded = torch_load(FIXTURES / f"{name}{layout}.pth")
    tensors: dict[str, Tensor] = {}
    _flatten(loaded, "", tensors)
    with np.load(FIXTURES / f"{name}.npz") as expected:
        assert sorted(tensors) == sorted(expected.files)
        for key in expected.files:
            array = tensors[key].numpy()
            assert array.shape == expected[key].shape, key
            if tensors[key].dtype not in (dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2):
                assert array.dtype == expected[key].dtype, key
            np.testing.assert_array_equal(array, expected[key], err_msg=key)


def test_dtypes_and_containers() -> None:
    loaded = torch_load(FIXTURES / "dtypes.pth")
    assert loaded["bfloat16"].dtype == dtypes.bfloat16 and loaded["bool"].dtype == dtypes.bool
    assert loaded["scalar"].shape == () and loaded["scalar"].item() == 3.5
    views = torch_load(FIXTURES / "views_legacy.pth")
    assert views["name"] == "views" and views["nested"]["count"] == 7
    assert isinstance(views["nested"]["tuple"], tuple) and isinstance(views["nested"]["list"], list)
    assert views["transposed"].shape == (6, 4) and views["every_other"].shape == (3, 3)
    model = torch_load(FIXTURES / "model.pth")
    assert type(model) is collections.OrderedDict and list(model) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert isinstance(vars(model)["_metadata"], collections.OrderedDict)  # torch's version info attribute survives
    v3 = torch_load(FIXTURES / "v3.pth")  # _rebuild_tensor_v3: untyped byte storages read as the given dtype
    assert [v3[name].dtype for name in ("fp8e4m3", "fp8e5m2", "uint16", "uint64")] == [
        dtypes.fp8e4m3,
        dtypes.fp8e5m2,
        dtypes.uint16,
        dtypes.uint64,
    ]
    assert v3["uint16"].tolist() == [[1, 300], [65535, 7]] and v3["uint64"].tolist() == [2**63 + 1, 2]
    parameter = torch_load(FIXTURES / "parameter.pth")
    assert parameter["weight"].requires_grad is True


def _payloads() -> dict[str, Any]:
    class Exec:
        def __reduce__(self) -> Any:
            return exec, (f"open({MARKER!r}, 'w').close()",)

    class Eval:
        def __reduce__(self) -> Any:
            return eval, (f"open({MARKER!r}, 'w')",)

    class System:
        def __reduce__(self) -> Any:
            return os.system, (f"touch {MARKER}",)

    class Popen:
        def __reduce__(self) -> Any:
            import subprocess

            return subprocess.Popen, (["touch", MARKER],)

    return {"builtins.exec": Exec(), "builtins.eval": Eval(), "posix.system": System(), "subprocess.Popen": Popen()}


@pytest.mark.parametrize("refused", list(_payloads()))
@pytest.mark.parametrize("layout", ["zip", "legacy", "plain"])
def test_malicious_pickles_are_refused(
    refused: str, layout: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    payload = pickle.dumps({"weight": _payloads()[refused]}, protocol=4)
    path = tmp_path / "evil.pth"
    if layout == "zip":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("evil/data.pkl", payload)
    elif layout == "legacy":
        path.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C) + pickle.dumps(1001) + pickle.dumps({}) + payload)
    else:
        path.write_bytes(payload)
    with pytest.raises(pickle.UnpicklingError, match=f"refusing to load global {refused}"):
        torch_load(path)
    assert not (tmp_path / MARKER).exists()


def test_committed_malicious_fixture(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to load global __builtin__\.exec"):
        torch_load(FIXTURES / "malicious.pth")
    assert not (tmp_path / MARKER).exists()
    with zipfile.ZipFile(FIXTURES / "malicious.pth") as archive:  # the control: a plain unpickler runs it
        pickle.loads(archive.read("malicious/data.pkl"))
    assert (tmp_path / MARKER).exists()


def test_bad_files(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.pth"
    path.write_bytes(pickle.dumps(12345))
    with pytest.raises(ValueError, match="first pickle is 12345, not the legacy magic number"):
        torch_load(path)
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="empty or truncated before the legacy magic number"):
        torch_load(path)
    legacy = (FIXTURES / "views_legacy.pth").read_bytes()
    path.write_bytes(legacy[:-10])
    with pytest.raises(
        ValueError, match=r"truncated: storage '\d+' needs \d+ x 4 bytes at offset \d+; the file has \d+ left"
    ):
        torch_load(path)
    with zipfile.ZipFile(FIXTURES / "views.pth") as source, zipfile.ZipFile(path, "w") as target:
        for item in source.namelist():
            if not item.endswith("data/1"):
                target.writestr(item, source.read(item))
    with pytest.raises(ValueError, match=r"storage '1' is missing \(no views/data/1 in the archive\)"):
        torch_load(path)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a/data.pkl", pickle.dumps({}))
        archive.writestr("a/byteorder", "big")
    with pytest.raises(ValueError, match="big-endian checkpoints are not supported"):
        torch_load(path)


def test_out_of_bounds_view_is_refused(tmp_path: pathlib.Path) -> None:
    # a checkpoint whose tensor claims 5 elements of a 4-element storage (hand-assembled pickle opcodes)
    body = io.BytesIO()
    body.write(b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(")
    body.write(b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ")
    body.write(b"K\x00K\x05\x85K\x01\x85\x89tR.")
    path = tmp_path / "oob.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("oob/data.pkl", body.getvalue())
        archive.writestr("oob/data/0", struct.pack("<4f", 1, 2, 3, 4))
    with pytest.raises(ValueError, match="reads element 4 of a storage of 4 elements"):
        torch_load(path)


def test_compressed_archive_members(tmp_path: pathlib.Path) -> None:
    # torch stores members uncompressed (read straight from the file mapping); a re-zipped, deflated copy still loads
    path = tmp_path / "deflated.pth"
    with zipfile.ZipFile(FIXTURES / "views.pth") as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.namelist():
            target.writestr(item, source.read(item))
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo("views/data/0").compress_type == zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(FIXTURES / "views.pth") as archive:
        assert archive.getinfo("views/data/0").compress_type == zipfile.ZIP_STORED
    loaded, original = torch_load(path), torch_load(FIXTURES / "views.pth")
    for key in ("base", "window", "column", "transposed", "every_other"):
        np.testing.assert_array_equal(loaded[key].numpy(), original[key].numpy())


@given(
    sizes=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    strides=st.lists(st.integers(0, 7), min_size=3, max_size=3),
    offset=st.integers(0, 5),
    permute=st.booleans(),
)
@settings(max_examples=40, deadline=None)
def test_strided_views_match_numpy(sizes: list[int], strides: list[int], offset: int, permute: bool) -> None:
    # any (size, stride, offset) torch can pickle, checked against numpy's as_strided over the same storage
    stride = tuple(strides[: len(sizes)])
    if permute:  # dense layouts in a permuted order take the movement-op path instead of the gather
        stride = tuple(int(np.prod(sizes[:dim])) for dim in range(len(sizes)))  # column-major: a transpose
    size = tuple(sizes)
    storage = np.arange(offset + sum((s - 1) * t for s, t in zip(size, stride)) + 3, dtype=np.int32)
    ref = _TensorRef(_StorageRef("0", dtypes.int32, storage.size), offset, size, stride, False, dtypes.int32)
    got = _strided_view(ref, _StorageTensors(io.BytesIO(), {"0": (storage.tobytes(), dtypes.int32)}, None, "test"))[
        0
    ].numpy()
    expected = np.lib.stride_tricks.as_strided(storage[offset:], size, tuple(4 * t for t in stride))
    np.testing.assert_array_equal(got, expected)
