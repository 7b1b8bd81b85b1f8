"""A tour of kiln.uops: build a symbolic index expression, simplify it, print it, and rewrite a graph with a pattern.

Run: `uv run python examples/uops_demo.py`
"""

from __future__ import annotations

from kiln.uops import (
    AxisKind,
    Ops,
    PatternMatcher,
    UOp,
    UPat,
    dtypes,
    graph_rewrite,
    pm_spec_alu,
    print_graph,
    sym_infer,
    tracing,
    type_verify,
)


def index_expression() -> None:
    """The flat index of element (row, column) of a 4-wide tile inside a row-major matrix, then simplified."""
    print("== a symbolic index expression")
    width = UOp.variable("width", 4, 64)
    row = UOp.range(16, 0, AxisKind.GLOBAL)
    column = UOp.range(4, 1, AxisKind.LOCAL)
    flat = row * 4 + column
    # recover (row, column) from the flat index, then re-linearize into a matrix of `width` columns
    index = (flat // 4) * width + flat % 4
    print("built:     ", index.render())
    simplified = index.simplify()
    print("simplified:", simplified.render())
    print(f"bounds:     {simplified.vmin} .. {simplified.vmax}")
    values = {"width": 8}
    for r, c in [(0, 0), (3, 2), (15, 3)]:
        loop_values = {row: r, column: c}
        concrete = simplified.substitute({node: UOp.const(dtypes.index, v) for node, v in loop_values.items()})
        print(f"  row={r:2} column={c}: index = {sym_infer(concrete, values)} (expected {r * 8 + c})")
    print("golden form of the simplified graph:")
    print(print_graph(simplified))


# a pattern table is data: strength-reduce multiplications by powers of two into shifts
pm_shift = PatternMatcher(
    [
        (
            UPat.var("x", dtype=dtypes.int32) * UPat.cvar("c", vec=False),
            lambda x, c: x << (c.arg.bit_length() - 1) if c.arg > 0 and c.arg & (c.arg - 1) == 0 else None,
        ),
    ]
)


def pattern_rewrite() -> None:
    """Rewrite x*8 + y*3 with pm_shift and show which rule fired where."""
    print("\n== a pattern-matcher rewrite")
    x = UOp.variable("x", 0, 100, dtypes.int32)
    y = UOp.variable("y", 0, 100, dtypes.int32)
    graph = UOp.sink(x * 8 + y * 3)
    print("before:")
    print(print_graph(graph))
    with tracing() as traces:
        rewritten = graph_rewrite(graph, pm_shift, name="strength reduction")
    print("after:")
    print(print_graph(rewritten))
    for step in traces[0].steps:
        print(f"fired {step.before.op.name} -> {step.after.op.name} (rule at {step.location.rsplit('/', 1)[-1]})")
    type_verify(rewritten, pm_spec_alu)
    print("the result passes pm_spec_alu; shifted ops:", [n.op.name for n in rewritten.toposort() if n.op is Ops.SHL])


if __name__ == "__main__":
    index_expression()
    pattern_rewrite()
