"""safetensors read / write against the `safetensors` library (the reference implementation) for every dtype."""

from __future__ import annotations

import json
import pathlib
import struct
from typing import Any

import numpy as np
import pytest
import safetensors
import safetensors.numpy

from kiln.tensor import Tensor, dtypes
from kiln.tensor.state import safe_load, safe_load_metadata, safe_save
from kiln.uops import DType

# kiln dtype -> (the library's TensorSpec dtype name, the file's dtype tag, numpy dtype of the raw bits)
DTYPES: dict[DType, tuple[str, str, Any]] = {
    dtypes.float64: ("float64", "F64", np.float64),
    dtypes.float32: ("float32", "F32", np.float32),
    dtypes.float16: ("float16", "F16", np.float16),
    dtypes.bfloat16: ("bfloat16", "BF16", np.uint16),
    dtypes.fp8e4m3: ("float8_e4m3fn", "F8_E4M3", np.uint8),
    dtypes.fp8e5m2: ("float8_e5m2", "F8_E5M2", np.uint8),
    dtypes.int64: ("int64", "I64", np.int64),
    dtypes.int32: ("int32", "I32", np.int32),
    dtypes.int16: ("int16", "I16", np.int16),
    dtypes.int8: ("int8", "I8", np.int8),
    dtypes.uint64: ("uint64", "U64", np.uint64),
    dtypes.uint32: ("uint32", "U32", np.uint32),
    dtypes.uint16: ("uint16", "U16", np.uint16),
    dtypes.uint8: ("uint8", "U8", np.uint8),
    dtypes.bool: ("bool", "BOOL", np.bool_),
}


