"""kiln.tensor on the CPU device against numpy, measured in the same run (issue 7's list).

    uv run python benchmarks/tensor_bench.py [--device CPU] [--quick]

Figures (median of several runs after a warm-up that builds and compiles every kernel):
- float32 matmul 512 / 1024 / 2048: GFLOP/s (numpy: its BLAS)
- fused chain exp2(relu(a*b+c)*0.5+a) over 16M float32: GB/s of the 4 arrays read and written (numpy: the same
  expression, which makes temporaries)
- sum over 16M float32, softmax over (4096, 1024): GB/s
- conv2d (32,16,32,32) x (32,16,3,3), padding 1: GFLOP/s (numpy: im2col + tensordot)
- first-call latency of a never-seen kernel: schedule + codegen + compile + run, in ms
- per-op cost of `x = x + 1` realized 1000 times on a 16-element tensor, in microseconds

Targets (issue 7): matmul 1024 >= 0.5x numpy, chain >= 2x numpy, sum/softmax >= 1x, conv2d >= 3x numpy's
im2col + tensordot, first call < 40 ms, per op < 100 us.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from kiln.runtime import Device
from kiln.tensor import Tensor


def _median_seconds(run: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _kiln_runner(build: Callable[[], Tensor], device: str) -> Callable[[], object]:
    def run() -> object:
        result = build().realize()
        Device[device].synchronize()
        return result

    return run


def _row(name: str, kiln_value: float, numpy_value: float, unit: str, target: str = "") -> None:
    ratio = kiln_value / numpy_value if numpy_value else float("nan")
    if unit in ("ms", "us"):
        ratio = numpy_value / kiln_value if kiln_value else float("nan")
    print(f"| {name:<42} | {kiln_value:10.2f} {unit:<7} | {numpy_value:10.2f} {unit:<7} | {ratio:6.2f}x | {target}")


def bench_matmul(device: str, size: int, repeats: int) -> None:
    rng = np.random.default_rng(0)
    a_values = rng.standard_normal((size, size)).astype(np.float32)
    b_values = rng.standard_normal((size, size)).astype(np.float32)
    a, b = Tensor(a_values, device=device), Tensor(b_values, device=device)
    flops = 2 * size**3
    kiln = _median_seconds(_kiln_runner(lambda: a @ b, device), repeats)
    reference = _median_seconds(lambda: a_values @ b_values, repeats)
    np.testing.assert_allclose((a @ b).numpy(), a_values @ b_values, rtol=1e-3, atol=1e-2)
    _row(f"matmul {size}", flops / kiln / 1e9, flops / reference / 1e9, "GFLOP/s", ">= 0.5x" if size == 1024 else "")


def bench_chain(device: str, elements: int, repeats: int) -> None:
    rng = np.random.default_rng(1)
    values = [rng.standard_normal(elements).astype(np.float32) for _ in range(3)]
    a, b, c = (Tensor(v, device=device) for v in values)

    def expression_numpy() -> np.ndarray:
        return np.exp2(np.maximum(values[0] * values[1] + values[2], 0) * np.float32(0.5) + values[0])

    moved = 4 * 4 * elements
    kiln = _median_seconds(_kiln_runner(lambda: ((a * b + c).relu() * 0.5 + a).exp2(), device), repeats)
    reference = _median_seconds(expression_numpy, repeats)
    np.testing.assert_allclose(((a * b + c).relu() * 0.5 + a).exp2().numpy(), expression_numpy(), rtol=1e-5)
    _row("chain exp2(relu(a*b+c)*0.5+a) 16M", moved / kiln / 1e9, moved / reference / 1e9, "GB/s", ">= 2x")


def bench_sum(device: str, elements: int, repeats: int) -> None:
    values = np.random.default_rng(2).standard_normal(elements).astype(np.float32)
    x = Tensor(values, device=device)
    kiln = _median_seconds(_kiln_runner(lambda: x.sum(), device), repeats)
    reference = _median_seconds(lambda: values.sum(), repeats)
    np.testing.assert_allclose(x.sum().numpy(), values.astype(np.float64).sum(), rtol=1e-3)
    _row("sum 16M", 4 * elements / kiln / 1e9, 4 * elements / reference / 1e9, "GB/s", ">= 1x")


def bench_softmax(device: str, repeats: int) -> None:
    values = np.random.default_rng(3).standard_normal((4096, 1024)).astype(np.float32)
    x = Tensor(values, device=device)

    def softmax_numpy() -> np.ndarray:
        shifted = np.exp(values - values.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)

    moved = 2 * 4 * values.size
    kiln = _median_seconds(_kiln_runner(lambda: x.softmax(-1), device), repeats)
    reference = _median_seconds(softmax_numpy, repeats)
    np.testing.assert_allclose(x.softmax(-1).numpy(), softmax_numpy(), rtol=1e-4, atol=1e-7)
    _row("softmax (4096, 1024)", moved / kiln / 1e9, moved / reference / 1e9, "GB/s", ">= 1x")


def _conv_numpy(images: np.ndarray, weights: np.ndarray) -> np.ndarray:
    kh, kw = weights.shape[2:]
    padded = np.pad(images, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))  # b c h w kh kw
    return np.tensordot(windows, weights, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


def bench_conv(device: str, repeats: int) -> None:
    rng = np.random.default_rng(4)
    images = rng.standard_normal((32, 16, 32, 32)).astype(np.float32)
    weights = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    x, w = Tensor(images, device=device), Tensor(weights, device=device)
    flops = 2 * 32 * 32 * 32 * 32 * 16 * 9
    kiln = _median_seconds(_kiln_runner(lambda: x.conv2d(w, padding=1), device), repeats)
    reference = _median_seconds(lambda: _conv_numpy(images, weights), repeats)
    np.testing.assert_allclose(x.conv2d(w, padding=1).numpy(), _conv_numpy(images, weights), rtol=1e-3, atol=1e-3)
    _row("conv2d (32,16,32,32)x(32,16,3,3)", flops / kiln / 1e9, flops / reference / 1e9, "GFLOP/s", ">= 3x")


def bench_first_call(device: str) -> None:
    # a kernel structure no earlier run built: a constant derived from the clock
    salt = float(time.time_ns() % 1_000_003) / 7.0
    x = Tensor(np.arange(64, dtype=np.float32), device=device)
    x.realize()
    start = time.perf_counter()
    ((x * salt + 1.0).relu() - salt).realize()
    Device[device].synchronize()
    kiln = (time.perf_counter() - start) * 1e3
    values = np.arange(64, dtype=np.float32)
    reference = _median_seconds(lambda: np.maximum(values * salt + 1, 0) - salt, 5) * 1e3
    _row("first call of a new kernel", kiln, reference, "ms", "< 40 ms")


def bench_per_op(device: str, steps: int) -> None:
    x = Tensor(np.zeros(16, np.float32), device=device)
    for _ in range(10):
        x = (x + 1).realize()
    Device[device].synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        x = (x + 1).realize()
    Device[device].synchronize()
    kiln = (time.perf_counter() - start) / steps * 1e6
    assert x.numpy()[0] == steps + 10
    values = np.zeros(16, np.float32)

    def numpy_steps() -> None:
        nonlocal values
        for _ in range(steps):
            values = values + 1

    reference = _median_seconds(numpy_steps, 3) / steps * 1e6
    _row("per-op x = x + 1 (16 elements)", kiln, reference, "us", "< 100 us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (a smoke run)")
    arguments = parser.parse_args()
    device = Device.canonicalize(arguments.device)
    quick = arguments.quick
    elements = 1 << (20 if quick else 24)
    repeats = 3 if quick else 5
    print(f"kiln.tensor on {device} vs numpy {np.__version__} (higher is better unless the unit is time)")
    print(f"| {'benchmark':<42} | {'kiln':>18} | {'numpy':>18} | ratio  | target")
    for size in (256,) if quick else (512, 1024, 2048):
        bench_matmul(device, size, 3 if size == 2048 else repeats)
    bench_chain(device, elements, repeats)
    bench_sum(device, elements, repeats)
    bench_softmax(device, repeats)
    bench_conv(device, repeats)
    bench_first_call(device)
    bench_per_op(device, 100 if quick else 1000)


if __name__ == "__main__":
    main()
