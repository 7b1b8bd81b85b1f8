"""`kiln.tensor.export`: a jitted model as an artifact that runs without Python: a C library, or a WebGPU page.

`export(fn, *example_inputs, target="c" | "webgpu", out=DIR, name=...)` captures `fn` once with TinyJit (the
kernels, the buffers they read and write, the launch order; see `plan`), then writes:

- `target="c"`: NAME.h / NAME.c (the kernels as C11 functions, `NAME_init(weights_path)` / `NAME_run(inputs...,
  outputs...)` / `NAME_free()`), NAME.safetensors (or the weights embedded in NAME.c), main.c and a Makefile;
- `target="webgpu"`: NAME.js (an ES module with the WGSL kernels, `load(weightsUrl)` / `run(inputs)` returning
  typed arrays), NAME.safetensors and an index.html demo; only the dtypes WebGPU stores (bool and 32-bit scalars).

Bound Variables among the example inputs (and symbolic sizes of the inputs' shapes) become int arguments of run;
otherwise shapes are fixed at export, and the files' comment header says so.

Example:
    >>> from kiln.tensor import Tensor, nn
    >>> model = nn.Linear(4, 2)
    >>> artifact = export(model, Tensor.zeros(1, 4), target="c", out="build/linear", name="linear")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.tensor.export.c_target import write_c
from kiln.tensor.export.plan import ExportPlan, check_identifier, plan_export
from kiln.tensor.export.webgpu_target import WEBGPU_MAX_BINDING_BYTES, write_webgpu

__all__ = ["TARGETS", "WEBGPU_MAX_BINDING_BYTES", "Artifact", "export"]

TARGETS = ("c", "webgpu")
"""The targets `export` writes."""


@dataclass(frozen=True)
class Artifact:
    """What `export` wrote: the target, the folder, the files (with their sizes) and the plan they came from."""

    target: str
    out: Path
    files: tuple[Path, ...]
    plan: ExportPlan

    def sizes(self) -> dict[str, int]:
        """Each file's size in bytes, by file name."""
        return {path.name: path.stat().st_size for path in self.files}


def export(
    fn: Callable[..., Any],
    *example_inputs: Any,
    target: str = "c",
    out: str | os.PathLike[str] = "export",
    name: str = "model",
    embed_weights: bool = False,
) -> Artifact:
    """Captures `fn` on `example_inputs` and writes it as a `target` artifact into folder `out` (created).

    Args:
        fn: a TinyJit-capturable function (a model's forward, or a model itself) returning Tensors.
        example_inputs: Tensors of the shapes and dtypes the artifact takes; bound Variables become run arguments.
        target: "c" or "webgpu".
        out: the folder to write into.
        name: the artifact's name: file names and the C API's prefix (an identifier).
        embed_weights: C only: the weights inside NAME.c instead of a safetensors file.

    Returns:
        the `Artifact` (files, sizes, plan).

    Raises:
        ValueError: an unknown target, a name that is not an identifier, embed_weights for webgpu, a buffer over
            WebGPU's binding limit (naming the tensor).
        TypeError: a dtype the target lacks (naming the tensor), an input that is neither a Tensor nor a bound
            Variable.
        RuntimeError: `fn` cannot be captured by TinyJit (the reason), or draws random numbers.
    """
    if target not in TARGETS:
        raise ValueError(f"export: target {target!r} is not one of {list(TARGETS)}")
    check_identifier(name, "name")
    if embed_weights and target != "c":
        raise ValueError(f"export: embed_weights is for target 'c'; target {target!r} fetches its weights at load")
    plan = plan_export(fn, example_inputs, name)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    files = write_c(plan, folder, embed_weights) if target == "c" else write_webgpu(plan, folder)
    return Artifact(target, folder, tuple(files), plan)
