"""kiln.tensor.export's errors at export time, each naming what is wrong: a function TinyJit cannot capture, a dtype
the target lacks, a tensor over WebGPU's buffer limit, kernels of another device, random draws, bad arguments.
None of these needs a WebGPU device: they are refused before any kernel is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes, nn
from kiln.tensor.export import WEBGPU_MAX_BINDING_BYTES, export


def test_a_function_reading_the_host_cannot_be_captured(out_dir: Path) -> None:
    def reads_back(x: Tensor) -> Tensor:
        return x * float(x.sum().item())

    with pytest.raises(RuntimeError, match=r"cannot be captured by TinyJit.*reads data to the host"):
        export(reads_back, Tensor.ones(3), target="c", out=out_dir, name="host")
    assert not out_dir.exists()


def test_a_function_returning_a_python_value_cannot_be_captured(out_dir: Path) -> None:
    with pytest.raises(RuntimeError, match=r"cannot be captured by TinyJit.*result is a float"):
        export(lambda x: 1.5, Tensor.ones(3), target="c", out=out_dir, name="value")


def test_random_draws_are_refused(out_dir: Path) -> None:
    dropout = nn.Dropout(0.5)
    with pytest.raises(RuntimeError, match=r"draws random numbers.*model.eval\(\)"):
        export(dropout, Tensor.ones(8), target="c", out=out_dir, name="noisy")


def test_float64_weight_is_refused_for_the_browser_naming_it(out_dir: Path) -> None:
    table = Tensor(np.linspace(0, 1, 8).reshape(4, 2), dtype=dtypes.float64).realize()

    def project(x: Tensor) -> Tensor:
        return (x.cast(dtypes.float64) @ table).cast(dtypes.float32)

    with pytest.raises(TypeError, match=r"cannot hold weight 'table' of dtype dtypes.float64.*stores only"):
        export(project, Tensor.ones(1, 4), target="webgpu", out=out_dir, name="doubles")
    # the C target carries float64
    artifact = export(project, Tensor.ones(1, 4), target="c", out=out_dir, name="doubles")
    assert [weight.dtype for weight in artifact.plan.weights()] == [dtypes.float64]


def test_weight_over_the_buffer_limit_is_refused_naming_it(out_dir: Path) -> None:
    columns = WEBGPU_MAX_BINDING_BYTES // (4 * 4096) + 1
    huge = Tensor.zeros(4096, columns).contiguous().realize()

    def project(x: Tensor) -> Tensor:
        return x @ huge

    expected = rf"weight 'huge' takes {4096 * columns * 4} bytes, over WebGPU's default maxStorageBufferBindingSize"
    with pytest.raises(ValueError, match=expected):
        export(project, Tensor.ones(1, 4096), target="webgpu", out=out_dir, name="huge")


def test_kernels_of_another_device_are_refused_for_the_browser(out_dir: Path) -> None:
    model = nn.Linear(4, 2)
    with pytest.raises(ValueError, match=r"kernel \S+ ran on CPU: build the model and its inputs on WEBGPU"):
        export(model, Tensor.ones(1, 4, device="CPU"), target="webgpu", out=out_dir, name="cpu")


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"target": "wasm"}, ValueError, r"target 'wasm' is not one of \['c', 'webgpu'\]"),
        ({"name": "my model"}, ValueError, r"name 'my model' must be an identifier"),
        ({"target": "webgpu", "embed_weights": True}, ValueError, r"embed_weights is for target 'c'"),
    ],
    ids=["unknown-target", "name-with-a-space", "embedded-weights-for-the-browser"],
)
def test_bad_arguments(out_dir: Path, arguments: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        export(nn.Linear(2, 2), Tensor.ones(1, 2), out=out_dir, **arguments)  # type: ignore[arg-type]


def test_a_non_tensor_input_is_refused(out_dir: Path) -> None:
    with pytest.raises(TypeError, match=r"example input 1 is a list"):
        export(lambda x, y: x, Tensor.ones(2), [1, 2], target="c", out=out_dir, name="listed")
