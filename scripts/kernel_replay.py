"""Kernel replay: render a fixed set of kernels for every renderer and compare the sources with an earlier commit's.

The kernels: every case of codegen's test corpus, and the kernels kiln.tensor builds for a few fixed programs (an
MLP training step, attention, a convolution), captured as they reach codegen. Each is optimized with the
heuristic opts, lowered, linearized and rendered by every renderer that can render here (Python, C, LLVM IR,
CUDA C, PTX: rendering needs no GPU). Sources are saved under `.cache/kernel_replay/<label>/` (the label is the
current commit's sha unless `--label` says otherwise). `--against SHA` prints the kernels whose source differs from
that commit's saved run (`-v`: with a unified diff); with `--check` a difference is exit code 1 (for CI). A
refactor that should not change code shows no changed kernel. `--tree DIR` renders the kiln of another source tree
(an earlier commit unpacked with `git archive`: its packages and its corpus) with this script, which is how
scripts/ci.d/40-kernel-replay.sh compares a change with its merge base.

    uv run python scripts/kernel_replay.py                      # save this commit's sources
    uv run python scripts/kernel_replay.py --against abc1234 -v # compare with a saved earlier run
    uv run python scripts/kernel_replay.py --tree /tmp/base --label base   # render an unpacked earlier commit
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import inspect
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "kernel_replay"


def _use_tree(tree: Path) -> None:
    """Import kiln from `tree`'s packages: their source folders go before the installed (editable) ones."""
    sources = sorted(str(path) for path in tree.glob("packages/*/src"))
    if not sources:
        raise SystemExit(f"--tree {tree}: no packages/*/src folder there (expected a kiln source tree)")
    sys.path[:0] = sources


def _load_corpus(tree: Path) -> list[Any]:
    path = tree / "packages" / "codegen" / "tests" / "corpus.py"
    spec = importlib.util.spec_from_file_location("corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus"] = module
    spec.loader.exec_module(module)
    return list(module.CORPUS)


def _tensor_programs() -> dict[str, Callable[[], None]]:
    import numpy as np

    from kiln.tensor import Tensor, nn
    from kiln.tensor.optim import SGD

    rng = np.random.default_rng(0)

    def data(*shape: int) -> Tensor:
        return Tensor(rng.standard_normal(shape).astype(np.float32))

    def training_step() -> None:
        first, second = nn.Linear(16, 32), nn.Linear(32, 4)
        params = [first.weight, second.weight, *(p for p in (first.bias, second.bias) if p is not None)]
        optimizer = SGD(params, lr=0.01, momentum=0.9)
        x, target = data(8, 16), Tensor(rng.integers(0, 4, 8).astype(np.int32))
        loss = second(first(x).relu()).cross_entropy(target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss.numpy()

    def attention() -> None:
        q, k, v = data(2, 4, 8, 16), data(2, 4, 8, 16), data(2, 4, 8, 16)
        q.scaled_dot_product_attention(k, v, is_causal=True).numpy()

    def convolution() -> None:
        image, weight, bias = data(2, 3, 12, 12), data(8, 3, 3, 3), data(8)
        image.conv2d(weight, bias, padding=1).relu().numpy()

    return {"train_step": training_step, "attention": attention, "conv": convolution}


def _captured_tensor_kernels() -> Iterator[tuple[str, Any]]:
    """(program/index, kernel sink) of every kernel the tensor programs hand to codegen, in order."""
    import kiln.codegen.lifecycle as lifecycle

    original = lifecycle.optimize_kernel
    captured: list[Any] = []

    def recording(ast: Any, renderer: Any, opts: Any = None) -> Any:
        captured.append(ast)
        return original(ast, renderer, opts)

    lifecycle.optimize_kernel = recording  # type: ignore[assignment]
    try:
        for program, run in _tensor_programs().items():
            captured.clear()
            run()
            seen: dict[Any, None] = dict.fromkeys(captured)
            for index, ast in enumerate(seen):
                yield f"{program}/{index:03d}", ast
    finally:
        lifecycle.optimize_kernel = original  # type: ignore[assignment]


def _renderers() -> dict[str, Any]:
    from kiln.renderers import CRenderer, CUDARenderer, LLVMRenderer, PTXRenderer, PythonRenderer

    return {
        "python": PythonRenderer(),
        "c": CRenderer(),
        "llvm": LLVMRenderer(),
        "cuda": CUDARenderer("sm_80"),
        "ptx": PTXRenderer("sm_80"),
    }


def _render(renderer: Any, uops: list[Any], name: str) -> str:
    # commits before the Renderer interface took the kernel name rendered `uops` alone
    if len(inspect.signature(renderer.render).parameters) == 1:
        return str(renderer.render(uops))
    return str(renderer.render(uops, name))


def render_all(names: list[str] | None, tree: Path = ROOT) -> dict[str, str]:
    """{renderer/kernel: source} for every kernel and renderer (an error is recorded as the source's text)."""
    from kiln.codegen import linearize, lower, optimize_kernel

    kernels = [(f"corpus/{case.name}", case.sink) for case in _load_corpus(tree)]
    kernels += list(_captured_tensor_kernels())
    sources: dict[str, str] = {}
    for renderer_name, renderer in _renderers().items():
        if names and renderer_name not in names:
            continue
        for kernel_name, sink in kernels:
            try:
                optimized = optimize_kernel(sink, renderer, None)
                info = optimized.arg
                source = _render(renderer, linearize(lower(optimized, renderer)), getattr(info, "name", "kernel"))
            except Exception as error:  # a kernel a renderer refuses is part of what is compared
                source = f"error: {type(error).__name__}: {error}\n"
            sources[f"{renderer_name}/{kernel_name}"] = source
    return sources


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def _save(sources: dict[str, str], folder: Path) -> None:
    for key, source in sources.items():
        path = folder / f"{key}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


def _load(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder).with_suffix("")): p.read_text() for p in sorted(folder.rglob("*.txt"))}


