"""kiln.tensor on the CPU device against numpy and (when a Python with torch / jax is given) torch eager and JAX's
jit on XLA's CPU backend, measured in the same run (issues 7, 16 and 42).

    uv run python benchmarks/tensor_bench.py [--device CPU] [--quick] [--torch-python /path/to/torch-venv/bin/python]
        [--jax-python /path/to/a-python-with-jax (default: the --torch-python one)]

Figures are medians of several runs after a warm-up (at least 0.25 s of the same work, which also builds and compiles
every kernel; numpy and torch get the same); kiln's figure is the wall-clock time of building the lazy graph,
scheduling it and running its kernels. torch runs in a subprocess on
the same shapes (its own random data) with its default threads and times each row right after kiln's run of it (the
same load on a shared machine); its gradients go through `torch.nn.grad` (no forward pass). Rows:
- float32 matmul 512 / 1024 / 2048 and batched (8, 512, 512) @ (8, 512, 512): GFLOP/s (numpy: its BLAS); at 1024 also
  a transposed right operand (A @ B.T) and a transposed left one (A.T @ B), a single row times the matrix
  (1, 1024) @ (1024, 1024), a narrow right operand (1024, 16), and float16 / bfloat16 inputs accumulated in
  float32 (numpy: float32 on the same values; torch: the same dtype)
- a language model's prefill products x @ W.T: 64 rows of x against a (32000, 768), (2048, 768) and (768, 2048)
  weight (the 100M llama's output layer and feed-forward projections), the weight float32 or float16 read as
  float32 (`x @ W.float().T`, as kiln.tensor.llm's linear does): GFLOP/s (numpy and torch: the same expression;
  `--only prefill` runs these rows alone)
- fused chain exp2(relu(a*b+c)*0.5+a) over 16M float32: GB/s of the 4 arrays read and written
- sum over 16M float32; softmax, log_softmax and layer_norm over (4096, 1024): GB/s (input read + output written)
- conv2d (32,16,32,32) x (32,16,3,3), padding 1, and its input and weight gradients: GFLOP/s (numpy: im2col +
  tensordot); max_pool2d 2x2 over (32,16,32,32) with its input gradient: GB/s
- first-call latency of a never-seen kernel (schedule + codegen + compile + run; the median over five new kernels),
  in ms; per-op cost of `x = x + 1` realized on a 16-element tensor, in microseconds (the median of five runs of
  1000 ops after the warm-up)
- the quickstart's training step (MLP 2-64-64-2 on 400 points, cross-entropy, backward, gradient clipping, SGD with
  momentum) without the JIT, in ms (torch: the same step in eager mode), and the Python time of that step: the
  step without the JIT minus the same step replayed by TinyJit (the kernels are the same, so the difference is
  scheduling and launching from Python)
- train_bench.py's training steps (the small CNN on a (128, 1, 28, 28) batch; a ResNet basic block with BatchNorm
  in training mode on a (32, 16, 16, 16) batch), each updated by `optim.SGD` and by the per-parameter loop
  `p.assign(p.detach() - p.grad * lr)`, without the JIT and with TinyJit, in ms (torch: its eager step with
  `optim.SGD`; JAX: the whole step as one `jax.jit`, against kiln's TinyJit rows only)

JAX's column (benchmarks/jax_peer.py) covers the square matmuls, softmax / log_softmax / layer_norm, the conv rows
and the jitted steps; it is skipped, with a message, when no Python with jax is given.
The target column quotes issue 16 (issue 7's where 16 has none); "vs numpy" and "vs torch" are kiln's speed ratio
(higher is better; for times the inverse ratio).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import textwrap
import time
from collections.abc import Callable

import numpy as np
from jax_peer import JaxReference, PeerProcess
from jax_peer import start as start_jax
from mlp_step import mlp_step
from train_bench import MODELS, TORCH_STEPS, step_runner

from kiln.runtime import Device
from kiln.tensor import Tensor

CONV_IMAGES, CONV_WEIGHTS = (32, 16, 32, 32), (32, 16, 3, 3)
CONV_FLOPS = 2 * 32 * 32 * 32 * 32 * 16 * 9
NORM_SHAPE = (4096, 1024)


WARMUP_SECONDS = 0.25
"""Every figure is measured after at least this long of running the same work: on this shared 2-core VM a
two-thread kernel reaches its speed only after ~20 ms of both cores being busy (a 16M sum read 22 GB/s on its
first calls, 33-35 once warm), and numpy and torch get the same warm-up."""


def _median_seconds(
    run: Callable[[], object], repeats: int, warmup: int = 1, clock: Callable[[], float] = time.perf_counter
) -> float:
    started = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - started < WARMUP_SECONDS:
        run()
        done += 1
    times = []
    for _ in range(repeats):
        start = clock()
        run()
        times.append(clock() - start)
    return statistics.median(times)


def _kiln_runner(build: Callable[[], Tensor], device: str) -> Callable[[], object]:
    def run() -> object:
        result = build().realize()
        Device[device].synchronize()
        return result

    return run


TORCH_SCRIPT = TORCH_STEPS + textwrap.dedent(
    """
    import json, statistics, sys, time
    repeats, elements = int(sys.argv[1]), int(sys.argv[2])
    def median(run):
        started = time.perf_counter()
        run()
        while time.perf_counter() - started < 0.25:  # the warm-up kiln's and numpy's figures get too
            run()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    def steps(t):
        for _ in range(100):
            t = t + 1
        return t
    def case(key):
        r = torch.randn
        if key.startswith("matmul ") and key.split()[1].isdigit():
            size = int(key.split()[1])
            a, b = r(size, size), r(size, size)
            return lambda: a @ b
        if key.startswith("matmul T "):
            size = int(key.split()[2])
            a, b = r(size, size), r(size, size)
            return lambda: a @ b.T
        if key.startswith("matmul TL "):
            size = int(key.split()[2])
            a, b = r(size, size), r(size, size)
            return lambda: a.T @ b
        if key.startswith("matmul narrow "):
            size = int(key.split()[2])
            a, b = r(size, size), r(size, 16)
            return lambda: a @ b
        if key.startswith("matmul vector "):
            size = int(key.split()[2])
            a, b = r(1, size), r(size, size)
            return lambda: a @ b
        if key.startswith("matmul float16 ") or key.startswith("matmul bfloat16 "):
            size = int(key.split()[2])
            dtype = torch.float16 if "float16" == key.split()[1] else torch.bfloat16
            a, b = r(size, size).to(dtype), r(size, size).to(dtype)
            return lambda: a @ b
        if key.startswith("matmul prefill "):
            _, _, rows, columns, inner, name = key.split()
            x = r(int(rows), int(inner))
            w = r(int(columns), int(inner)).to(getattr(torch, name))
            return lambda: x @ w.float().T
        if key == "batched matmul":
            a, b = r(8, 512, 512), r(8, 512, 512)
            return lambda: a @ b
        if key in ("chain", "sum"):
            a, b, c = r(elements), r(elements), r(elements)
            return (lambda: torch.exp2(torch.relu(a * b + c) * 0.5 + a)) if key == "chain" else (lambda: a.sum())
        x = r(4096, 1024)
        if key == "softmax":
            return lambda: torch.softmax(x, -1)
        if key == "log_softmax":
            return lambda: torch.log_softmax(x, -1)
        if key == "layer_norm":
            return lambda: torch.nn.functional.layer_norm(x, (1024,))
        images, weights, grad = r(32, 16, 32, 32), r(32, 16, 3, 3), r(32, 32, 32, 32)
        if key == "conv2d":
            return lambda: torch.nn.functional.conv2d(images, weights, padding=1)
        if key == "conv2d input grad":
            return lambda: torch.nn.grad.conv2d_input(images.shape, weights, grad, padding=1)
        if key == "conv2d weight grad":
            return lambda: torch.nn.grad.conv2d_weight(images, weights.shape, grad, padding=1)
        if key == "max_pool2d backward":
            source, upstream = r(32, 16, 32, 32, requires_grad=True), r(32, 16, 16, 16)
            def pool_grad():
                with torch.enable_grad():
                    pooled = torch.nn.functional.max_pool2d(source, 2)
                    return torch.autograd.grad(pooled, source, upstream)[0]
            return pool_grad
        if key == "per-op":
            t = torch.zeros(16)
            return lambda: steps(t)
        if key == "mlp step":
            return mlp_step()
        if key in ("cnn step", "resblock step"):
            return torch_step(key.split()[0])
        return None
    def mlp_step():
        x, y = torch.randn(400, 2), torch.randint(0, 2, (400,))
        model = torch.nn.Sequential(
            torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
        def step():
            with torch.enable_grad():
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                optimizer.step()
                return loss.item()
        return step
    print(json.dumps({"version": torch.__version__, "threads": torch.get_num_threads()}), flush=True)
    with torch.no_grad():
        for line in sys.stdin:
            run = case(line.strip())
            seconds = None if run is None else median(run) / (100 if line.strip() == "per-op" else 1)
            print(json.dumps(seconds), flush=True)
    """
)


class TorchReference(PeerProcess):
    """torch eager in a subprocess (`python` has torch)."""

    name = "torch"

    def __init__(self, python: str, repeats: int, elements: int) -> None:
        super().__init__(python, TORCH_SCRIPT, repeats, elements)


class Table:
    """Prints rows of kiln's figure beside numpy's, torch's and JAX's, with kiln's speed ratio against each."""

    def __init__(self, torch: TorchReference | None, jax: JaxReference | None = None) -> None:
        self.torch = torch
        self.jax = jax

    def row(
        self,
        name: str,
        key: str,
        kiln: float,
        numpy: float | None,
        amount: float,
        unit: str,
        target: str,
        jax_key: str | None = "",
    ) -> None:
        """One row; `kiln`, `numpy` and the peers' figures are seconds, shown as `amount` / seconds in `unit`
        (GFLOP/s, GB/s) or as milliseconds / microseconds when `unit` is "ms" / "us" (then `amount` is ignored).
        torch's figure is its row `key`, JAX's its row `jax_key` (`key` when empty, none when None)."""
        reference = self.torch.seconds(key) if self.torch is not None else None
        jax_row = key if jax_key == "" else jax_key
        jax = self.jax.seconds(jax_row) if self.jax is not None and jax_row is not None else None

        def shown(seconds: float | None) -> str:
            if seconds is None:
                return f"{'-':>10} {unit:<7}"
            value = seconds * (1e3 if unit == "ms" else 1e6) if unit in ("ms", "us") else amount / seconds / 1e9
            return f"{value:10.2f} {unit:<7}"

        def ratio(other: float | None) -> str:
            return f"{other / kiln:7.2f}x" if other is not None else f"{'-':>8}"

        figures = f"{shown(kiln)} | {shown(numpy)} | {shown(reference)} | {shown(jax)}"
        print(f"| {name:<40} | {figures} | {ratio(numpy)} | {ratio(reference)} | {ratio(jax)} | {target}")


def bench_matmul(table: Table, device: str, size: int, repeats: int) -> None:
    rng = np.random.default_rng(0)
    a_values = rng.standard_normal((size, size)).astype(np.float32)
    b_values = rng.standard_normal((size, size)).astype(np.float32)
    a, b = Tensor(a_values, device=device), Tensor(b_values, device=device)
    kiln = _median_seconds(_kiln_runner(lambda: a @ b, device), repeats)
    reference = _median_seconds(lambda: a_values @ b_values, repeats)
    np.testing.assert_allclose((a @ b).numpy(), a_values @ b_values, rtol=1e-3, atol=1e-2)
    target = ">= 0.9x numpy" if size in (1024, 2048) else ""
    table.row(f"matmul {size}", f"matmul {size}", kiln, reference, 2 * size**3, "GFLOP/s", target)


def bench_batched_matmul(table: Table, device: str, repeats: int) -> None:
    rng = np.random.default_rng(5)
    a_values, b_values = (rng.standard_normal((8, 512, 512)).astype(np.float32) for _ in range(2))
    a, b = Tensor(a_values, device=device), Tensor(b_values, device=device)
    kiln = _median_seconds(_kiln_runner(lambda: a @ b, device), repeats)
    reference = _median_seconds(lambda: a_values @ b_values, repeats)
    np.testing.assert_allclose((a @ b).numpy(), a_values @ b_values, rtol=1e-3, atol=1e-2)
    table.row(
        "matmul (8,512,512)@(8,512,512)", "batched matmul", kiln, reference, 2 * 8 * 512**3, "GFLOP/s", ">= 0.8x numpy"
    )


PREFILL_SHAPES = ((64, 32000, 768), (64, 2048, 768), (64, 768, 2048))
"""(rows, out_features, in_features) of the prefill rows: x (rows, in) @ W.T with W (out, in)."""


def bench_prefill(table: Table, device: str, repeats: int, quick: bool) -> None:
    """x @ W.float().T for a prompt of 64 rows against the 100M llama's weights, float32 and float16 (issue 42's
    prefill products; numpy: float32 on the same values)."""
    rng = np.random.default_rng(11)
    for rows, columns, inner in PREFILL_SHAPES[1:] if quick else PREFILL_SHAPES:
        x_values = rng.standard_normal((rows, inner)).astype(np.float32)
        x = Tensor(x_values, device=device)
        for name in ("float32", "float16"):
            w_values = (rng.standard_normal((columns, inner)) * 0.05).astype(name)
            w = Tensor(w_values, device=device)
            wide = w_values.astype(np.float32)
            kiln = _median_seconds(_kiln_runner(lambda x=x, w=w: x @ w.float().T, device), repeats)
            reference = _median_seconds(lambda x=x_values, w=w_values: x @ np.asarray(w, np.float32).T, repeats)
            expected = x_values @ wide.T
            got = (x @ w.float().T).numpy()
            np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3 * float(np.abs(expected).max()))
            table.row(
                f"prefill ({rows},{inner}) @ ({columns},{inner}).T {name[:1]}{name[-2:]}",
                f"matmul prefill {rows} {columns} {inner} {name}",
                kiln,
                reference,
                2 * rows * columns * inner,
                "GFLOP/s",
                ">= 150 GFLOP/s",
                None,
            )


