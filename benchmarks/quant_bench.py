"""Quantized matrix products of kiln.tensor.llm (`linear` on a GGUF weight) per weight format, against numpy's copy.

A (rows, cols) weight (default (32000, 768): the bench model's output layer) of random values is encoded per format
(F16, Q8_0, Q4_K, Q6_K by default: `--formats`; the K-quants by llm_bench's encoders; F16 as GGUF bytes decoded in
the kernel, as `load_model` reads an F16 file) and multiplied by `--tokens`
rows of input (default 1 and 64: a decode step's matrix-vector product and a prefill's batched product), each as a
TinyJit replay like the model's jitted steps. A one-row product is memory-bound: its figure is GB/s of the weight's
bytes, next to numpy's copy of as many bytes (`np.copyto`, counting the bytes read and written, measured in the same
round, interleaved) and the share of that copy rate it reaches (issue 42 asks >= 80% for every format). Batched
products print GFLOP/s and the same GB/s of weight bytes (one decode of the weight per call). The CPU columns
count process CPU time (all of kiln's threads; numpy's copy runs on one): `CPU ms` per call and `CPU share`, kiln's
weight bytes per CPU second over the copy's bytes per CPU second, which a machine busier than its cores distorts
less than wall time (run with CPU_SPIN=0, else kiln's polling workers count too).

    uv run python benchmarks/quant_bench.py [--rows 32000] [--cols 768] [--formats F16,Q8_0,Q4_K,Q6_K]
        [--tokens 1,64] [--rounds 3] [--repeats 15]

Each figure is the median over `--rounds` rounds of the fastest of `--repeats` calls (warm: compile and capture
happen before); the machine these run on is shared, so compare ratios of one run, not figures across runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import gguf
import numpy as np
from llm_bench import _encode

from kiln.tensor import Tensor, TinyJit
from kiln.tensor.llm.quantized import QuantizedWeight, Weight, linear
from kiln.tensor.state.quantization import dequantize


def weight_of(kind: str, values: np.ndarray) -> tuple[Weight, int]:
    """`values` encoded as ggml type `kind` into a kiln weight as `load_model` makes it from a GGUF file (F16: the
    bytes decoded lazily, in whatever kernel reads them), and its byte count."""
    ggml_type = gguf.GGMLQuantizationType[kind]
    if ggml_type == gguf.GGMLQuantizationType.F16:
        half = values.astype(np.float16)
        data = Tensor(half.view(np.uint8).reshape(-1)).realize()
        return dequantize(data, int(ggml_type), values.shape), half.nbytes
    raw = np.ascontiguousarray(_encode(values, ggml_type).reshape(-1))
    return QuantizedWeight(Tensor(raw).realize(), int(ggml_type), values.shape), raw.nbytes


def fastest_seconds(run: Callable[[], object], repeats: int) -> tuple[float, float]:
    """The fastest of `repeats` calls in wall time and in process CPU time (each minimum on its own): on a shared
    machine another process's load only ever slows a call down."""
    times, cpu_times = [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - started)
        cpu_times.append(time.process_time() - cpu_started)
    return min(times), min(cpu_times)


def product_runner(weight: Weight, tokens: int, cols: int) -> Callable[[], object]:
    """A warm TinyJit replay of `linear(x, weight)` for an input of `tokens` rows (compiled and captured here)."""
    x = Tensor(np.random.default_rng(tokens).standard_normal((1, tokens, cols)).astype(np.float32)).realize()
    step = TinyJit(lambda inputs: linear(inputs, weight).realize())
    for _ in range(3):
        step(x)
    return lambda: step(x)


def bench_format(kind: str, values: np.ndarray, tokens_list: list[int], rounds: int, repeats: int) -> None:
    weight, nbytes = weight_of(kind, values)
    source = np.ones(nbytes, np.uint8)
    target = np.empty_like(source)
    rows, cols = values.shape
    for tokens in tokens_list:
        run = product_runner(weight, tokens, cols)
        kiln_times, copy_times = [], []
        for _ in range(rounds):  # interleaved: each round's kiln and copy figures see the same load
            kiln_times.append(fastest_seconds(run, repeats))
            copy_times.append(fastest_seconds(lambda: np.copyto(target, source), repeats))
        seconds, copy_seconds = (statistics.median(wall for wall, _ in got) for got in (kiln_times, copy_times))
        cpu, copy_cpu = (statistics.median(cpu for _, cpu in got) for got in (kiln_times, copy_times))
        weight_rate, copy_rate = nbytes / seconds / 1e9, 2 * nbytes / copy_seconds / 1e9
        cpu_share = (nbytes / max(cpu, 1e-9)) / (2 * nbytes / max(copy_cpu, 1e-9))
        flops = 2 * rows * cols * tokens / seconds / 1e9
        print(
            f"| {kind:5} | {tokens:6} | {nbytes / 1e6:8.1f} | {seconds * 1e3:8.3f} | {weight_rate:7.2f} | "
            f"{copy_rate:7.2f} | {weight_rate / copy_rate:6.0%} | {cpu * 1e3:8.3f} | {cpu_share:6.0%} | {flops:8.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32000)
    parser.add_argument("--cols", type=int, default=768, help="a multiple of 256 (the K-quants' block)")
    parser.add_argument("--formats", default="F16,Q8_0,Q4_K,Q6_K", help="ggml type names")
    parser.add_argument("--tokens", default="1,64", help="input rows per product")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    arguments = parser.parse_args()
    if arguments.cols % 256:
        parser.error(f"--cols {arguments.cols} is not a multiple of 256 (the K-quants' block size)")
    values = np.random.default_rng(0).standard_normal((arguments.rows, arguments.cols), dtype=np.float32) * 0.02
    tokens_list = [int(part) for part in arguments.tokens.split(",")]
    rows, cols = arguments.rows, arguments.cols
    print(f"weight ({rows}, {cols}) times (tokens, {cols}); median of {arguments.rounds} rounds of the fastest call")
    print("| format | tokens | MB | ms | weight GB/s | copy GB/s (r+w) | share | CPU ms | CPU share | GFLOP/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind in arguments.formats.split(","):
        bench_format(kind, values, tokens_list, arguments.rounds, arguments.repeats)


if __name__ == "__main__":
    main()
