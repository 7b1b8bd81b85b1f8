"""Fixtures of the export tests: building a C artifact with the system compiler and running it through ctypes and
through its main.c.

The C artifacts are built with the generated Makefile's flags (`-O2 -std=c11 -fwrapv`); a test of the bare
`cc -O2 -std=c11 -c` compile runs it too. Without a C compiler the C tests are skipped.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from kiln.tensor.export import Artifact
from kiln.tensor.symbolic import Size, bound_int, rebind

CFLAGS = ("-O2", "-std=c11", "-fwrapv")


def _c_compiler() -> str:
    """The system C compiler (cc, gcc or clang); skips the test when there is none."""
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no C compiler (cc, gcc or clang) on PATH")


def _build_c(artifact: Artifact) -> tuple[Path, Path]:
    """The artifact's shared library and main program, compiled as its Makefile says."""
    compiler, folder, name = _c_compiler(), artifact.out, artifact.plan.name
    library, program = folder / f"lib{name}.so", folder / f"{name}_main"
    for command in (
        [compiler, *CFLAGS, "-fPIC", "-shared", "-o", str(library), str(folder / f"{name}.c"), "-lm"],
        [compiler, *CFLAGS, "-o", str(program), str(folder / "main.c"), str(folder / f"{name}.c"), "-lm"],
    ):
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stderr}"
    return library, program


def _run_ctypes(
    artifact: Artifact, inputs: Sequence[np.ndarray], variables: Sequence[int] = (), weights: str | None = None
) -> list[np.ndarray]:
    """Loads the artifact's library with ctypes and runs it once on `inputs`; the outputs as numpy arrays."""
    library_path, _program = _build_c(artifact)
    library = ctypes.CDLL(str(library_path))
    name = artifact.plan.name
    weights_path = weights if weights is not None else str(artifact.out / f"{name}.safetensors")
    assert getattr(library, f"{name}_init")(weights_path.encode()) == 0
    values = {variable.name: value for variable, value in zip(artifact.plan.variables, variables)}
    outputs = []
    for endpoint in artifact.plan.outputs:
        shape = tuple(size if isinstance(size, int) else _evaluate(size, values) for size in endpoint.shape)
        outputs.append(np.zeros(shape, dtype=np.dtype(endpoint.dtype.name)))
    arrays = [np.ascontiguousarray(array) for array in inputs]
    arguments: list[Any] = [ctypes.c_void_p(array.ctypes.data) for array in arrays]
    arguments += [ctypes.c_int(value) for value in variables]
    arguments += [ctypes.c_void_p(array.ctypes.data) for array in outputs]
    status = getattr(library, f"{name}_run")(*arguments)
    getattr(library, f"{name}_free")()
    assert status == 0, f"{name}_run returned {status}"
    return outputs


def _evaluate(size: object, values: dict[str, int]) -> int:
    return bound_int(rebind(cast(Size, size), values))


def _run_main(artifact: Artifact, inputs: Sequence[np.ndarray], variables: Sequence[int] = ()) -> list[np.ndarray]:
    """Runs the artifact's main.c program on `inputs` saved as .npy files; the printed outputs, parsed."""
    _library, program = _build_c(artifact)
    paths = []
    for number, array in enumerate(inputs):
        path = artifact.out / f"input{number}.npy"
        np.save(path, np.ascontiguousarray(array))
        paths.append(str(path))
    name = artifact.plan.name
    assigned = [f"{variable.name}={value}" for variable, value in zip(artifact.plan.variables, variables)]
    command = [str(program), str(artifact.out / f"{name}.safetensors"), *paths, *assigned]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{command} failed ({result.returncode}): {result.stderr}"
    lines = result.stdout.splitlines()
    outputs, position = [], 0
    for endpoint in artifact.plan.outputs:
        label, dtype_name, count = lines[position].split()
        assert label == endpoint.name and dtype_name == endpoint.dtype.name
        values = lines[position + 1 : position + 1 + int(count)]
        outputs.append(np.array([float(value) for value in values]))
        position += 1 + int(count)
    return outputs


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """A fresh folder for one artifact."""
    return tmp_path / "artifact"


@pytest.fixture
def run_ctypes() -> Callable[..., list[np.ndarray]]:
    """Builds an artifact's library and runs it through ctypes: `run_ctypes(artifact, inputs, variables=())`."""
    return _run_ctypes


@pytest.fixture
def run_main() -> Callable[..., list[np.ndarray]]:
    """Builds an artifact's main.c and runs it on .npy inputs: `run_main(artifact, inputs, variables=())`."""
    return _run_main


@pytest.fixture
def c_compiler() -> str:
    """The system C compiler; the test is skipped without one."""
    return _c_compiler()
