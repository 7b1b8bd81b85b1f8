"""kiln.tensor.export, target "c": models exported, compiled with the system C compiler, run through ctypes and
through the generated main.c, and compared with kiln's own outputs (within 1e-6) and, where one is cheap, with a
numpy forward pass (an independent oracle)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, TinyJit, Variable, nn
from kiln.tensor.export import export
from kiln.tensor.export.plan import PlannedLaunch


def check_outputs(found: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(found) == len(expected)
    for output, reference in zip(found, expected):
        np.testing.assert_allclose(output.reshape(reference.shape), reference, rtol=1e-6, atol=1e-6)


def run_both(
    artifact: Any, inputs: list[np.ndarray], run_ctypes: Callable[..., Any], run_main: Callable[..., Any]
) -> list[np.ndarray]:
    through_ctypes = run_ctypes(artifact, inputs)
    through_main = run_main(artifact, inputs)
    # main prints with %.17g: the very doubles of the float32 results
    for library_output, printed in zip(through_ctypes, through_main):
        np.testing.assert_array_equal(library_output.reshape(-1).astype(np.float64), printed)
    return list(through_ctypes)


def test_mlp_matches_numpy_and_kiln(out_dir: Path, run_ctypes: Any, run_main: Any) -> None:
    Tensor.manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 5))
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    artifact = export(model, Tensor(x), target="c", out=out_dir, name="mlp")
    outputs = run_both(artifact, [x], run_ctypes, run_main)
    weights = [parameter.numpy() for parameter in model.parameters()]
    hidden = np.tanh(x.astype(np.float64) @ weights[0].T + weights[1])
    np.testing.assert_allclose(outputs[0], hidden @ weights[2].T + weights[3], rtol=1e-5, atol=1e-5)
    check_outputs(outputs, [model(Tensor(x)).numpy()])


def test_digits_cnn(out_dir: Path, run_ctypes: Any, run_main: Any, digits_example: Any) -> None:
    Tensor.manual_seed(2)
    model = digits_example.make_model()
    images = np.random.default_rng(1).random((4, 1, 8, 8), dtype=np.float32)
    expected = model(Tensor(images)).softmax(-1).numpy()
    artifact = export(lambda x: model(x).softmax(-1), Tensor(images), target="c", out=out_dir, name="digits")
    check_outputs(run_both(artifact, [images], run_ctypes, run_main), [expected])
    # the weights file holds the model's parameters under their state-dict names
    names = set(re.findall(r'"(model\.[0-9]+\.(?:weight|bias))"', (out_dir / "digits.c").read_text()))
    assert names == {f"model.{key}" for key in model.state_dict()}


class TransformerBlock(nn.Module):
    """Pre-norm self-attention and a GELU MLP, each with a residual connection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: Tensor) -> Tensor:
        normed = self.norm1(x)
        attended, _weights = self.attention(normed, normed, normed, need_weights=False)
        x = x + attended
        result: Tensor = x + self.down(self.up(self.norm2(x)).gelu())
        return result


def test_transformer_block(out_dir: Path, run_ctypes: Any, run_main: Any) -> None:
    Tensor.manual_seed(3)
    block = TransformerBlock(16, 2)
    block.eval()
    x = np.random.default_rng(2).standard_normal((2, 5, 16)).astype(np.float32)
    expected = block(Tensor(x)).numpy()
    artifact = export(block, Tensor(x), target="c", out=out_dir, name="block")
    check_outputs(run_both(artifact, [x], run_ctypes, run_main), [expected])


def fold_batch_norm(convolution: nn.Conv2d, norm: nn.BatchNorm2d) -> nn.Conv2d:
    """A convolution computing convolution then (eval-mode) batch norm, folded in numpy."""
    assert norm.weight is not None and norm.bias is not None and convolution.bias is not None
    assert norm.running_mean is not None and norm.running_var is not None
    scale = norm.weight.numpy() / np.sqrt(norm.running_var.numpy() + norm.eps)
    folded = nn.Conv2d(convolution.in_channels, convolution.out_channels, 3, padding=1)
    folded.weight.assign(Tensor(convolution.weight.numpy() * scale[:, None, None, None])).realize()
    bias = (convolution.bias.numpy() - norm.running_mean.numpy()) * scale + norm.bias.numpy()
    assert folded.bias is not None
    folded.bias.assign(Tensor(bias.astype(np.float32))).realize()
    return folded


