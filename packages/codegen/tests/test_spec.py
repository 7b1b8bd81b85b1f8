"""codegen's specs: the kernel sink format accepts the corpus and rejects malformed sinks, naming the uop."""

from __future__ import annotations

import pytest
from corpus import CORPUS, KernelCase
from sinks_for_tests import buffer, kernel, matmul

from kiln.codegen import pm_spec_kernel
from kiln.uops import AxisKind, Ops, RangeArg, SpecError, UOp, dtypes, type_verify


@pytest.mark.parametrize("case", CORPUS, ids=lambda case: case.name)
def test_corpus_kernels_follow_the_sink_format(case: KernelCase) -> None:
    type_verify(case.sink, pm_spec_kernel)


def malformed() -> list[tuple[str, UOp, str]]:
    out, a = buffer(0, 8), buffer(1, 8)
    i = UOp.range(8, 0)
    loop_range = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 8),), RangeArg(3, AxisKind.LOOP))
    float_offset = UOp(Ops.INDEX, a.dtype, (a, UOp.const(dtypes.float32, 1.0)))
    return [
        ("reduce over a loop axis", kernel(out.index(i).store(a.index(i).load().reduce(loop_range)).end(i)), "REDUCE"),
        ("float offset", kernel(out.index(i).store(float_offset.load()).end(i)), "INDEX"),
        (
            "int32 range",
            kernel(out.index(i).store(a.index(i).load()).end(UOp.range(UOp.const(dtypes.int32, 8), 0))),
            "RANGE",
        ),
        (
            "negative slot",
            kernel(UOp(Ops.DEFINE_GLOBAL, out.dtype, (), -1).index(i).store(a.index(i).load()).end(i)),
            "DEFINE_GLOBAL",
        ),
        (
            "load of wrong dtype",
            kernel(out.index(i).store(UOp(Ops.LOAD, dtypes.float16, (a.index(i),)).cast(dtypes.float32)).end(i)),
            "LOAD",
        ),
        ("END of a non-range", kernel(UOp(Ops.END, src=(out.index(i).store(a.index(i).load()), i + 1))), "END"),
        ("non-bool gate", kernel(out.index(i).store(a.index(i, gate=i).load()).end(i)), "INDEX"),
        ("wrong sink payload", UOp(Ops.SINK, src=(out.index(i).store(a.index(i).load()).end(i),), arg="name"), "SINK"),
    ]


@pytest.mark.parametrize(("name", "sink", "op"), malformed(), ids=[m[0] for m in malformed()])
def test_malformed_sinks_are_rejected_naming_the_uop(name: str, sink: UOp, op: str) -> None:
    with pytest.raises(SpecError, match=f"= {op} "):
        type_verify(sink, pm_spec_kernel)


def test_optimized_sinks_still_follow_the_format() -> None:
    from renderers_for_tests import GPULikeRenderer

    from kiln.codegen import Opt, OptOps, apply_opts

    sink = apply_opts(
        matmul(8, 8, 8), [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 2, 2), Opt(OptOps.UPCAST, 1, 2)], GPULikeRenderer()
    )
    type_verify(sink, pm_spec_kernel)