def bench_matmul_variants(table: Table, device: str, size: int, repeats: int) -> None:
    """The matmul shapes and dtypes that must not fall off a cliff: a transposed right or left operand, one row times
    the matrix (a vector-matrix product), a small right operand (n columns = 16), and float16 / bfloat16 inputs
    accumulated in float32 (numpy: its float32 matmul on the same values; torch: the same dtype)."""
    from kiln.tensor import dtypes

    rng = np.random.default_rng(7)
    a_values = rng.standard_normal((size, size)).astype(np.float32)
    b_values = rng.standard_normal((size, size)).astype(np.float32)
    narrow_values = rng.standard_normal((size, 16)).astype(np.float32)
    a, b = Tensor(a_values, device=device), Tensor(b_values, device=device)
    narrow = Tensor(narrow_values, device=device)
    flops = 2 * size**3
    cases: list[tuple[str, str, Callable[[], Tensor], Callable[[], np.ndarray], int, float]] = [
        (
            f"matmul {size} @ transposed",
            f"matmul T {size}",
            lambda: a @ b.T,
            lambda: a_values @ b_values.T,
            flops,
            1e-3,
        ),
        (
            f"matmul transposed @ {size}",
            f"matmul TL {size}",
            lambda: a.T @ b,
            lambda: a_values.T @ b_values,
            flops,
            1e-3,
        ),
        (
            f"matmul (1,{size}) @ {size}",
            f"matmul vector {size}",
            lambda: a[:1] @ b,
            lambda: a_values[:1] @ b_values,
            2 * size * size,
            1e-3,
        ),
        (
            f"matmul {size} @ ({size},16)",
            f"matmul narrow {size}",
            lambda: a @ narrow,
            lambda: a_values @ narrow_values,
            2 * size * size * 16,
            1e-3,
        ),
    ]
    for dtype, name, short in ((dtypes.float16, "float16", "f16"), (dtypes.bfloat16, "bfloat16", "bf16")):
        low_a, low_b = a.cast(dtype).realize(), b.cast(dtype).realize()
        # the reference values: the low-precision inputs, widened, multiplied in float32
        wide_a, wide_b = low_a.float().numpy(), low_b.float().numpy()
        cases.append(
            (
                f"matmul {size} {short} in, f32 accumulate",
                f"matmul {name} {size}",
                lambda low_a=low_a, low_b=low_b: low_a @ low_b,
                lambda wide_a=wide_a, wide_b=wide_b: wide_a @ wide_b,
                flops,
                2e-2 if name == "bfloat16" else 2e-3,
            )
        )
    for name, key, build, numpy_version, amount, tolerance in cases:
        kiln = _median_seconds(_kiln_runner(build, device), repeats)
        reference = _median_seconds(numpy_version, repeats)
        expected = numpy_version()
        np.testing.assert_allclose(
            build().float().numpy(), expected, rtol=tolerance, atol=tolerance * float(np.abs(expected).max())
        )
        # a vector-matrix product reads 4 bytes per 2 flops: memory-bound, its GFLOP/s are not a matmul's
        target = "measured" if key.startswith("matmul vector") else "no cliff vs matmul"
        table.row(name, key, kiln, reference, amount, "GFLOP/s", target)