def test_conv_net_with_folded_batch_norm(out_dir: Path, run_ctypes: Any, run_main: Any) -> None:
    Tensor.manual_seed(4)
    rng = np.random.default_rng(3)
    convolution, norm = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
    assert norm.weight is not None and norm.running_mean is not None and norm.running_var is not None
    norm.running_mean.assign(Tensor(rng.standard_normal(8).astype(np.float32))).realize()
    norm.running_var.assign(Tensor(rng.random(8, dtype=np.float32) + 0.5)).realize()
    norm.weight.assign(Tensor(rng.random(8, dtype=np.float32) + 0.5)).realize()
    unfolded = nn.Sequential(convolution, norm, nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(8 * 16, 3))
    unfolded.eval()
    folded = nn.Sequential(fold_batch_norm(convolution, norm), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), unfolded[5])
    images = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    artifact = export(folded, Tensor(images), target="c", out=out_dir, name="convnet")
    outputs = run_both(artifact, [images], run_ctypes, run_main)
    check_outputs(outputs, [folded(Tensor(images)).numpy()])
    # folding changed the roundings, not the function: the unfolded model agrees to float32 accuracy
    np.testing.assert_allclose(outputs[0], unfolded(Tensor(images)).numpy(), rtol=1e-4, atol=1e-5)


def test_embedded_weights_need_no_file(out_dir: Path, run_ctypes: Any) -> None:
    Tensor.manual_seed(5)
    model = nn.Linear(6, 3)
    x = np.arange(12, dtype=np.float32).reshape(2, 6) / 7
    artifact = export(model, Tensor(x), target="c", out=out_dir, name="embedded", embed_weights=True)
    assert not (out_dir / "embedded.safetensors").exists()
    outputs = run_ctypes(artifact, [x], weights="/nonexistent/weights.safetensors")
    assert model.bias is not None
    expected = x.astype(np.float64) @ model.weight.numpy().T + model.bias.numpy()
    np.testing.assert_allclose(outputs[0], expected, rtol=1e-6, atol=1e-6)


def test_variable_argument_becomes_an_int_of_run(
    out_dir: Path, run_ctypes: Any, run_main: Any, first_rows: Any
) -> None:
    scale = first_rows.scale
    artifact = export(first_rows.function, Tensor(scale), first_rows.rows.bind(3), target="c", out=out_dir, name="rows")
    assert [variable.name for variable in artifact.plan.variables] == ["rows"]
    header = (out_dir / "rows.h").read_text()
    assert "int rows_run(const float *input0, int rows, float *output0);" in header
    for count in (1, 5, 8):
        expected = first_rows.expected(count)
        np.testing.assert_allclose(run_ctypes(artifact, [scale], [count])[0], expected, rtol=1e-6)
        np.testing.assert_allclose(run_main(artifact, [scale], [count])[0], expected, rtol=1e-6)


