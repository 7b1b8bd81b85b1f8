"""A mutation fuzzer over valid checkpoint files: every loader answers a damaged file with a value or one of its
documented exceptions, never another exception class, a crash or unbounded recursion (issue 44).

Each case is a seed: the seed picks the valid file and 1-3 mutations (truncate, flip bits, splice a chunk of the file
over another place, insert or delete bytes, overwrite an aligned 4- or 8-byte field with a count-like value). CI runs
`CI_CASES` seeds per loader plus every seed in `PINNED` (each one failed once; keep them). The long form:

    KILN_LOADER_FUZZ=20000 uv run pytest packages/tensor/tests/test_loader_fuzz.py -n 0 -q

runs that many seeds per loader (KILN_LOADER_FUZZ_START shifts the first seed); a failure names its seed.
`test_mutants_within_an_address_space_limit` reruns part of them in a child process whose address space is capped
(RLIMIT_AS): a loader that allocates from a hostile count instead of checking it against the file fails there.
"""

from __future__ import annotations

import io
import os
import pathlib
import pickle
import random
import struct
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable

import gguf
import numpy as np
import pytest
from pth_builder import legacy_checkpoint, op_dict, op_tensor, zip_checkpoint

from kiln.tensor import Tensor, dtypes
from kiln.tensor.state import gguf_load, safe_load, safe_save, torch_load

CI_CASES = 60
CASES = int(os.environ.get("KILN_LOADER_FUZZ", CI_CASES))
START = int(os.environ.get("KILN_LOADER_FUZZ_START", 0))
# seeds that failed once: on the loaders before issue 44 (BadZipFile, EOFError from inside the pickle, ...)
PINNED: dict[str, list[int]] = {"safetensors": [], "gguf": [], "pth_zip": [3], "pth_pickle": [15], "pth_legacy": [23]}
DOCUMENTED: dict[str, tuple[type[BaseException], ...]] = {
    "safetensors": (ValueError,),
    "gguf": (ValueError, NotImplementedError),  # NotImplementedError: a real ggml type kiln does not decode
    "pth_zip": (ValueError, pickle.UnpicklingError),
    "pth_pickle": (ValueError, pickle.UnpicklingError),
    "pth_legacy": (ValueError, pickle.UnpicklingError),
}
COUNTS = [0, 1, 2, 7, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 2**32, 2**40, 2**62, 2**63, 2**64 - 1]


def _safetensors_files(folder: pathlib.Path) -> list[bytes]:
    path = folder / "seed.safetensors"
    safe_save(
        {
            "w": Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)),
            "b": Tensor([1, -2, 3], dtype=dtypes.int16),
            "h": Tensor([0.5, 2.0], dtype=dtypes.bfloat16),
        },
        path,
        metadata={"format": "pt", "note": "fuzz"},
    )
    return [path.read_bytes()]