def new_errors(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """The keys a renderer rendered before and refuses now (its source became an `error:` line)."""
    return sorted(
        key for key in old.keys() & new.keys() if new[key].startswith("error:") and not old[key].startswith("error:")
    )


def compare(old: dict[str, str], new: dict[str, str], verbose: bool) -> list[str]:
    """The keys whose source differs (or exists on one side only), printed with a diff when `verbose`."""
    changed = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        changed.append(key)
        state = "added" if before is None else "removed" if after is None else "changed"
        print(f"{state}: {key}")
        if verbose and before is not None and after is not None:
            diff = difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm="")
            print("\n".join(diff))
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", metavar="SHA", help="compare with the sources saved for this commit (label)")
    parser.add_argument("--label", help="folder name to save under (default: the current commit's sha)")
    parser.add_argument("--renderers", help="comma-separated subset of python,c,llvm,cuda,ptx")
    parser.add_argument("--ignore-header", action="store_true", help="compare without each source's first line")
    parser.add_argument("-v", "--verbose", action="store_true", help="print a diff of each changed kernel")
    parser.add_argument("--check", action="store_true", help="exit code 1 when a kernel changed")
    parser.add_argument("--tree", type=Path, help="render the kiln source tree in this folder, not this checkout's")
    parser.add_argument(
        "--allow-changes", action="store_true", help="with --check: only a kernel a renderer now refuses fails"
    )
    args = parser.parse_args()
    names = args.renderers.split(",") if args.renderers else None
    if args.tree is not None:
        _use_tree(args.tree.resolve())
    sources = render_all(names, args.tree.resolve() if args.tree is not None else ROOT)
    label = args.label or _commit()
    _save(sources, CACHE / label)
    print(f"{len(sources)} kernel sources saved under {CACHE / label}")
    if args.against is None:
        return 0
    matches = sorted(p for p in CACHE.iterdir() if p.name.startswith(args.against)) if CACHE.exists() else []
    if not matches:
        raise SystemExit(f"no saved run for {args.against!r} under {CACHE} (run this script at that commit first)")
    old = _load(matches[0])
    if names:
        old = {k: v for k, v in old.items() if k.split("/", 1)[0] in names}
    new = sources
    if args.ignore_header:  # e.g. across the commit that put the kernel name in the first comment line
        old, new = ({k: v.split("\n", 1)[-1] for k, v in side.items()} for side in (old, sources))
    changed = compare(old, new, args.verbose)
    print(f"{len(changed)} of {len(sources)} kernel sources differ from {matches[0].name}")
    refused = new_errors(old, new)
    for key in refused:
        print(f"now refused: {key}: {new[key].strip()}")
    if not args.check:
        return 0
    return 1 if refused or (changed and not args.allow_changes) else 0


if __name__ == "__main__":
    sys.exit(main())