def bench_chain(table: Table, device: str, elements: int, repeats: int) -> None:
    rng = np.random.default_rng(1)
    values = [rng.standard_normal(elements).astype(np.float32) for _ in range(3)]
    a, b, c = (Tensor(v, device=device) for v in values)

    def expression_numpy() -> np.ndarray:
        return np.exp2(np.maximum(values[0] * values[1] + values[2], 0) * np.float32(0.5) + values[0])

    kiln = _median_seconds(_kiln_runner(lambda: ((a * b + c).relu() * 0.5 + a).exp2(), device), repeats)
    reference = _median_seconds(expression_numpy, repeats)
    np.testing.assert_allclose(((a * b + c).relu() * 0.5 + a).exp2().numpy(), expression_numpy(), rtol=1e-5)
    table.row("chain exp2(relu(a*b+c)*0.5+a) 16M", "chain", kiln, reference, 16 * elements, "GB/s", ">= 5x numpy")


def bench_sum(table: Table, device: str, elements: int, repeats: int) -> None:
    values = np.random.default_rng(2).standard_normal(elements).astype(np.float32)
    x = Tensor(values, device=device)
    kiln = _median_seconds(_kiln_runner(lambda: x.sum(), device), repeats)
    reference = _median_seconds(lambda: values.sum(), repeats)
    np.testing.assert_allclose(x.sum().numpy(), values.astype(np.float64).sum(), rtol=1e-3)
    table.row("sum 16M", "sum", kiln, reference, 4 * elements, "GB/s", ">= 30 GB/s")


