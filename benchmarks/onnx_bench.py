"""kiln.tensor.onnx against onnxruntime on the real-model fixtures of packages/tensor/tests/onnx/models (torch exports:
a ResNet-18-shaped CNN, a MobileNet-style CNN, a BERT-style encoder, a GPT-2-style decoder step with a KV cache, an
LSTM, and int8 models from onnxruntime's quantization tools), at batch 1 and 16.

    uv run python benchmarks/onnx_bench.py [--runs N] [--models resnet18,bert] [--warm-cache]

For each model and batch: kiln's OnnxRunner called plainly (from the third call with the same input shapes a plain
call replays the kernels OnnxRunner captured on the second: see kiln.tensor.onnx.replay_cache) and wrapped in TinyJit,
and onnxruntime's CPU provider (2 intra-op threads; kiln's CPU device uses the host's cores, 2 on the reference
machine), each the median of N timed runs after warm-up, outputs read back to numpy. Every kiln result is checked
against onnxruntime's first (rtol 1e-3: the int8 models may round a value a step apart). The "cpu" columns are the
process CPU time of one call (both cores' work), which other load on a shared machine barely moves, where wall time
there mostly measures the wait for a core. Neither side's idle threads poll for work there (polling counts as CPU
time): kiln's core-pool workers sleep at once (CPU_SPIN=0, for the whole run unless --spin) and onnxruntime's
session for the cpu column has `allow_spinning` 0. "kernels" is the TinyJit capture's launches at that batch and
the distinct programs among them. "first run" is loading the file and the first call at batch 1, with the
compiler's disk cache off (--warm-cache keeps it on), next to onnxruntime's session creation and first run; "load s"
is its OnnxRunner(path) part, "codegen s" its share spent building kernels (lowering, rendering, the C compiler and
loading), "cc s" the C compiler's part of that, and "built" how many programs it built.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime  # type: ignore[import-untyped]

from kiln.codegen.compiler import Compiler
from kiln.tensor import Tensor, TinyJit
from kiln.tensor.jit_replay import CapturedStep, ReplayStep
from kiln.tensor.onnx import OnnxRunner
from kiln.tensor.realize.engine import Engine, use_engine
from kiln.uops import Context, sym_infer

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


def _median_seconds(
    function: Callable[[], Any], runs: int, warmup: int = 2, clock: Callable[[], float] = time.perf_counter
) -> float:
    for _ in range(warmup):
        function()
    timings = []
    for _ in range(runs):
        start = clock()
        function()
        timings.append(clock() - start)
    return statistics.median(timings)


def _session(path: Path, spinning: bool = True) -> Any:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _arrays(outputs: dict[str, Any], names: list[str]) -> list[np.ndarray]:
    return [np.asarray(outputs[name].numpy()) for name in names]


def _check(name: str, ours: list[np.ndarray], reference: list[np.ndarray]) -> None:
    for got, expected in zip(ours, reference):
        scale = float(np.abs(expected).max()) if expected.size else 1.0
        if not np.allclose(got, expected, rtol=1e-3, atol=1e-3 * scale):
            raise AssertionError(f"{name}: kiln differs from onnxruntime by {np.abs(got - expected).max():.3g}")


@dataclass
class FirstRun:
    kiln: float  # seconds: load, translate, schedule, build every kernel, run
    load: float  # of which OnnxRunner(path): parse, check, fold batch norms, read the initializers
    codegen: float  # of which building kernels (Engine.build_programs and compiled_program)
    cc: float  # of which the C compiler (Compiler.compile_cached)
    built: int  # programs built
    ort: float  # onnxruntime's session creation and first run


@contextmanager
def _timed(owner: type, method: str, totals: list[float]) -> Iterator[None]:
    """Adds the seconds spent in `owner.method` to totals[0] inside the block (an instrument of this script only)."""
    original = getattr(owner, method)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[0] += time.perf_counter() - start

    setattr(owner, method, timed)
    try:
        yield
    finally:
        setattr(owner, method, original)


def first_run(name: str, cold: bool) -> FirstRun:
    """Seconds to load and run once at batch 1: kiln (disk compile cache off when `cold`), onnxruntime."""
    path = MODELS / f"{name}.onnx"
    feeds = WORKLOADS[name](1, np.random.default_rng(0))
    codegen, cc = [0.0], [0.0]
    engine = Engine()
    start = time.perf_counter()
    # a plan's first run builds its kernels together (build_programs); a kernel run alone builds its own
    together, alone = _timed(Engine, "build_programs", codegen), _timed(Engine, "compiled_program", codegen)
    with (
        Context(DISABLE_COMPILER_CACHE=cold),
        together,
        alone,
        _timed(Compiler, "compile_cached", cc),
        use_engine(engine),
    ):
        runner = OnnxRunner(path)
        load = time.perf_counter() - start
        _arrays(runner(feeds), runner.outputs)
    kiln = time.perf_counter() - start
    start = time.perf_counter()
    _session(path).run(None, feeds)
    return FirstRun(kiln, load, codegen[0], cc[0], engine.programs_built, time.perf_counter() - start)


@dataclass
class Steady:
    plain: float  # seconds per call, wall: kiln plain, kiln TinyJit, onnxruntime
    jit: float
    ort: float
    jit_cpu: float  # process CPU seconds per call: kiln TinyJit, onnxruntime without spinning threads
    ort_cpu: float
    kernels: int  # launches of the TinyJit capture
    programs: int  # distinct programs among them


def steady(name: str, batch: int, runs: int) -> Steady:
    """Per call at `batch`: kiln plain, kiln under TinyJit, onnxruntime (wall and CPU time), kernel counts."""
    path = MODELS / f"{name}.onnx"
    feeds = WORKLOADS[name](batch, np.random.default_rng(batch))
    session = _session(path)
    quiet = _session(path, spinning=False)
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
    assert jitted.captured is not None
    runners = [step.runner for step in jitted.captured.steps if step.runner is not None]
    jit = _median_seconds(jit_call, runs)
    ort = _median_seconds(lambda: session.run(None, feeds), runs)
    jit_cpu = _median_seconds(jit_call, runs, clock=time.process_time)
    ort_cpu = _median_seconds(lambda: quiet.run(None, feeds), runs, clock=time.process_time)
    programs = len({id(getattr(launcher, "program", launcher)) for launcher in runners})
    return Steady(plain, jit, ort, jit_cpu, ort_cpu, len(runners), programs)


def kernel_profile(name: str, batch: int, runs: int) -> None:
    """Prints each kernel of the model's TinyJit capture at `batch` with its process CPU time (both cores' work, so
    other load on the machine barely moves it), the median of `runs` launches of that kernel alone, and its GFLOP
    per second of that CPU time (codegen's flop estimate of the program)."""
    feeds = WORKLOADS[name](batch, np.random.default_rng(batch))
    runner = OnnxRunner(MODELS / f"{name}.onnx")
    jitted = TinyJit(lambda **inputs: runner(inputs))
    arguments = {key: Tensor(value) for key, value in feeds.items()}
    for _ in range(3):
        jitted(**arguments)
    assert jitted.captured is not None
    total = 0.0
    print(f"{name} batch {batch}: the captured kernels, process CPU time of one launch (median of {runs})")
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
        program = getattr(step.runner, "program", None)
        flops = 0 if program is None else sym_infer(program.estimates.flops, step.var_vals or {})
        # per second of process CPU time: both cores' work, so a kernel on two cores shows half its wall rate
        rate = f"{flops / max(seconds, 1e-9) / 1e9:>9.2f} GFLOP/s (cpu)" if flops else ""
        print(f"  {step.runner.name:<40}{1e3 * seconds:>9.3f} ms{rate}")
    print(f"  {'sum':<40}{1e3 * total:>9.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="timed runs per measurement (median)")
    parser.add_argument("--models", default=",".join(WORKLOADS), help="comma-separated model names")
    parser.add_argument("--warm-cache", action="store_true", help="first runs may read the compiler's disk cache")
    parser.add_argument("--spin", action="store_true", help="kiln's idle core-pool workers poll (CPU_SPIN default)")
    parser.add_argument(
        "--kernels", type=int, metavar="BATCH", help="instead: each kernel's CPU time under TinyJit at BATCH"
    )
    arguments = parser.parse_args()
    names = [name for name in arguments.models.split(",") if name]
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    # read when kiln's CPU device starts its core pool, i.e. at the first kernel
    with Context(CPU_SPIN=1000 if arguments.spin else 0):
        if arguments.kernels is not None:
            for name in names:
                kernel_profile(name, arguments.kernels, arguments.runs)
        else:
            _table(names, arguments.runs, arguments.warm_cache)


def _table(names: list[str], runs: int, warm_cache: bool) -> None:
    print(f"onnxruntime {onnxruntime.__version__} CPU provider, {THREADS} threads; median of {runs} runs")
    header = (
        f"{'model':<18}{'batch':>6}{'kiln ms':>9}{'jit ms':>9}{'ort ms':>9}{'jit cpu':>9}{'ort cpu':>9}"
        f"{'cpu ratio':>10}{'kernels':>10}   first run: {'kiln s':>7}{'load s':>7}{'codegen s':>10}{'cc s':>7}"
        f"{'built':>6}{'ort s':>7}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        first = first_run(name, cold=not warm_cache)
        for batch in (1, 16):
            run = steady(name, batch, runs)
            line = (
                f"{name:<18}{batch:>6}{1e3 * run.plain:>9.2f}{1e3 * run.jit:>9.2f}{1e3 * run.ort:>9.2f}"
                f"{1e3 * run.jit_cpu:>9.2f}{1e3 * run.ort_cpu:>9.2f}{run.jit_cpu / run.ort_cpu:>10.2f}"
                f"{f'{run.kernels}/{run.programs}':>10}"
            )
            if batch == 1:
                line += f"{'':>14}{first.kiln:>7.2f}{first.load:>7.2f}{first.codegen:>10.2f}{first.cc:>7.2f}"
                line += f"{first.built:>6}{first.ort:>7.2f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
