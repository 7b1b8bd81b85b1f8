"""gguf_load against files written by gguf-py's GGUFWriter (metadata of every type, plain and quantized tensors)."""

from __future__ import annotations

import pathlib
import struct

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFValueType, quants
from state.ggml_reference import random_blocks, reference_block

from kiln.tensor import dtypes
from kiln.tensor.state import GGML_BLOCKS, GGMLType, dequantize, gguf_load, gguf_load_raw

METADATA = [
    ("test.u8", 200, GGUFValueType.UINT8),
    ("test.i8", -100, GGUFValueType.INT8),
    ("test.u16", 60000, GGUFValueType.UINT16),
    ("test.i16", -30000, GGUFValueType.INT16),
    ("test.u32", 4_000_000_000, GGUFValueType.UINT32),
    ("test.i32", -2_000_000_000, GGUFValueType.INT32),
    ("test.f32", 1.5, GGUFValueType.FLOAT32),
    ("test.bool", True, GGUFValueType.BOOL),
    ("test.string", "héllo", GGUFValueType.STRING),
    ("test.u64", 2**63 + 5, GGUFValueType.UINT64),
    ("test.i64", -(2**62), GGUFValueType.INT64),
    ("test.f64", 0.1, GGUFValueType.FLOAT64),
]
K_QUANTS = [GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K]
BLOCK_QUANTS = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0]


def write_file(path: pathlib.Path, alignment: int | None = None) -> dict[str, np.ndarray]:
    """A GGUF file with METADATA, arrays and one tensor of each type; returns the expected float32 values."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value, kind in METADATA:
        writer.add_key_value(key, value, kind)
    writer.add_array("test.ints", [1, -2, 3])
    writer.add_array("test.strings", ["a", "bc", ""])
    writer.add_array("test.nested", [[1, 2], [3]])
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    rng = np.random.default_rng(0)
    expected: dict[str, np.ndarray] = {}
    plain = rng.standard_normal((3, 5)).astype(np.float32)
    writer.add_tensor("plain.f32", plain)
    expected["plain.f32"] = plain
    half = rng.standard_normal((2, 3, 4)).astype(np.float16)
    writer.add_tensor("plain.f16", half)
    expected["plain.f16"] = half.astype(np.float32)
    bf16 = rng.standard_normal((2, 32)).astype(np.float32)
    writer.add_tensor(
        "plain.bf16", quants.quantize(bf16, GGMLQuantizationType.BF16), raw_dtype=GGMLQuantizationType.BF16
    )
    expected["plain.bf16"] = quants.dequantize(
        quants.quantize(bf16, GGMLQuantizationType.BF16), GGMLQuantizationType.BF16
    )
    for block_kind in BLOCK_QUANTS:
        values = rng.standard_normal((3, 64)).astype(np.float32)
        raw = quants.quantize(values, GGMLQuantizationType[block_kind.name])
        writer.add_tensor(f"q.{block_kind.name}", raw, raw_dtype=GGMLQuantizationType[block_kind.name])
        expected[f"q.{block_kind.name}"] = quants.dequantize(raw, GGMLQuantizationType[block_kind.name])
    for block_kind in K_QUANTS:  # gguf-py cannot quantize K-quants: random blocks, decoded by the numpy reference
        blocks = random_blocks(block_kind, 2, seed=int(block_kind))
        writer.add_tensor(f"k.{block_kind.name}", blocks, raw_dtype=GGMLQuantizationType[block_kind.name])
        expected[f"k.{block_kind.name}"] = np.array(
            [reference_block(block_kind, b) for b in blocks], np.float32
        ).reshape(2, 256)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


@pytest.mark.parametrize("alignment", [None, 64])
def test_reads_what_gguf_py_writes(alignment: int | None, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "model.gguf"
    expected = write_file(path, alignment)
    metadata, tensors = gguf_load(path)
    for key, value, kind in METADATA:
        if kind == GGUFValueType.FLOAT32:
            assert metadata[key] == pytest.approx(value)
        else:
            assert metadata[key] == value, key
    assert metadata["general.architecture"] == "llama"
    assert metadata["test.ints"] == [1, -2, 3] and metadata["test.strings"] == ["a", "bc", ""]
    assert metadata["test.nested"] == [[1, 2], [3]]
    assert metadata.get("general.alignment") == alignment
    assert list(tensors) == list(expected)
    assert tensors["plain.f16"].dtype == dtypes.float16 and tensors["plain.bf16"].dtype == dtypes.bfloat16
    for name, values in expected.items():
        assert tensors[name].shape == values.shape, name
        np.testing.assert_allclose(tensors[name].numpy(), values, rtol=1e-6, atol=1e-6, err_msg=name)
    reader = gguf.GGUFReader(str(path))  # gguf-py's own reader agrees on shapes and types
    for info in reader.tensors:
        assert tuple(int(d) for d in reversed(info.shape)) == tensors[info.name].shape


def test_raw_entries_decode_lazily(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "raw.gguf"
    expected = write_file(path)
    _, raw = gguf_load_raw(path)
    data, kind, shape = raw["k.Q6_K"]
    assert kind == GGMLType.Q6_K and shape == (2, 256) and data.numel() == 2 * GGML_BLOCKS[kind].type_size
    np.testing.assert_allclose(dequantize(data, kind, shape).numpy(), expected["k.Q6_K"], rtol=1e-6, atol=1e-6)


def test_version_2_reads_the_same(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "v2.gguf"
    expected = write_file(path)
    raw = bytearray(path.read_bytes())
    raw[4:8] = struct.pack("<I", 2)
    path.write_bytes(bytes(raw))
    _, tensors = gguf_load(path)
    np.testing.assert_allclose(tensors["q.Q4_0"].numpy(), expected["q.Q4_0"], rtol=1e-6)


def test_malformed_files(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.gguf"
    write_file(path)
    good = path.read_bytes()
    cases = {
        b"GGML" + good[4:]: "not a GGUF file: magic b'GGML'",
        good[:4] + struct.pack("<I", 1) + good[8:]: "GGUF version 1 is not supported; expected 2 or 3",
        good[:30]: "the tensor count is 13 .at offset 8.: 13 items of at least 24 bytes do not fit",
        good[:-100]: "truncated GGUF file: tensor 'k.Q6_K' needs bytes",
        b"": "empty file, not a GGUF file",
    }
    for content, message in cases.items():
        path.write_bytes(content)
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            gguf_load(path)


def test_unsupported_type_is_named(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "iq.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("w", np.zeros((1, 66), dtype=np.uint8), raw_dtype=GGMLQuantizationType.IQ2_XXS)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(NotImplementedError, match="tensor 'w': ggml tensor type IQ2_XXS is not supported"):
        gguf_load(path)
