"""The rewrite-trace recorder: what each graph_rewrite did, for kiln.viz. It costs one boolean check when off."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kiln.uops.knobs import knobs
from kiln.uops.uop import UOp

TRACE_FORMAT = "kiln-rewrite-trace"
TRACE_VERSION = 1


@dataclass
class RewriteStep:
    """One fired rule: where its callback is defined, the pattern, and the node before and after."""

    location: str
    pattern: str
    before: UOp
    after: UOp


@dataclass
class RewriteTrace:
    """One graph_rewrite call: its name, input graph, fired rules in order, and result graph."""

    name: str | None
    bottom_up: bool
    input: UOp
    steps: list[RewriteStep] = field(default_factory=list)
    result: UOp | None = None


class _TraceState:
    # graph_rewrite reads `enabled` once per call; nothing is checked per node when it is False
    def __init__(self) -> None:
        self.enabled: bool = knobs.VIZ
        self.traces: list[RewriteTrace] = []


STATE = _TraceState()


def tracing_enabled() -> bool:
    """Whether graph_rewrite records traces now."""
    return STATE.enabled


def enable_tracing(enabled: bool = True) -> None:
    """Turn recording on (or off) for every later graph_rewrite."""
    STATE.enabled = enabled


@contextlib.contextmanager
def tracing() -> Iterator[list[RewriteTrace]]:
    """Record the graph_rewrite calls inside the block into the yielded list (also kept for `save_trace`)."""
    previous_enabled, previous_traces = STATE.enabled, STATE.traces
    recorded: list[RewriteTrace] = []
    STATE.enabled, STATE.traces = True, recorded
    try:
        yield recorded
    finally:
        STATE.enabled, STATE.traces = previous_enabled, previous_traces
        previous_traces.extend(recorded)


def recorded_traces() -> list[RewriteTrace]:
    """Every trace recorded so far (outside and after `tracing()` blocks)."""
    return list(STATE.traces)


def clear_traces() -> None:
    """Drop the recorded traces (they keep their graphs alive)."""
    STATE.traces.clear()


def begin_trace(name: str | None, bottom_up: bool, root: UOp) -> RewriteTrace:
    """Start recording one graph_rewrite (called by graph_rewrite when tracing is on)."""
    record = RewriteTrace(name, bottom_up, root)
    STATE.traces.append(record)
    return record


def traces_to_json(traces: list[RewriteTrace]) -> dict[str, Any]:
    """The JSON document of `traces`: graphs are stored once as a node table, referenced by integer ids."""
    node_ids: dict[UOp, int] = {}
    nodes: list[dict[str, Any]] = []

    def node_id(root: UOp) -> int:
        if root not in node_ids:
            for node in root.toposort(gate=lambda node: node not in node_ids):
                if node in node_ids:
                    continue
                node_ids[node] = len(nodes)
                entry: dict[str, Any] = {
                    "op": node.op.name,
                    "dtype": repr(node.dtype),
                    "arg": repr(node.arg),
                    "src": [node_ids[source] for source in node.src],
                }
                if node.tag is not None:
                    entry["tag"] = repr(node.tag)
                nodes.append(entry)
        return node_ids[root]

    rewrites = []
    for record in traces:
        rewrites.append(
            {
                "name": record.name,
                "bottom_up": record.bottom_up,
                "input": node_id(record.input),
                "result": None if record.result is None else node_id(record.result),
                "steps": [
                    {
                        "location": step.location,
                        "pattern": step.pattern,
                        "before": node_id(step.before),
                        "after": node_id(step.after),
                    }
                    for step in record.steps
                ],
            }
        )
    return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "nodes": nodes, "rewrites": rewrites}


def save_trace(path: str | os.PathLike[str], traces: list[RewriteTrace] | None = None) -> None:
    """Write `traces` (default: every recorded trace) as a JSON file that kiln.viz reads."""
    document = traces_to_json(STATE.traces if traces is None else traces)
    with open(path, "w", encoding="utf-8") as file:
        json.dump(document, file)