def test_sources_compile_with_plain_cc_and_carry_their_header(out_dir: Path, c_compiler: str) -> None:
    Tensor.manual_seed(6)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    artifact = export(model, Tensor.zeros(2, 4), target="c", out=out_dir, name="tiny")
    for source in ("tiny.c", "main.c"):
        command = [c_compiler, "-O2", "-std=c11", "-c", source, "-o", f"{source}.o"]
        result = subprocess.run(command, cwd=out_dir, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
    for path in artifact.files:
        if path.suffix in (".c", ".h"):
            text = path.read_text()
            assert "tiny: exported by kiln" in text
            assert "input0: shape (2, 4), float32" in text and "output0: shape (2, 4), float32" in text
            assert "shapes are fixed at export" in text
            assert str(out_dir) not in text and "/work/" not in text and "python" not in text.lower()
    assert set(artifact.sizes()) == {"tiny.c", "tiny.h", "main.c", "Makefile", "tiny.safetensors"}
    if shutil.which("make"):  # the generated Makefile builds both the program and the library
        built = subprocess.run(["make", f"CC={c_compiler}"], cwd=out_dir, capture_output=True, text=True, check=False)
        assert built.returncode == 0, built.stderr
        assert (out_dir / "tiny_main").is_file() and (out_dir / "libtiny.so").is_file()


def test_main_reads_raw_little_endian_input(out_dir: Path, run_ctypes: Any) -> None:
    Tensor.manual_seed(7)
    model = nn.Linear(3, 2)
    x = np.array([[1.0, -2.0, 0.5]], dtype=np.float32)
    artifact = export(model, Tensor(x), target="c", out=out_dir, name="raw")
    expected = run_ctypes(artifact, [x])[0]
    (out_dir / "x.bin").write_bytes(x.astype("<f4").tobytes())
    result = subprocess.run(
        [str(out_dir / "raw_main"), str(out_dir / "raw.safetensors"), str(out_dir / "x.bin")],
        capture_output=True,
        text=True,
        check=True,
    )
    printed = np.array([float(line) for line in result.stdout.splitlines()[1:]])
    np.testing.assert_array_equal(printed, expected.reshape(-1).astype(np.float64))
    (out_dir / "short.bin").write_bytes(b"\0" * 8)
    refused = subprocess.run(
        [str(out_dir / "raw_main"), str(out_dir / "raw.safetensors"), str(out_dir / "short.bin")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 1 and "expected 12 bytes of data, the file has 8" in refused.stderr


def test_export_after_kiln_ran_the_function_on_the_same_input(
    out_dir: Path, run_ctypes: Any, digits_example: Any
) -> None:
    Tensor.manual_seed(8)
    model = digits_example.make_model()
    model.eval()
    images = Tensor(np.random.default_rng(4).random((16, 1, 8, 8), dtype=np.float32)).realize()
    jit = TinyJit(model.__call__)
    for _call in range(4):
        expected = jit(images).numpy()
    artifact = export(model.__call__, images, target="c", out=out_dir, name="again")
    assert sum(1 for step in artifact.plan.steps if isinstance(step, PlannedLaunch)) >= 3
    check_outputs(run_ctypes(artifact, [images.numpy()]), [expected])


def test_openmp_build_gives_the_same_outputs(out_dir: Path, run_ctypes: Any, c_compiler: str) -> None:
    probe = subprocess.run(
        [c_compiler, "-fopenmp", "-x", "c", "-", "-o", str(out_dir.parent / "probe")],
        input="#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"{c_compiler} has no OpenMP: {probe.stderr.strip()[:200]}")
    Tensor.manual_seed(9)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))
    x = np.random.default_rng(7).standard_normal((32, 64)).astype(np.float32)
    artifact = export(model, Tensor(x), target="c", out=out_dir, name="threaded")
    assert "#pragma omp parallel for" in (out_dir / "threaded.c").read_text()
    single = run_ctypes(artifact, [x])[0]
    library = out_dir / "libthreaded_omp.so"
    command = [c_compiler, "-O2", "-std=c11", "-fwrapv", "-DKILN_EXPORT_OPENMP", "-fopenmp", "-fPIC", "-shared"]
    subprocess.run([*command, "-o", str(library), str(out_dir / "threaded.c"), "-lm"], check=True)
    loaded = ctypes.CDLL(str(library))
    assert loaded.threaded_init(str(out_dir / "threaded.safetensors").encode()) == 0
    threaded = np.zeros_like(single)
    assert loaded.threaded_run(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(threaded.ctypes.data)) == 0
    loaded.threaded_free()
    np.testing.assert_array_equal(threaded, single)


def test_symbolic_input_shape_becomes_a_run_argument(out_dir: Path, run_ctypes: Any, run_main: Any) -> None:
    data = np.arange(24, dtype=np.float32).reshape(6, 4) / 5
    weight = Tensor(np.linspace(-1, 1, 4, dtype=np.float32)).realize()
    count = Variable("count", 1, 6)

    def weighted(rows: Tensor) -> Tensor:
        return (rows * weight).sum(1)

    artifact = export(weighted, Tensor(data)[: count.bind(4)], target="c", out=out_dir, name="weighted")
    assert [variable.name for variable in artifact.plan.variables] == ["count"]
    assert "int weighted_run(const float *input0, int count, float *output0);" in (out_dir / "weighted.h").read_text()
    w = np.linspace(-1, 1, 4, dtype=np.float64)
    for rows in (1, 3, 6):
        expected = (data[:rows] * w).sum(1)
        np.testing.assert_allclose(run_ctypes(artifact, [data[:rows]], [rows])[0], expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(run_main(artifact, [data[:rows]], [rows])[0], expected, rtol=1e-6, atol=1e-6)


def test_weights_file_read_whatever_its_json_layout(out_dir: Path, run_ctypes: Any) -> None:
    """The C reader against a header written another way: keys reversed, spaces and newlines, extra fields and
    entries; then the refusals: a missing file (-2), a weight of another dtype (-3)."""
    Tensor.manual_seed(10)
    model = nn.Linear(5, 3)
    x = np.random.default_rng(8).standard_normal((2, 5)).astype(np.float32)
    artifact = export(model, Tensor(x), target="c", out=out_dir, name="reread")
    expected = run_ctypes(artifact, [x])[0]
    original = (out_dir / "reread.safetensors").read_bytes()
    length = int.from_bytes(original[:8], "little")
    header = json.loads(original[8 : 8 + length])
    data = original[8 + length :]
    rewritten: dict[str, Any] = {"zzz_extra": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}
    for key in reversed(list(header)):
        entry = header[key]
        rewritten[key] = entry if key == "__metadata__" else {"shape": entry["shape"], "note": [1, {"a": "}"}], **entry}
    text = json.dumps(rewritten, indent=2).encode()
    (out_dir / "other.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data)
    np.testing.assert_array_equal(run_ctypes(artifact, [x], weights=str(out_dir / "other.safetensors"))[0], expected)

    library = ctypes.CDLL(str(out_dir / "libreread.so"))
    assert library.reread_init(str(out_dir / "missing.safetensors").encode()) == -2
    wrong = {key: ({**value, "dtype": "F64"} if key != "__metadata__" else value) for key, value in header.items()}
    text = json.dumps(wrong).encode()
    (out_dir / "wrong.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data)
    assert library.reread_init(str(out_dir / "wrong.safetensors").encode()) == -3
    assert library.reread_run(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(expected.ctypes.data)) == -1


BIT_FOR_BIT_SCRIPT = """
import ctypes, subprocess, sys
import numpy as np
from kiln.tensor import Tensor, TinyJit, nn
from kiln.tensor.export import export

Tensor.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.LayerNorm(32), nn.Linear(32, 5))
x = np.random.default_rng(0).standard_normal((6, 16)).astype(np.float32)
tensor = Tensor(x).realize()
jit = TinyJit(lambda t: model(t).softmax(-1))
for _call in range(3):
    expected = jit(tensor).numpy()
artifact = export(lambda t: model(t).softmax(-1), tensor, target="c", out=sys.argv[1], name="exact")
library = f"{sys.argv[1]}/libexact.so"
subprocess.run([sys.argv[2], "-O2", "-std=c11", "-fwrapv", "-fPIC", "-shared", "-o", library,
                f"{sys.argv[1]}/exact.c", "-lm"], check=True)
loaded = ctypes.CDLL(library)
assert loaded.exact_init(f"{sys.argv[1]}/exact.safetensors".encode()) == 0
found = np.zeros_like(expected)
assert loaded.exact_run(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(found.ctypes.data)) == 0
print("identical" if np.array_equal(found.view(np.uint32), expected.view(np.uint32)) else "different")
"""


def test_bit_for_bit_when_kiln_runs_the_c_renderer(tmp_path: Path, c_compiler: str) -> None:
    """With kiln's CPU device on its C renderer (CPU_RENDERER=c, in a process of its own: the device picks its
    renderer once), the artifact's kernels are kiln's kernels and the outputs are the same bits."""
    environment = {**os.environ, "CPU_RENDERER": "c"}
    command = [sys.executable, "-c", BIT_FOR_BIT_SCRIPT, str(tmp_path), c_compiler]
    result = subprocess.run(command, env=environment, capture_output=True, text=True, check=False, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "identical"