def _gguf_files(folder: pathlib.Path) -> list[bytes]:
    path = folder / "seed.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("test.count", 3)
    writer.add_string("test.name", "fuzz")
    writer.add_array("test.ints", [1, -2, 3])
    writer.add_array("test.strings", ["a", "bc"])
    writer.add_array("test.nested", [[1, 2], [3]])
    writer.add_tensor("a", np.arange(8, dtype=np.float32).reshape(2, 4))
    writer.add_tensor("b", np.ones((4,), dtype=np.float16))
    writer.add_tensor("q", np.zeros((1, 34), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return [path.read_bytes()]


def _pth_parts(legacy: bool) -> tuple[bytes, dict[str, bytes]]:
    data = op_dict(
        {
            "dense": op_tensor("0", 6, 0, [2, 3], [3, 1], legacy=legacy),
            "transposed": op_tensor("0", 6, 0, [3, 2], [1, 3], legacy=legacy),
            "stepped": op_tensor("0", 6, 1, [2], [2], legacy=legacy),
            "expanded": op_tensor("1", 2, 1, [2, 5], [0, 0], storage="LongStorage", legacy=legacy),
        }
    )
    return data, {"0": struct.pack("<6f", *range(6)), "1": struct.pack("<2q", 4, -9)}


def _pth_zip_files(folder: pathlib.Path) -> list[bytes]:
    path = str(folder / "seed.pth")
    zip_checkpoint(path, *_pth_parts(legacy=False))
    return [pathlib.Path(path).read_bytes()]


def _pth_legacy_files(folder: pathlib.Path) -> list[bytes]:
    path = str(folder / "seed_legacy.pth")
    data, storages = _pth_parts(legacy=True)
    legacy_checkpoint(path, data, {key: (len(raw) // (4 if key == "0" else 8), raw) for key, raw in storages.items()})
    return [pathlib.Path(path).read_bytes()]


def _pth_pickle_files(folder: pathlib.Path) -> list[bytes]:
    """The zip checkpoint's data.pkl alone: mutated, then zipped again (valid CRCs), so the mutations reach the
    unpickler instead of stopping at zipfile's checksum."""
    return [_pth_parts(legacy=False)[0]]


def _rezip(data_pkl: bytes) -> bytes:
    buffer = io.BytesIO()
    _, storages = _pth_parts(legacy=False)
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        archive.writestr("archive/byteorder", "little")
        for key, raw in storages.items():
            archive.writestr(f"archive/data/{key}", raw)
    return buffer.getvalue()


LOADERS: dict[str, tuple[Callable[[pathlib.Path], list[bytes]], Callable[[pathlib.Path], object]]] = {
    "safetensors": (_safetensors_files, safe_load),
    "gguf": (_gguf_files, gguf_load),
    "pth_zip": (_pth_zip_files, torch_load),
    "pth_pickle": (_pth_pickle_files, torch_load),
    "pth_legacy": (_pth_legacy_files, torch_load),
}


def mutate(data: bytes, rng: random.Random) -> bytes:
    """`data` with 1-3 random mutations applied."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        if not out:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == 0:  # truncate
            del out[rng.randrange(len(out)) :]
        elif kind == 1:  # flip bits
            for _ in range(rng.randint(1, 4)):
                out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif kind == 2:  # splice: a chunk of the file copied over another place
            start, length = rng.randrange(len(out)), rng.randint(1, 64)
            chunk = out[start : start + length]
            target = rng.randrange(len(out))
            out[target : target + len(chunk)] = chunk
        elif kind == 3:  # insert bytes
            position = rng.randrange(len(out) + 1)
            out[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif kind == 4:  # delete bytes
            position = rng.randrange(len(out))
            del out[position : position + rng.randint(1, 16)]
        else:  # inflate a count or length: an aligned 4- or 8-byte field set to a count-like value
            width = rng.choice([4, 8])
            if len(out) >= width:
                position = rng.randrange(0, len(out) - width + 1, rng.choice([1, width]))
                value = rng.choice([*COUNTS, len(out), rng.getrandbits(width * 8)]) % (1 << (width * 8))
                out[position : position + width] = value.to_bytes(width, "little")
    return bytes(out)


def run_case(loader: str, seed: int, files: list[bytes], folder: pathlib.Path) -> None:
    """Loads the mutant of `seed`; an exception outside the loader's documented classes fails naming the seed."""
    rng = random.Random(f"{loader}:{seed}")
    data = mutate(rng.choice(files), rng)
    if loader == "pth_pickle":
        data = _rezip(data)
    path = folder / f"case.{loader}"
    path.write_bytes(data)
    try:
        LOADERS[loader][1](path)
    except DOCUMENTED[loader]:
        pass
    except BaseException as error:
        raise AssertionError(
            f"{loader} seed {seed}: {type(error).__name__}: {error!r:.500} (rerun: KILN_LOADER_FUZZ_START={seed} "
            f"KILN_LOADER_FUZZ=1)"
        ) from error


@pytest.mark.parametrize("loader", list(LOADERS))
def test_valid_seed_files_load(loader: str, tmp_path: pathlib.Path) -> None:
    """The control: the unmutated files load (so a mutant's error comes from the mutation)."""
    for data in LOADERS[loader][0](tmp_path):
        path = tmp_path / f"valid.{loader}"
        path.write_bytes(_rezip(data) if loader == "pth_pickle" else data)
        assert LOADERS[loader][1](path)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_mutants_raise_only_documented_errors(loader: str, tmp_path: pathlib.Path) -> None:
    files = LOADERS[loader][0](tmp_path)
    for seed in [*PINNED[loader], *range(START, START + CASES)]:
        run_case(loader, seed, files, tmp_path)


ADDRESS_SPACE_LIMIT = 3 << 30  # the seed files are a few KB: any allocation near this is one a header talked it into


def test_mutants_within_an_address_space_limit(tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(
        f"""
        import pathlib, resource
        import test_loader_fuzz as fuzz
        folder = pathlib.Path({str(tmp_path)!r})
        files = {{loader: make(folder) for loader, (make, _) in fuzz.LOADERS.items()}}
        fuzz.run_case("gguf", 0, files["gguf"], folder)  # the compiler's first allocations made under no limit
        resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE_LIMIT}, resource.getrlimit(resource.RLIMIT_AS)[1]))
        for loader in fuzz.LOADERS:
            for seed in range({START + 100_000}, {START + 100_000 + max(CASES // 3, 1)}):
                fuzz.run_case(loader, seed, files[loader], folder)
        print("ok")
        """
    )
    # in this folder: `python -c` puts the working directory first on sys.path, so test_loader_fuzz imports
    here = pathlib.Path(__file__).parent
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=here)
    assert done.returncode == 0 and done.stdout.split() == ["ok"], done.stderr[-3000:]


def test_the_mutator_changes_files() -> None:
    rng = random.Random(0)
    original = bytes(range(256)) * 4
    mutants = [mutate(original, rng) for _ in range(200)]
    assert sum(mutant != original for mutant in mutants) >= 190
    assert len({len(mutant) for mutant in mutants}) > 20  # truncations, inserts and deletes change the length
