"""The whole kernel pipeline is traced in its declared order, and SOURCE is a printing of the stored LINEAR.

For every corpus kernel and every renderer of this package (rendering needs no GPU and no compiler): the rewrite
trace of `get_program` names each stage of `kiln.codegen.lowering.pipeline.PIPELINE` in order; rendering the
stored LINEAR again gives the stored SOURCE; and rendering calls no graph rewrite (the rewrite engine is made to
raise while `render` runs).
"""

from __future__ import annotations

from typing import Any

import pytest
from gpu_kernels import CORPUS

import kiln.uops.rewrite
from kiln.codegen import Program, Renderer, get_program
from kiln.codegen.lowering.pipeline import PIPELINE
from kiln.renderers import CRenderer, CUDARenderer, LLVMRenderer, PTXRenderer, PythonRenderer
from kiln.uops import tracing


def _render_only(renderer: Renderer) -> Renderer:
    """`renderer` without its compiler, so get_program stops at SOURCE (no toolchain or GPU needed)."""
    fixed = {"compiler": None, "emulated_dtypes": renderer.emulated_dtypes}  # the C renderer asks its compiler
    cls = type(f"RenderOnly{type(renderer).__name__}", (type(renderer),), fixed)
    copy: Renderer = object.__new__(cls)
    copy.__dict__.update(renderer.__dict__)
    return copy


RENDERERS = {
    "python": PythonRenderer(),
    "c": CRenderer(),
    "llvm": LLVMRenderer(),
    "cuda": CUDARenderer("sm_80"),
    "ptx": PTXRenderer("sm_80"),
}


def _in_order(names: list[str | None], stages: tuple[str, ...]) -> list[str]:
    """The stages not found, in order, as a subsequence of `names`."""
    position = 0
    for index, stage in enumerate(stages):
        try:
            position = names.index(stage, position) + 1
        except ValueError:
            return list(stages[index:])
    return []


@pytest.mark.parametrize("renderer_name", list(RENDERERS))
def test_every_corpus_kernel_runs_the_declared_stages_and_renders_its_linear(
    renderer_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    renderer = _render_only(RENDERERS[renderer_name])
    for case in CORPUS:
        with tracing() as traces:
            program = Program(get_program(case.sink, renderer))
        missing = _in_order([t.name for t in traces], PIPELINE)
        assert not missing, f"{case.name}: stages {missing} not traced in order"
        original_run = kiln.uops.rewrite._run

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"{renderer_name} ran a graph rewrite while rendering")

        monkeypatch.setattr(kiln.uops.rewrite, "_run", refuse)
        try:
            again = renderer.render(list(program.uops), program.name)
        finally:
            monkeypatch.setattr(kiln.uops.rewrite, "_run", original_run)
        assert again == program.source, f"{case.name}: rendering the stored LINEAR again gave another text"


def test_the_stage_check_notices_a_missing_or_reordered_stage() -> None:
    assert _in_order(["optimize", "simplify", "linearize"], ("optimize", "simplify", "linearize")) == []
    stages = ("optimize", "simplify", "linearize")
    assert _in_order(["simplify", "optimize", "linearize"], stages) == ["simplify", "linearize"]
    assert _in_order(["optimize", "linearize"], ("optimize", "simplify", "linearize")) == ["simplify", "linearize"]