def _softmax_numpy(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - values.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _log_softmax_numpy(values: np.ndarray) -> np.ndarray:
    shifted = values - values.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _layer_norm_numpy(values: np.ndarray) -> np.ndarray:
    mean = values.mean(axis=-1, keepdims=True)
    return (values - mean) / np.sqrt(values.var(axis=-1, keepdims=True) + 1e-5)


def bench_rows(table: Table, device: str, repeats: int) -> None:
    """softmax, log_softmax and layer_norm over the last axis of (4096, 1024)."""
    values = np.random.default_rng(3).standard_normal(NORM_SHAPE).astype(np.float32)
    x = Tensor(values, device=device)
    cases: tuple[tuple[str, Callable[[], Tensor], Callable[[np.ndarray], np.ndarray]], ...] = (
        ("softmax", lambda: x.softmax(-1), _softmax_numpy),
        ("log_softmax", lambda: x.log_softmax(-1), _log_softmax_numpy),
        ("layer_norm", lambda: x.layer_norm(1024), _layer_norm_numpy),
    )
    for name, build, numpy_version in cases:
        kiln = _median_seconds(_kiln_runner(build, device), repeats)
        reference = _median_seconds(functools.partial(numpy_version, values), repeats)
        np.testing.assert_allclose(build().numpy(), numpy_version(values), rtol=1e-4, atol=1e-5)
        table.row(f"{name} (4096, 1024)", name, kiln, reference, 8 * values.size, "GB/s", ">= 1x torch")


def _windows(images: np.ndarray) -> np.ndarray:
    padded = np.pad(images, ((0, 0), (0, 0), (1, 1), (1, 1)))
    return np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # b c h w kh kw


def _conv_numpy(images: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return np.tensordot(_windows(images), weights, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


def _conv_input_grad_numpy(grad: np.ndarray, weights: np.ndarray) -> np.ndarray:
    # col2im: every output pixel's gradient spread back over the 3x3 window it read
    columns = np.tensordot(grad, weights, axes=([1], [0]))  # b h w c kh kw
    height, width = grad.shape[2:]
    padded = np.zeros((grad.shape[0], weights.shape[1], height + 2, width + 2), np.float32)
    for ky in range(3):
        for kx in range(3):
            padded[:, :, ky : ky + height, kx : kx + width] += columns[..., ky, kx].transpose(0, 3, 1, 2)
    return padded[:, :, 1:-1, 1:-1]


def _conv_weight_grad_numpy(images: np.ndarray, grad: np.ndarray) -> np.ndarray:
    return np.tensordot(grad, _windows(images), axes=([0, 2, 3], [0, 2, 3]))  # o c kh kw


def bench_conv(table: Table, device: str, repeats: int) -> None:
    """conv2d forward, and its input and weight gradients (each without the others)."""
    rng = np.random.default_rng(4)
    images = rng.standard_normal(CONV_IMAGES).astype(np.float32)
    weights = rng.standard_normal(CONV_WEIGHTS).astype(np.float32)
    grad_values = rng.standard_normal((32, 32, 32, 32)).astype(np.float32)
    x, w, grad = (Tensor(v, device=device).realize() for v in (images, weights, grad_values))
    # the tensors differentiated against live on the device already (torch's conv2d_input / conv2d_weight copy
    # nothing from the host either); `gradient` builds the gradient graph without accumulating into `.grad`
    source = Tensor(images, device=device, requires_grad=True).realize()
    kernel = Tensor(weights, device=device, requires_grad=True).realize()

    def input_grad() -> Tensor:
        return source.conv2d(w, padding=1).gradient(source, gradient=grad)[0]

    def weight_grad() -> Tensor:
        return x.conv2d(kernel, padding=1).gradient(kernel, gradient=grad)[0]

    cases: tuple[tuple[str, Callable[[], Tensor], Callable[[], np.ndarray], str], ...] = (
        ("conv2d", lambda: x.conv2d(w, padding=1), lambda: _conv_numpy(images, weights), ">= 0.8x torch"),
        ("conv2d input grad", input_grad, lambda: _conv_input_grad_numpy(grad_values, weights), ">= 1x torch"),
        ("conv2d weight grad", weight_grad, lambda: _conv_weight_grad_numpy(images, grad_values), ">= 1x torch"),
    )
    for name, build, numpy_version, target in cases:
        kiln = _median_seconds(_kiln_runner(build, device), repeats)
        reference = _median_seconds(numpy_version, repeats)
        np.testing.assert_allclose(build().numpy(), numpy_version(), rtol=1e-3, atol=1e-2)
        table.row(f"{name} (32,16,32,32)", name, kiln, reference, CONV_FLOPS, "GFLOP/s", target)


def _max_pool_grad_numpy(images: np.ndarray, grad: np.ndarray) -> np.ndarray:
    # each 2x2 window's gradient goes to its maximum (random data: no ties)
    b, c, h, w = images.shape
    windows = images.reshape(b, c, h // 2, 2, w // 2, 2)
    hits = windows == windows.max(axis=(3, 5), keepdims=True)
    return (hits * grad[:, :, :, None, :, None]).reshape(b, c, h, w).astype(np.float32)


def bench_max_pool_backward(table: Table, device: str, repeats: int) -> None:
    """max_pool2d(2) over (32, 16, 32, 32) and its input gradient, computed together (the gradient needs the
    forward's maxima; torch: `autograd.grad` through `max_pool2d`; JAX: `jax.vjp`, jitted); GB/s of the input,
    the upstream gradient and the result."""
    rng = np.random.default_rng(6)
    images = rng.standard_normal(CONV_IMAGES).astype(np.float32)
    grad_values = rng.standard_normal((32, 16, 16, 16)).astype(np.float32)
    source = Tensor(images, device=device, requires_grad=True).realize()
    grad = Tensor(grad_values, device=device).realize()

    def build() -> Tensor:
        return source.max_pool2d(2).gradient(source, gradient=grad)[0]

    kiln = _median_seconds(_kiln_runner(build, device), repeats)
    reference = _median_seconds(lambda: _max_pool_grad_numpy(images, grad_values), repeats)
    np.testing.assert_allclose(build().numpy(), _max_pool_grad_numpy(images, grad_values), rtol=1e-6)
    amount = 4 * (2 * images.size + grad_values.size)
    table.row(
        "max_pool2d 2x2 backward (32,16,32,32)", "max_pool2d backward", kiln, reference, amount, "GB/s", ">= 1x torch"
    )


def bench_first_call(table: Table, device: str) -> None:
    # kernel structures no earlier run built (a constant derived from the clock, so no disk cache holds them), five
    # of them (one length each: a new structure, not a lifted constant of the last one); the median of their times
    salt = float(time.time_ns() % 1_000_003) / 7.0
    times = []
    for length in range(64, 69):
        x = Tensor(np.arange(length, dtype=np.float32), device=device)
        x.realize()
        Device[device].synchronize()
        start = time.perf_counter()
        ((x * salt + 1.0).relu() - salt).realize()
        Device[device].synchronize()
        times.append(time.perf_counter() - start)
    kiln = statistics.median(times)
    values = np.arange(64, dtype=np.float32)
    reference = _median_seconds(lambda: np.maximum(values * salt + 1, 0) - salt, 5)
    table.row("first call of a new kernel", "first call", kiln, reference, 0, "ms", "<= 40 ms")


def bench_per_op(table: Table, device: str, steps: int) -> None:
    x = Tensor(np.zeros(16, np.float32), device=device)
    done = 0
    started = time.perf_counter()
    while done < 10 or time.perf_counter() - started < WARMUP_SECONDS:  # the same warm-up as the other rows
        x = (x + 1).realize()
        done += 1
    Device[device].synchronize()
    walls, cpus = [], []
    for _ in range(5):  # the median of five runs of `steps` ops, like the other rows' medians
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(steps):
            x = (x + 1).realize()
        Device[device].synchronize()
        walls.append((time.perf_counter() - start) / steps)
        cpus.append((time.process_time() - cpu_start) / steps)
        done += steps
    kiln, cpu = statistics.median(walls), statistics.median(cpus)
    assert x.numpy()[0] == done
    values = np.zeros(16, np.float32)

    def numpy_steps() -> None:
        nonlocal values
        for _ in range(steps):
            values = values + 1

    reference = _median_seconds(numpy_steps, 3) / steps
    table.row("per-op x = x + 1 (16 elements)", "per-op", kiln, reference, 0, "us", "<= 20 us")
    # the CPU time of this process (all its threads) per op: what the op costs when no other job shares the cores
    print(f"|   (the process's CPU time per op: {cpu * 1e6:.2f} us)")


def _mlp_step_runner(device: str, jit: bool) -> Callable[[], object]:
    """One quickstart training step (benchmarks/mlp_step.py) as a function, with or without TinyJit."""
    from kiln.tensor import TinyJit

    step = mlp_step(device)
    run = TinyJit(step) if jit else step
    return lambda: run().item()


def bench_training_step(table: Table, device: str, repeats: int) -> None:
    eager_run, replay_run = _mlp_step_runner(device, jit=False), _mlp_step_runner(device, jit=True)
    eager = _median_seconds(eager_run, repeats * 4, warmup=3)
    replayed = _median_seconds(replay_run, repeats * 4, warmup=3)
    eager_cpu = _median_seconds(eager_run, repeats * 4, clock=time.process_time)
    replayed_cpu = _median_seconds(replay_run, repeats * 4, clock=time.process_time)
    table.row("quickstart step without JIT", "mlp step", eager, None, 0, "ms", "", jax_key=None)
    print(f"|   (the same step replayed by TinyJit: {replayed * 1e3:.2f} ms)")
    table.row("Python time per step without JIT", "python step", eager - replayed, None, 0, "ms", "<= 5 ms", None)
    print(f"|   (in the process's CPU time: {(eager_cpu - replayed_cpu) * 1e3:.2f} ms)")


LABELS = {"cnn": "small-CNN", "resblock": "ResNet-block+BN"}


def bench_model_steps(table: Table, device: str, repeats: int) -> None:
    """train_bench.py's small-CNN step and ResNet-block step (BatchNorm), updated by optim.SGD and by a
    per-parameter assign loop, with and without TinyJit, against torch eager and JAX's jitted step."""
    for model_name in MODELS:
        for update, short in (("optim.SGD", "SGD"), ("assign loop", "assign")):
            for jit in (False, True):
                kiln = _median_seconds(step_runner(jit, device, update, model_name), repeats * 2, warmup=3)
                name = f"{LABELS[model_name]} step, {short}, {'TinyJit' if jit else 'no JIT'}"
                target = ">= 1x torch" if jit else ">= 0.5x torch"
                key = f"{model_name} step"
                table.row(name, key, kiln, None, 0, "ms", target, key if jit else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (a smoke run)")
    parser.add_argument("--torch-python", help="a Python with torch installed (e.g. /path/to/torch-venv/bin/python)")
    parser.add_argument("--jax-python", help="a Python with jax installed (default: the --torch-python one)")
    parser.add_argument("--only", help="run only the rows whose group name contains this (matmul, conv, rows...)")
    arguments = parser.parse_args()
    device = Device.canonicalize(arguments.device)
    quick = arguments.quick
    elements = 1 << (20 if quick else 24)
    repeats = 3 if quick else 5
    sizes = (256,) if quick else (512, 1024, 2048)
    torch = None
    if arguments.torch_python is None:
        print("torch peer: skipped (no --torch-python given)")
    elif subprocess.run([arguments.torch_python, "-c", "import torch"], capture_output=True, check=False).returncode:
        print(f"torch peer: skipped (torch does not import under {arguments.torch_python})")
    else:
        torch = TorchReference(arguments.torch_python, repeats, elements)
    jax = start_jax(arguments.jax_python or arguments.torch_python, repeats)
    header = f"kiln.tensor on {device} vs numpy {np.__version__}"
    if torch is not None:
        header += f" and torch {torch.about['version']} ({torch.about['threads']} threads)"
    if jax is not None:
        header += f" and jax {jax.about['version']} (jit)"
    print(header + " (higher is better unless the unit is time; ratios are kiln's speed over the other's)")
    columns = " | ".join(f"{name:>18}" for name in ("kiln", "numpy", "torch", "jax"))
    print(f"| {'benchmark':<40} | {columns} | vs numpy | vs torch |   vs jax | target")
    table = Table(torch, jax)

    def matmuls() -> None:
        for size in sizes:
            bench_matmul(table, device, size, 3 if size == 2048 else repeats)
        bench_matmul_variants(table, device, 256 if quick else 1024, repeats)

    groups: tuple[tuple[str, Callable[[], None]], ...] = (
        ("matmul", matmuls),
        ("matmul prefill", lambda: bench_prefill(table, device, repeats, quick)),
        ("batched", lambda: bench_batched_matmul(table, device, repeats)),
        ("chain", lambda: bench_chain(table, device, elements, repeats)),
        ("sum", lambda: bench_sum(table, device, elements, repeats)),
        ("rows", lambda: bench_rows(table, device, repeats)),
        ("conv", lambda: bench_conv(table, device, repeats)),
        ("pool", lambda: bench_max_pool_backward(table, device, repeats)),
        ("first call", lambda: bench_first_call(table, device)),
        ("per-op", lambda: bench_per_op(table, device, 100 if quick else 1000)),
        ("step", lambda: bench_training_step(table, device, repeats)),
        ("model step", lambda: bench_model_steps(table, device, repeats)),
    )
    for name, run in groups:
        if arguments.only is None or arguments.only in name:
            run()
    for peer in (torch, jax):
        if peer is not None:
            peer.close()


if __name__ == "__main__":
    main()
