"""Compile latency of the CPU compilers (gcc, clang, llvmlite) over codegen's kernel corpus.

Every corpus kernel is lowered once per renderer (heuristic opts, as the CPU device would) and rendered; then its
source is compiled `--runs` times with the disk cache off, and the median is that kernel's latency. Printed per
compiler: the median and the 90th percentile over kernels, the total for the corpus, and, as the reference measured
in the same run, the compile latency of the smallest possible kernel (the toolchain's fixed cost: process start,
pass setup, writing the object). A compiler "passes" when every corpus kernel it compiled runs correctly (checked
against the case's numpy reference); the CPU default is the fastest-compiling one that passes. llvmlite is measured
twice in the same run: with its default IR pipeline (LLVM_PIPELINE=kernel) and with LLVM's -O2 (LLVM_PIPELINE=O2).

    uv run python benchmarks/compile_bench.py [--runs N] [--compilers gcc,clang,llvm]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kiln.codegen import Program, Renderer, get_program, linearize, lower, optimize_kernel
from kiln.renderers import CRenderer, HostCompiler, LLVMRenderer
from kiln.uops import Context

ROOT = Path(__file__).resolve().parents[1]
TRIVIAL_C = "void kiln_kernel(int* restrict out) { *out = 1; }\n"
TRIVIAL_LLVM = "define void @kiln_kernel(ptr %out) {\nentry:\n  store i32 1, ptr %out\n  ret void\n}\n"


def load_corpus() -> Any:
    spec = importlib.util.spec_from_file_location("corpus", ROOT / "packages" / "codegen" / "tests" / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus"] = module
    spec.loader.exec_module(module)
    return module


def median_seconds(compile_source: Callable[[str], bytes], source: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        compile_source(source)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def passes(corpus: Any, renderer: Renderer) -> bool:
    """Whether every corpus kernel compiled by `renderer` runs like its numpy reference."""
    rng = np.random.default_rng(0)
    compiler = renderer.compiler
    assert isinstance(compiler, HostCompiler)
    for case in corpus.CORPUS:
        program = Program(get_program(case.sink, renderer))
        assert program.binary is not None
        kernel = compiler.load(program.binary, program.signature)
        inputs = case.inputs(rng)
        outputs = case.output_buffers()
        stored = [corpus.to_storage(v, d) for v, (d, _) in zip(inputs, case.buffers[case.outputs :])]
        buffers = [*outputs, *stored]
        arguments = [buffers[slot].ctypes.data for slot in program.globals]
        arguments += [case.var_vals[v.arg.name] for v in program.variables]
        cores = [(core,) for core in range(program.launch_dims(case.var_vals)[0][0])]
        for core in cores if any(p.kind == "core_id" for p in kernel.parameters) else [()]:
            kernel(*arguments, *core)
        got = [corpus.from_storage(raw, d) for raw, (d, _) in zip(outputs, case.buffers)]
        try:
            corpus.assert_matches(case, got, case.reference(inputs, case.var_vals), case.exact)
        except AssertionError as error:
            print(f"  {case.name} is wrong: {str(error).splitlines()[0]}")
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="compiles per kernel (the median is kept)")
    parser.add_argument("--compilers", default="gcc,clang,llvm", help="comma-separated: gcc, clang, llvm")
    args = parser.parse_args()
    corpus = load_corpus()
    candidates: dict[str, tuple[Renderer, dict[str, str]]] = {}
    for name in args.compilers.split(","):
        if name == "llvm":
            if importlib.util.find_spec("llvmlite") is None:
                print("llvmlite: not installed, skipped")
                continue
            candidates["llvmlite"] = (LLVMRenderer(), {"LLVM_PIPELINE": "kernel"})
            candidates["llvmlite -O2"] = (LLVMRenderer(), {"LLVM_PIPELINE": "O2"})
        elif shutil.which(name) is not None:
            candidates[name] = (CRenderer(name), {})
        else:
            print(f"{name}: not installed, skipped")
    print(f"{len(corpus.CORPUS)} corpus kernels, median of {args.runs} compiles each, disk cache off\n")
    print(
        "| compiler | version | median / kernel | p90 / kernel | corpus total | trivial kernel (reference) | passes |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    results: dict[str, float] = {}
    for name, (renderer, overrides) in candidates.items():
        with Context(DISABLE_COMPILER_CACHE=True, **overrides):
            compiler = renderer.compiler
            assert compiler is not None
            sources = [
                renderer.render(linearize(lower(optimize_kernel(c.sink, renderer, None), renderer)), "kernel")
                for c in corpus.CORPUS
            ]
            latencies = sorted(median_seconds(compiler.compile, source, args.runs) for source in sources)
            trivial_source = TRIVIAL_LLVM if name.startswith("llvmlite") else TRIVIAL_C
            trivial = median_seconds(compiler.compile, trivial_source, args.runs)
            ok = passes(corpus, renderer)
            median = statistics.median(latencies)
            p90 = latencies[int(0.9 * (len(latencies) - 1))]
            version = compiler.identity.split(" cpu=")[0]
            print(
                f"| {name} | {version} | {median * 1e3:.1f} ms | {p90 * 1e3:.1f} ms | {sum(latencies):.2f} s | "
                f"{trivial * 1e3:.1f} ms | {'yes' if ok else 'NO'} |"
            )
            if ok:
                results[name] = median
    if results:
        best = min(results, key=results.__getitem__)
        print(f"\nfastest-compiling compiler that passes: {best}")


if __name__ == "__main__":
    main()
