"""graph_rewrite: apply a PatternMatcher to every node of a graph until nothing fires (iterative, no recursion)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kiln.uops import trace
from kiln.uops.pattern_matcher import PatternMatcher
from kiln.uops.uop import UOp

NodeRewrite = Callable[[UOp, Any], "UOp | None"]

# stack entry stages
_VISIT = 0  # first visit: (bottom-up: rewrite the node itself) then queue its sources
_BUILD = 1  # sources are done: rebuild on the new sources, (top-down: rewrite the node)
_LINK = 2  # the node was replaced: its result is the result of the replacement


def graph_rewrite(
    sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None
) -> UOp:
    """`sink` with `pm` applied to every node until no rule fires anywhere (a fixed point).

    Default order: a node's sources are rewritten first, then the node is rebuilt on them and rewritten; a node a
    rule produces is rewritten the same way. `bottom_up=True` tries the rules on a node before its sources (and
    again after a source changed). Each node is rewritten once per call (memoized). `ctx` is handed to callbacks
    that take it. `name` labels the rewrite in traces.
    """
    return _run(sink, pm, ctx, bottom_up, name, extra_roots=None)[sink]


def graph_rewrite_map(
    sink: UOp,
    pm: PatternMatcher,
    ctx: Any = None,
    bottom_up: bool = False,
    name: str | None = None,
    input_map: Mapping[UOp, UOp] | None = None,
) -> dict[UOp, UOp]:
    """Like `graph_rewrite`, returning old -> new for every node of `sink`'s graph.

    With `input_map` (an earlier old -> new map whose values are in `sink`'s graph), returns the composition: each
    key of `input_map` maps to where its value went.
    """
    everything = sink.toposort()
    done = _run(sink, pm, ctx, bottom_up, name, extra_roots=everything)
    mapping = {node: done[node] for node in everything}
    if input_map is None:
        return mapping
    return {old: mapping.get(new, new) for old, new in input_map.items()}


def _run(
    sink: UOp, pm: PatternMatcher, ctx: Any, bottom_up: bool, name: str | None, extra_roots: list[UOp] | None
) -> dict[UOp, UOp]:
    if not isinstance(sink, UOp):
        raise TypeError(f"graph_rewrite needs a UOp, got {sink!r}")
    if not isinstance(pm, PatternMatcher):
        raise TypeError(f"graph_rewrite needs a PatternMatcher, got {pm!r}")
    if not trace.STATE.enabled:
        return _rewrite_all(sink, pm.rewrite, ctx, bottom_up, extra_roots)
    record = trace.begin_trace(name, bottom_up, sink)

    def traced(node: UOp, context: Any) -> UOp | None:
        result, rule = pm.rewrite_with_rule(node, context)
        if rule is not None:
            record.steps.append(trace.RewriteStep(rule.location, repr(rule.pattern), node, result))
        return result  # type: ignore[no-any-return]

    done = _rewrite_all(sink, traced, ctx, bottom_up, extra_roots)
    record.result = done[sink]
    return done


def _rewrite_all(
    sink: UOp, rewrite: NodeRewrite, ctx: Any, bottom_up: bool, extra_roots: list[UOp] | None
) -> dict[UOp, UOp]:
    done: dict[UOp, UOp] = {}
    _rewrite_from(sink, rewrite, ctx, bottom_up, done)
    if extra_roots is not None:
        # bottom-up rewriting can replace a node before visiting its sources; give those sources a result too
        for root in extra_roots:
            if root not in done:
                _rewrite_from(root, rewrite, ctx, bottom_up, done)
    return done


def _rewrite_from(root: UOp, rewrite: NodeRewrite, ctx: Any, bottom_up: bool, done: dict[UOp, UOp]) -> None:
    # `done` maps a node to its final form (every final form maps to itself). `active` holds the nodes whose
    # result is pending: meeting one again as a source means a rule keeps rebuilding its own input.
    active: set[UOp] = set()
    stack: list[tuple[UOp, int, UOp]] = [(root, _VISIT, root)]
    push = stack.append
    pop = stack.pop
    while stack:
        node, stage, current = pop()
        if stage == _VISIT:
            if node in done:
                continue
            if node in active:
                raise RuntimeError(f"graph_rewrite does not terminate: a rule rebuilds a graph containing {node.op!r}")
            active.add(node)
            if bottom_up:
                replaced = _rewrite_node(node, rewrite, ctx)
                if replaced is not node:
                    push((node, _LINK, replaced))
                    push((replaced, _VISIT, replaced))
                    continue
            push((node, _BUILD, node))
            for source in reversed(node.src):
                if source not in done:
                    push((source, _VISIT, source))
        elif stage == _BUILD:
            sources = node.src
            new_sources = tuple([done[source] for source in sources])
            if new_sources != sources:
                rebuilt = node.replace(src=new_sources)
                push((node, _LINK, rebuilt))
                push((rebuilt, _VISIT, rebuilt))
                continue
            if not bottom_up and (replaced_or_none := rewrite(node, ctx)) is not None:
                _check_result(node, replaced_or_none)
                push((node, _LINK, replaced_or_none))
                push((replaced_or_none, _VISIT, replaced_or_none))
                continue
            done[node] = node
            active.discard(node)
        else:
            done[node] = done[current]
            active.discard(node)


def _rewrite_node(node: UOp, rewrite: NodeRewrite, ctx: Any) -> UOp:
    # apply rules to one node until none fires (bottom-up mode); a rewrite cycle a -> b -> a is an error
    seen: set[UOp] | None = None
    current = node
    while (replaced := rewrite(current, ctx)) is not None:
        _check_result(current, replaced)
        if seen is None:
            seen = {node}
        if replaced in seen:
            raise RuntimeError(f"graph_rewrite does not terminate: rules cycle through {replaced.op!r} nodes")
        seen.add(replaced)
        current = replaced
    return current


def _check_result(node: UOp, replaced: object) -> None:
    if type(replaced) is not UOp:
        raise TypeError(f"a rewrite rule for {node.op!r} returned {replaced!r}; rules must return a UOp or None")
