"""python -m kiln.tensor.onnx MODEL.onnx [--inputs inputs.npz] [--benchmark N]

Prints the model's inputs and outputs, runs it once on the given inputs (or random ones: named dims take size 1),
prints each output's shape and a few values, and with --benchmark N times N more runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from kiln.tensor.onnx.graph_program import GraphInput
from kiln.tensor.onnx.runner import OnnxRunner
from kiln.tensor.onnx.types import element_type_name, numpy_dtype_of_element_type
from kiln.tensor.tensor import Tensor


def _describe(entry: GraphInput) -> str:
    dims = "?" if entry.dims is None else ", ".join("?" if dim is None else str(dim) for dim in entry.dims)
    return f"{entry.name}: {element_type_name(entry.element_type)}[{dims}]"


def _random_input(entry: GraphInput, generator: np.random.Generator) -> np.ndarray[Any, Any]:
    shape = [dim if isinstance(dim, int) and dim > 0 else 1 for dim in (entry.dims or ())]
    dtype = numpy_dtype_of_element_type(entry.element_type)
    if dtype.kind == "f":
        return generator.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return generator.integers(0, 2, shape).astype(dtype)
    return generator.integers(0, 4, shape).astype(dtype)


def _tensors(values: list[Any]) -> list[Tensor]:
    """The Tensors among outputs (a sequence output is a list of them, an empty optional None)."""
    return [item for value in values for item in (value if isinstance(value, list) else [value]) if item is not None]


def _summary(value: Any) -> str:
    if value is None:
        return "empty optional"
    if isinstance(value, list):
        return f"sequence of {len(value)}: [" + ", ".join(_summary(item) for item in value) + "]"
    return f"{value.dtype} {list(value.shape)} {np.asarray(value.numpy()).reshape(-1)[:6]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.tensor.onnx", description=__doc__.splitlines()[2])
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("--inputs", help="an .npz file holding the inputs by name (default: random inputs)")
    parser.add_argument("--benchmark", type=int, default=0, metavar="N", help="time N runs after the first")
    arguments = parser.parse_args(argv)
    start = time.perf_counter()
    runner = OnnxRunner(arguments.model)
    loaded = time.perf_counter()
    print(
        f"model {arguments.model}: opset {runner.opset}, {len(runner.graph.nodes)} nodes, "
        f"loaded in {loaded - start:.3f} s"
    )
    for entry in runner.inputs:
        print(f"  input  {_describe(entry)}")
    for name in runner.outputs:
        print(f"  output {name}")
    if arguments.inputs:
        with np.load(arguments.inputs) as archive:
            feeds: dict[str, Any] = {name: archive[name] for name in archive.files}
    else:
        generator = np.random.default_rng(0)
        feeds = {entry.name: _random_input(entry, generator) for entry in runner.inputs}

    def run_once() -> dict[str, Any]:
        outputs = runner(feeds)
        Tensor.realize_all(*_tensors(list(outputs.values())))
        return outputs

    first = time.perf_counter()
    outputs = run_once()
    print(f"first run (compiles kernels): {time.perf_counter() - first:.3f} s")
    for name, value in outputs.items():
        print(f"  {name}: {_summary(value)}")
    if arguments.benchmark > 0:
        timings = []
        for _ in range(arguments.benchmark):
            begin = time.perf_counter()
            run_once()
            timings.append(time.perf_counter() - begin)
        print(
            f"{arguments.benchmark} runs: {1e3 * float(np.median(timings)):.3f} ms median, "
            f"{1e3 * min(timings):.3f} ms best per run"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
