"""graph_rewrite: apply a PatternMatcher to every node of a graph until nothing fires (iterative, no recursion)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kiln.uops import trace
from kiln.uops.pattern_matcher import PatternMatcher, Rule, RulesByOp
from kiln.uops.uop import UOp

Fired = Callable[[Rule, UOp, Any], None]
"""Called when a rule fires, with the rule, the node and the rule's result (tracing records the step)."""

# stack entry stages of the bottom-up walk
_VISIT = 0  # first visit: rewrite the node itself, then queue its sources
_BUILD = 1  # sources are done: rebuild on the new sources
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
        return _rewrite_all(sink, pm.by_op, ctx, bottom_up, extra_roots, None)
    record = trace.begin_trace(name, bottom_up, sink)

    def fired(rule: Rule, node: UOp, result: Any) -> None:
        record.steps.append(trace.RewriteStep(rule.location, repr(rule.pattern), node, result))

    done = _rewrite_all(sink, pm.by_op, ctx, bottom_up, extra_roots, fired)
    record.result = done[sink]
    return done


def _rewrite_all(
    sink: UOp, rules: RulesByOp, ctx: Any, bottom_up: bool, extra_roots: list[UOp] | None, fired: Fired | None
) -> dict[UOp, UOp]:
    done: dict[UOp, UOp] = {}
    if bottom_up:
        _bottom_up_from(sink, rules, ctx, done, fired)
    else:
        _sources_first(sink, rules, ctx, done, fired)
    if extra_roots is not None:
        # bottom-up rewriting can replace a node before visiting its sources; give those sources a result too
        rewrite_from = _bottom_up_from if bottom_up else _sources_first_from
        for root in extra_roots:
            if root not in done:
                rewrite_from(root, rules, ctx, done, fired)
    return done


def _sources_first(sink: UOp, rules: RulesByOp, ctx: Any, done: dict[UOp, UOp], fired: Fired | None) -> None:
    # The walk over the input graph. In toposort order (sources first, in source order: the order in which
    # _sources_first_from would finish the nodes of a graph no rule changes) each node's sources are final when the
    # node is reached, so most nodes cost one step of a for loop. A node rebuilt on changed sources gets the rules
    # here too; only the graph a rule returns is new, and _sources_first_from walks it (the node and its rebuilt
    # form stay active meanwhile, so a rule rebuilding its own input is still caught).
    # Until a rule first fires, every node met so far is its own final form, so no node's sources can have changed:
    # the sources are looked up only from then on.
    final_form = done.__getitem__
    fired_yet = False
    for node in sink.toposort():
        if node in done:
            continue  # reached already through a rule's result
        current = node
        sources = node.src
        if fired_yet and sources:
            new_sources = tuple(map(final_form, sources))
            if new_sources != sources:
                current = UOp(node.op, node.dtype, new_sources, node.arg, node.tag)
                if (final := done.get(current)) is not None:
                    done[node] = final
                    continue
        result = _apply_rules(current, rules, ctx, fired)
        if result is None:
            done[node] = done[current] = current
        else:
            fired_yet = True
            _sources_first_from(result, rules, ctx, done, fired, {node, current})
            done[node] = done[current] = done[result]


def _sources_first_from(
    root: UOp,
    rules: RulesByOp,
    ctx: Any,
    done: dict[UOp, UOp],
    fired: Fired | None,
    active: set[UOp] | None = None,
) -> None:
    # The walk of a graph a rule returned (or of any graph whose nodes may already have results). A node whose
    # sources are all final is finished where it is met, without a trip through the stack.
    # `done` maps a node to its final form (every final form maps to itself). `active` holds the nodes whose
    # result is pending: meeting one again means a rule keeps rebuilding its own input. A stack entry is a node
    # to visit, or (node, None): its sources are final, build it, or (node, target): node's result is target's.
    if active is None:
        active = set()
    final_form = done.__getitem__
    stack: list[UOp | tuple[UOp, UOp | None]] = [root]
    push = stack.append
    pop = stack.pop
    while stack:
        entry = pop()
        if type(entry) is tuple:
            node, target = entry
            if target is not None:
                done[node] = done[target]
                active.discard(node)
                continue
        else:
            node = entry  # type: ignore[assignment]
            if node in done:
                continue
            if node in active:
                raise RuntimeError(f"graph_rewrite does not terminate: a rule rebuilds a graph containing {node.op!r}")
            waiting = False
            for source in node.src:
                if source not in done:
                    waiting = True
                    break
            if waiting:
                active.add(node)
                push((node, None))
                for source in reversed(node.src):
                    if source not in done:
                        push(source)
                continue
            # every source is final: build the node now
        sources = node.src
        if sources:
            new_sources = tuple(map(final_form, sources))
            if new_sources != sources:
                rebuilt = UOp(node.op, node.dtype, new_sources, node.arg, node.tag)
                active.add(node)
                push((node, rebuilt))
                push(rebuilt)
                continue
        result = _apply_rules(node, rules, ctx, fired)
        if result is None:
            done[node] = node
            active.discard(node)
        else:
            active.add(node)
            push((node, result))
            push(result)


def _apply_rules(node: UOp, rules: RulesByOp, ctx: Any, fired: Fired | None) -> UOp | None:
    # the result of the first rule that fires on `node` (PatternMatcher.rewrite's loop), or None
    for matcher, callback, wants_ctx, rule in rules[node.op]:
        store: dict[str, UOp] = {}
        if matcher(node, store):
            result = callback(ctx=ctx, **store) if wants_ctx else callback(**store)
            if result is not None and result is not node:
                if fired is not None:
                    fired(rule, node, result)
                if type(result) is not UOp:
                    _bad_result(node, result)
                return result  # type: ignore[no-any-return]
    return None


def _bottom_up_from(root: UOp, rules: RulesByOp, ctx: Any, done: dict[UOp, UOp], fired: Fired | None) -> None:
    # like _sources_first_from, but the rules are tried on a node before its sources, and again after a source
    # changed (when the node is rebuilt on the new sources)
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
            replaced = _rewrite_node(node, rules, ctx, fired)
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
            done[node] = node
            active.discard(node)
        else:
            done[node] = done[current]
            active.discard(node)


def _rewrite_node(node: UOp, rules: RulesByOp, ctx: Any, fired: Fired | None) -> UOp:
    # apply rules to one node until none fires (bottom-up mode); a rewrite cycle a -> b -> a is an error
    seen: set[UOp] | None = None
    current = node
    while (replaced := _apply_rules(current, rules, ctx, fired)) is not None:
        if seen is None:
            seen = {node}
        if replaced in seen:
            raise RuntimeError(f"graph_rewrite does not terminate: rules cycle through {replaced.op!r} nodes")
        seen.add(replaced)
        current = replaced
    return current


def _bad_result(node: UOp, replaced: object) -> None:
    raise TypeError(f"a rewrite rule for {node.op!r} returned {replaced!r}; rules must return a UOp or None")