def _sample_bits(dtype: DType, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random values of `dtype` as numpy data of the raw bits (finite values for the float formats)."""
    rng = np.random.default_rng(seed)
    raw = DTYPES[dtype][2]
    if dtype == dtypes.bfloat16:  # the top half of float32 values
        return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dtype in (dtypes.fp8e4m3, dtypes.fp8e5m2):
        bits = rng.integers(0, 256, shape, dtype=np.uint8)
        exponent_mask = 0x78 if dtype == dtypes.fp8e4m3 else 0x7C
        return np.where((bits & exponent_mask) == exponent_mask, bits & 0x83, bits).astype(np.uint8)  # no inf/nan
    if dtype == dtypes.bool:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(raw, np.floating):
        return np.asarray(rng.standard_normal(shape) * 100).astype(raw)
    info = np.iinfo(raw)
    return rng.integers(info.min, info.max, shape, dtype=raw, endpoint=True)


def _kiln_tensor(bits: np.ndarray, dtype: DType) -> Tensor:
    if dtype.fmt is None:  # bfloat16 / fp8: numpy holds the bits, the device reinterprets them
        return Tensor(bits).bitcast(dtype)
    return Tensor(bits)


def _kiln_bits(tensor: Tensor, raw: Any) -> np.ndarray:
    if tensor.dtype.fmt is None:
        return tensor.bitcast(dtypes.uint8 if tensor.dtype.itemsize == 1 else dtypes.uint16).numpy()
    return tensor.numpy().astype(raw)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: d.name)
def test_kiln_writes_what_the_library_reads(dtype: DType, tmp_path: pathlib.Path) -> None:
    bits = {"a.weight": _sample_bits(dtype, (3, 5), 1), "b": _sample_bits(dtype, (7,), 2)}
    path = tmp_path / "kiln.safetensors"
    safe_save({name: _kiln_tensor(value, dtype) for name, value in bits.items()}, path, metadata={"format": "pt"})
    loaded = dict(safetensors.deserialize(path.read_bytes()))  # type: ignore[no-untyped-call]
    assert set(loaded) == set(bits)
    for name, value in bits.items():
        assert loaded[name]["dtype"] == DTYPES[dtype][1]
        assert loaded[name]["shape"] == list(value.shape)
        assert bytes(loaded[name]["data"]) == value.tobytes(), name
    with safetensors.safe_open(str(path), framework="numpy") as handle:
        assert handle.metadata() == {"format": "pt"}
    if dtype.fmt is not None:  # numpy-representable: compare values with the library's numpy loader too
        for name, array in safetensors.numpy.load_file(str(path)).items():
            np.testing.assert_array_equal(array, bits[name])


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: d.name)
def test_kiln_reads_what_the_library_writes(dtype: DType, tmp_path: pathlib.Path) -> None:
    shapes = {"x": (4, 3), "scalar": (), "empty": (0, 2)}
    bits = {
        name: np.ascontiguousarray(_sample_bits(dtype, shape, seed))
        for seed, (name, shape) in enumerate(shapes.items())
    }
    specs = {
        name: safetensors.TensorSpec(
            dtype=DTYPES[dtype][0], shape=list(value.shape), data_ptr=value.ctypes.data, data_len=value.nbytes
        )
        for name, value in bits.items()
    }
    path = tmp_path / "library.safetensors"
    path.write_bytes(bytes(safetensors.serialize(specs, {"source": "library"})))
    loaded = safe_load(path)
    assert safe_load_metadata(path) == {"source": "library"}
    assert set(loaded) == set(bits)
    for name, value in bits.items():
        assert loaded[name].dtype == dtype and loaded[name].shape == value.shape
        np.testing.assert_array_equal(_kiln_bits(loaded[name], DTYPES[dtype][2]), value, err_msg=name)


def test_bfloat16_values(tmp_path: pathlib.Path) -> None:
    values = np.array([1.0, -2.5, 3.140625, 0.0078125], dtype=np.float32)  # exact in bfloat16
    path = tmp_path / "bf16.safetensors"
    safetensors.numpy.save_file({"v": values}, str(path))
    safe_save({"v": safe_load(path)["v"].cast(dtypes.bfloat16)}, path)
    np.testing.assert_array_equal(safe_load(path)["v"].numpy(), values)


def test_header_is_padded_and_aligned(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.safetensors"
    safe_save({"small": Tensor([1], dtype=dtypes.int8), "big": Tensor([2.0], dtype=dtypes.float64)}, path)
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    assert (8 + length) % 64 == 0 and raw[8 + length - 1 : 8 + length] in (b" ", b"}")
    header = json.loads(raw[8 : 8 + length])
    assert header["big"]["data_offsets"] == [0, 8] and header["small"]["data_offsets"] == [8, 9]
    assert "__metadata__" not in header
    assert safe_load_metadata(path) == {}


def _write_raw(path: pathlib.Path, header: Any, data: bytes, length: int | None = None) -> None:
    encoded = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded) if length is None else length) + encoded + data)


GOOD_ENTRY = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    ("header", "data", "length", "message"),
    [
        (None, b"", None, "empty file"),
        ({"a": GOOD_ENTRY}, b"\0" * 4, None, "truncated safetensors file: the tensors span 8 data bytes"),
        ({"a": GOOD_ENTRY}, b"\0" * 8, 10_000, "header length 10000 runs past the file end"),
        ({"a": GOOD_ENTRY}, b"\0" * 8, 2**40, "over the 104857600-byte limit"),
        (b"{not json", b"", None, "header is not valid JSON"),
        (b"[1, 2]", b"", None, "header must be a JSON object"),
        ({"a": {**GOOD_ENTRY, "dtype": "F128"}}, b"\0" * 8, None, "unknown dtype 'F128'"),
        ({"a": {**GOOD_ENTRY, "shape": [-2]}}, b"\0" * 8, None, "bad shape [-2]"),
        ({"a": {**GOOD_ENTRY, "data_offsets": [0, 4]}}, b"\0" * 8, None, "hold 4 bytes but shape [2] of F32 needs 8"),
        ({"a": GOOD_ENTRY, "b": GOOD_ENTRY}, b"\0" * 8, None, "overlap the previous tensor"),
        ({"a": {**GOOD_ENTRY, "data_offsets": [4, 12]}}, b"\0" * 12, None, "a gap of 4 bytes before tensor 'a'"),
        ({"a": GOOD_ENTRY}, b"\0" * 12, None, "trailing bytes after the last tensor"),
        ({"a": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, None, "needs exactly dtype, shape and data_offsets"),
        ({"__metadata__": {"k": 1}}, b"", None, "__metadata__ must map str -> str"),
    ],
)
def test_malformed_files_are_refused(
    header: Any, data: bytes, length: int | None, message: str, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "bad.safetensors"
    if header is None:
        path.write_bytes(b"")
    else:
        _write_raw(path, header, data, length)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        safe_load(path)


def test_short_file_and_bad_arguments(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(ValueError, match="shorter than the 8-byte header length"):
        safe_load(path)
    with pytest.raises(TypeError, match="metadata must be a dict of str -> str"):
        safe_save({"a": Tensor([1.0])}, path, metadata={"a": 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="tensor 'a' must be a kiln Tensor, got list"):
        safe_save({"a": [1.0]}, path)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="tensor names must be strings other than '__metadata__'"):
        safe_save({"__metadata__": Tensor([1.0])}, path)


def test_cpu_load_owns_its_memory(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "own.safetensors"
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    safe_save({"w": Tensor(values), "x": Tensor([1.0, 2.0])}, path)
    original = path.read_bytes()
    loaded = safe_load(path, device="CPU")["w"]
    assert not loaded.data_buffer().opaque.external  # allocator memory, not a mapping of the file
    np.testing.assert_array_equal(loaded.numpy(), values)
    loaded.assign(loaded * 2).realize()  # in-place writes stay in the process
    np.testing.assert_array_equal(loaded.numpy(), values * 2)
    assert path.read_bytes() == original
    np.testing.assert_array_equal(safe_load(path, device="CPU")["w"].numpy(), values)


def test_unaligned_data_loads(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "odd.safetensors"
    header = {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
    header["b"] = {"dtype": "F32", "shape": [2], "data_offsets": [1, 9]}
    # 8 + 184 header bytes: "a" starts 64-byte aligned in the file (at 192), "b" one byte later
    _write_raw(path, json.dumps(header).encode().ljust(184), b"\x05" + np.array([1.5, -2.0], np.float32).tobytes())
    loaded = safe_load(path, device="CPU")
    assert loaded["a"].tolist() == [5] and loaded["b"].tolist() == [1.5, -2.0]
