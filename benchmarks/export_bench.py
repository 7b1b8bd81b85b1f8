"""kiln.tensor.export: artifact sizes, and the C artifact's run time against kiln's own jitted run of the same model.

    uv run python benchmarks/export_bench.py [--repeats 200]

For each model (the digits CNN of examples/train_digits.py at batch 16 and 256, and an MLP 784-512-512-10 at batch
64), it exports the C artifact, builds its library single-threaded with the generated Makefile's flags, without
(`-O2 -std=c11 -fwrapv`, `make ARCH=`) and with its default `ARCH=-march=native`, and times `NAME_run` through
ctypes (inputs copied in, outputs copied out), next to kiln's TinyJit replay of the same function on the CPU device
(outputs read back with `.numpy()`, which waits for the kernels): medians over `--repeats` calls after warm-up. The
kiln run may use several cores (THREAD axes); the artifact runs on one unless built with `-DKILN_EXPORT_OPENMP
-fopenmp`, which is timed too where the compiler has OpenMP. The portable build has no FMA instruction (x86-64's
baseline), so the fused multiply-adds of kiln's kernels call libm's fmaf; `-march=native` is how kiln compiles its
own kernels.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kiln.tensor import Tensor, TinyJit, nn
from kiln.tensor.export import Artifact, export

REPOSITORY = Path(__file__).resolve().parents[1]


def digits_model() -> Any:
    spec = importlib.util.spec_from_file_location("train_digits", REPOSITORY / "examples" / "train_digits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.make_model()


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    for _ in range(5):
        call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def build(artifact: Artifact, flags: list[str]) -> Path | None:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert compiler is not None, "no C compiler"
    name = artifact.plan.name
    library = artifact.out / f"lib{name}_{abs(hash(tuple(flags)))}.so"
    command = [compiler, "-O2", "-std=c11", "-fwrapv", *flags, "-fPIC", "-shared", "-o", str(library)]
    result = subprocess.run([*command, str(artifact.out / f"{name}.c"), "-lm"], capture_output=True, check=False)
    return library if result.returncode == 0 else None


def time_library(library: Path, artifact: Artifact, x: np.ndarray, out: np.ndarray, repeats: int) -> float:
    loaded = ctypes.CDLL(str(library))
    name = artifact.plan.name
    assert getattr(loaded, f"{name}_init")(str(artifact.out / f"{name}.safetensors").encode()) == 0
    run = getattr(loaded, f"{name}_run")
    arguments = (ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data))
    seconds = median_seconds(lambda: run(*arguments), repeats)
    getattr(loaded, f"{name}_free")()
    return seconds


def bench(label: str, model: Any, x: np.ndarray, folder: Path, repeats: int) -> None:
    model.eval()
    function = model.__call__
    jit: TinyJit[Tensor] = TinyJit(function)
    tensor = Tensor(x).realize()
    kiln_seconds = median_seconds(lambda: jit(tensor).numpy(), repeats)
    expected = jit(tensor).numpy()
    name = label.split()[0]
    artifact = export(function, tensor, target="c", out=folder / label.replace(" ", "_"), name=name)
    out = np.zeros(expected.shape, dtype=np.float32)
    library = build(artifact, [])
    assert library is not None
    c_seconds = time_library(library, artifact, np.ascontiguousarray(x), out, repeats)
    difference = float(np.abs(out - expected).max())
    native_library = build(artifact, ["-march=native"])
    assert native_library is not None
    native_seconds = time_library(native_library, artifact, np.ascontiguousarray(x), out, repeats)
    omp_library = build(artifact, ["-march=native", "-DKILN_EXPORT_OPENMP", "-fopenmp"])
    omp = ""
    if omp_library is not None:
        seconds = time_library(omp_library, artifact, np.ascontiguousarray(x), out, repeats)
        omp = f", native+OpenMP {seconds * 1e6:8.1f} us"
    sizes = artifact.sizes()
    kernels = sum(1 for step in artifact.plan.steps if hasattr(step, "ast"))
    print(
        f"{label:<17} kiln jit {kiln_seconds * 1e6:8.1f} us, C {c_seconds * 1e6:8.1f} us, "
        f"C -march=native {native_seconds * 1e6:8.1f} us{omp}  "
        f"(max |diff| {difference:.2g}, {kernels} kernels; {name}.c {sizes[f'{name}.c']} B, "
        f"weights {sizes[f'{name}.safetensors']} B)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    arguments = parser.parse_args()
    rng = np.random.default_rng(0)
    Tensor.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="kiln-export-bench-") as directory:
        folder = Path(directory)
        cnn = digits_model()
        for batch in (16, 256):
            images = rng.random((batch, 1, 8, 8), dtype=np.float32)
            bench(f"digits batch {batch}", cnn, images, folder, arguments.repeats)
        mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        bench("mlp batch 64", mlp, rng.standard_normal((64, 784)).astype(np.float32), folder, arguments.repeats)


if __name__ == "__main__":
    main()
