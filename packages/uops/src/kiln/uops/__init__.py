"""The IR: dtypes, Ops, UOp, UPat/PatternMatcher, graph_rewrite, symbolic math, spec, tracing, knobs."""

__all__: list[str] = []
