"""kiln.tensor.onnx against onnxruntime on the real-model fixtures of packages/tensor/tests/onnx/models (torch exports:
a ResNet-18-shaped CNN, a MobileNet-style CNN, a BERT-style encoder, a GPT-2-style decoder step with a KV cache, an
LSTM, and int8 models from onnxruntime's quantization tools), at batch 1 and 16.

    uv run python benchmarks/onnx_bench.py [--runs N] [--models resnet18,bert] [--warm-cache]

For each model and batch: kiln's OnnxRunner called plainly (from the third call with the same input shapes a plain
call replays the kernels OnnxRunner captured on the second: see kiln.tensor.onnx.replay_cache) and wrapped in TinyJit,
and onnxruntime's CPU provider (2 intra-op threads; kiln's CPU device uses the host's cores, 2 on the reference
machine), each the median of N timed runs after warm-up, outputs read back to numpy. Every kiln result is checked
against onnxruntime's first (rtol 1e-3: the int8 models may round a value a step apart). "first run" is loading the
file and the first call at batch 1: translation and kernel compilation with the compiler's disk cache off
(--warm-cache keeps it on), next to onnxruntime's session creation and first run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime  # type: ignore[import-untyped]

from kiln.tensor import Tensor, TinyJit
from kiln.tensor.jit_replay import CapturedStep, ReplayStep
from kiln.tensor.onnx import OnnxRunner
from kiln.uops import Context

MODELS = Path(__file__).resolve().parent.parent / "packages" / "tensor" / "tests" / "onnx" / "models"
THREADS = 2


def _images(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((batch, 3, 64, 64)).astype(np.float32)}


def _tokens(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "input_ids": rng.integers(0, 100, (batch, 16)),
        "attention_mask": np.ones((batch, 16), np.int64),
        "token_type_ids": np.zeros((batch, 16), np.int64),
    }


def _decoder_step(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {"input_ids": rng.integers(0, 100, (batch, 1))}
    for layer in range(2):
        for kind in ("key", "value"):
            feeds[f"past_{kind}_{layer}"] = rng.standard_normal((batch, 4, 31, 8)).astype(np.float32)
    return feeds


def _sequence(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((batch, 12, 8)).astype(np.float32)}


WORKLOADS: dict[str, Callable[[int, np.random.Generator], dict[str, np.ndarray]]] = {
    "resnet18": _images,
    "mobilenet": _images,
    "resnet18_int8_qdq": _images,
    "bert": _tokens,
    "bert_fused": _tokens,
    "bert_int8_dynamic": _tokens,
    "gpt2": _decoder_step,
    "lstm": _sequence,
}


def _median_seconds(function: Callable[[], Any], runs: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        function()
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def _session(path: Path) -> Any:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _arrays(outputs: dict[str, Any], names: list[str]) -> list[np.ndarray]:
    return [np.asarray(outputs[name].numpy()) for name in names]


def _check(name: str, ours: list[np.ndarray], reference: list[np.ndarray]) -> None:
    for got, expected in zip(ours, reference):
        scale = float(np.abs(expected).max()) if expected.size else 1.0
        if not np.allclose(got, expected, rtol=1e-3, atol=1e-3 * scale):
            raise AssertionError(f"{name}: kiln differs from onnxruntime by {np.abs(got - expected).max():.3g}")


def first_run(name: str, cold: bool) -> tuple[float, float]:
    """Seconds to load and run once at batch 1: kiln (disk compile cache off when `cold`), onnxruntime."""
    path = MODELS / f"{name}.onnx"
    feeds = WORKLOADS[name](1, np.random.default_rng(0))
    start = time.perf_counter()
    with Context(DISABLE_COMPILER_CACHE=cold):
        runner = OnnxRunner(path)
        _arrays(runner(feeds), runner.outputs)
    kiln = time.perf_counter() - start
    start = time.perf_counter()
    _session(path).run(None, feeds)
    return kiln, time.perf_counter() - start


def steady(name: str, batch: int, runs: int) -> tuple[float, float, float]:
    """Median seconds per call at `batch`: kiln plain, kiln under TinyJit, onnxruntime."""
    path = MODELS / f"{name}.onnx"
    feeds = WORKLOADS[name](batch, np.random.default_rng(batch))
    session = _session(path)
    reference = [np.asarray(value) for value in session.run(None, feeds)]
    runner = OnnxRunner(path)
    names = runner.outputs
    _check(f"{name} batch {batch}", _arrays(runner(feeds), names), reference)
    plain = _median_seconds(lambda: _arrays(runner(feeds), names), runs)
    jitted = TinyJit(lambda **inputs: runner(inputs))

    def jit_call() -> list[np.ndarray]:
        return _arrays(jitted(**{key: Tensor(value) for key, value in feeds.items()}), names)

    for _ in range(3):  # capture on the second call, replay from the third
        result = jit_call()
    _check(f"{name} batch {batch} (TinyJit)", result, reference)
    jit = _median_seconds(jit_call, runs)
    ort = _median_seconds(lambda: session.run(None, feeds), runs)
    return plain, jit, ort


def kernel_profile(name: str, batch: int, runs: int) -> None:
    """Prints each kernel of the model's TinyJit capture at `batch` with its process CPU time (both cores' work, so
    other load on the machine barely moves it), the median of `runs` launches of that kernel alone."""
    feeds = WORKLOADS[name](batch, np.random.default_rng(batch))
    runner = OnnxRunner(MODELS / f"{name}.onnx")
    jitted = TinyJit(lambda **inputs: runner(inputs))
    arguments = {key: Tensor(value) for key, value in feeds.items()}
    for _ in range(3):
        jitted(**arguments)
    assert jitted.captured is not None
    total = 0.0
    print(f"{name} batch {batch}: the captured kernels, process CPU time of one launch (median of {runs})")
    # workers that poll after a launch would count their polling as CPU time
    with Context(CPU_SPIN=0):
        for step in jitted.captured.steps:
            if step.runner is None:
                continue
            launch = ReplayStep(CapturedStep(step.runner, step.buffers, (), step.var_vals))
            timings = []
            for _ in range(runs):
                start = time.process_time()
                launch([], {})
                timings.append(time.process_time() - start)
            seconds = statistics.median(timings)
            total += seconds
            print(f"  {step.runner.name:<40}{1e3 * seconds:>9.3f} ms")
    print(f"  {'sum':<40}{1e3 * total:>9.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="timed runs per measurement (median)")
    parser.add_argument("--models", default=",".join(WORKLOADS), help="comma-separated model names")
    parser.add_argument("--warm-cache", action="store_true", help="first runs may read the compiler's disk cache")
    parser.add_argument(
        "--kernels", type=int, metavar="BATCH", help="instead: each kernel's CPU time under TinyJit at BATCH"
    )
    arguments = parser.parse_args()
    names = [name for name in arguments.models.split(",") if name]
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    if arguments.kernels is not None:
        for name in names:
            kernel_profile(name, arguments.kernels, arguments.runs)
        return
    print(f"onnxruntime {onnxruntime.__version__} CPU provider, {THREADS} threads; median of {arguments.runs} runs")
    header = (
        f"{'model':<20}{'batch':>6}{'kiln ms':>10}{'kiln jit ms':>13}{'ort ms':>10}{'jit/ort':>9}"
        f"{'first run kiln s':>18}{'ort s':>8}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        first_kiln, first_ort = first_run(name, cold=not arguments.warm_cache)
        for batch in (1, 16):
            plain, jit, ort = steady(name, batch, arguments.runs)
            first = f"{first_kiln:>18.2f}{first_ort:>8.2f}" if batch == 1 else ""
            print(
                f"{name:<20}{batch:>6}{1e3 * plain:>10.2f}{1e3 * jit:>13.2f}{1e3 * ort:>10.2f}{jit / ort:>9.2f}{first}",
                flush=True,
            )


if __name__ == "__main__":
    main()
