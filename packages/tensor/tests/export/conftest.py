"""Fixtures of the export tests: building a C artifact with the system compiler and running it through ctypes and
through its main.c; the models both targets' tests export (the digits CNN of examples/train_digits.py, a function of
a Variable argument).

The C artifacts are built with the generated Makefile's flags (`-O2 -std=c11 -fwrapv`); a test of the bare
`cc -O2 -std=c11 -c` compile runs it too. Without a C compiler the C tests are skipped.
"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import numpy as np
import pytest

from kiln.tensor import Tensor, Variable
from kiln.tensor.export import Artifact
from kiln.tensor.symbolic import Size, bound_int, rebind

CFLAGS = ("-O2", "-std=c11", "-fwrapv")
REPOSITORY = Path(__file__).resolve().parents[4]


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


def _digits_example() -> ModuleType:
    name = "kiln_examples_train_digits"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPOSITORY / "examples" / "train_digits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def digits_example() -> ModuleType:
    """examples/train_digits.py loaded as a module (its `make_model` is the digits CNN)."""
    return _digits_example()


@dataclass(frozen=True)
class FirstRows:
    """`function(scale, v)`: the first v rows of `data` (8 x 4) times `scale`, summed per row, plus v; `rows` is the
    Variable in [1, 8] that v is bound from."""

    data: np.ndarray
    scale: np.ndarray
    rows: Variable
    function: Callable[[Tensor, Tensor], Tensor]

    def expected(self, count: int) -> np.ndarray:
        """The numpy result for v = count."""
        return np.asarray((self.data[:count] * self.scale[0]).sum(1) + count)


@pytest.fixture
def first_rows() -> FirstRows:
    """A function of a Variable argument (see `FirstRows`), with scale [2.0]."""
    data = np.arange(32, dtype=np.float32).reshape(8, 4) / 3
    table = Tensor(data).realize()

    def function(scale: Tensor, v: Tensor) -> Tensor:
        return (table[:v] * scale).sum(1) + v.float()

    return FirstRows(data, np.array([2.0], dtype=np.float32), Variable("rows", 1, 8), function)
