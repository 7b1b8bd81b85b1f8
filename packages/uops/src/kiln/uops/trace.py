"""The rewrite-trace recorder: what each graph_rewrite did, for kiln.viz. It costs one boolean check when off.

Rewrites are grouped: a layer above opens a `trace_group` around the work of one unit (codegen: one kernel, kiln.tensor:
one schedule) and attaches what a viewer needs to it (`TraceGroup.info`: JSON values; `TraceGroup.uops`: graphs).
At exit, with `VIZ` (or `PROFILE`) on, the trace and the files of registered writers (the runtime's profile) go to
one directory (`VIZ_OUT`), and with `VIZ` on and `VIZ_SERVE` left on, `python -m kiln.viz --open DIR` is run on it
in a child process (this package never imports kiln.viz: the viewer only reads the files).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kiln.uops.files import write_atomically
from kiln.uops.knobs import knobs
from kiln.uops.uop import UOp

TRACE_FORMAT = "kiln-rewrite-trace"
TRACE_VERSION = 2
TRACE_FILE_NAME = "trace.json"


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
    group: TraceGroup | None = None


@dataclass
class TraceGroup:
    """The rewrites of one unit of work (`kind` "kernel": one get_program; "schedule": one scheduled graph).

    Attributes:
        kind: what the group is ("kernel", "schedule", ...).
        name: its display name (filled in by the layer that opens it, maybe at the end).
        info: JSON-serializable facts for the viewer (source text, launch sizes, opts, estimates, ...).
        uops: named graphs stored in the trace's node table (a kernel's AST, a schedule's kernel ASTs).
        rewrites: its graph_rewrite calls, in order.
    """

    kind: str
    name: str
    info: dict[str, Any] = field(default_factory=dict)
    uops: dict[str, UOp | list[UOp]] = field(default_factory=dict)
    rewrites: list[RewriteTrace] = field(default_factory=list, repr=False)


class _TraceState:
    # graph_rewrite reads `enabled` once per call; nothing is checked per node when it is False
    def __init__(self) -> None:
        self.enabled: bool = knobs.VIZ
        self.traces: list[RewriteTrace] = []
        self.groups: list[TraceGroup] = []
        self.open_groups: list[TraceGroup] = []


STATE = _TraceState()


def tracing_enabled() -> bool:
    """Whether graph_rewrite records traces now."""
    return STATE.enabled


def enable_tracing(enabled: bool = True) -> None:
    """Turn recording on (or off) for every later graph_rewrite."""
    STATE.enabled = enabled


@contextlib.contextmanager
def tracing() -> Iterator[list[RewriteTrace]]:
    """Record the graph_rewrite calls inside the block into the yielded list (also kept for `save_trace`).

    Groups opened inside the block are kept in `recorded_groups()` as usual.
    """
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
    """Drop the recorded traces and groups (they keep their graphs alive)."""
    STATE.traces.clear()
    STATE.groups.clear()
    STATE.open_groups.clear()


def recorded_groups() -> list[TraceGroup]:
    """Every group recorded so far."""
    return list(STATE.groups)


@contextlib.contextmanager
def trace_group(kind: str, name: str = "") -> Iterator[TraceGroup | None]:
    """Group the graph_rewrite calls inside the block (yields None, and records nothing, when tracing is off).

    Groups nest: a rewrite belongs to the innermost open group.
    """
    if not STATE.enabled:
        yield None
        return
    group = TraceGroup(kind, name)
    STATE.groups.append(group)
    STATE.open_groups.append(group)
    try:
        yield group
    finally:
        STATE.open_groups.pop()


def begin_trace(name: str | None, bottom_up: bool, root: UOp) -> RewriteTrace:
    """Start recording one graph_rewrite (called by graph_rewrite when tracing is on)."""
    record = RewriteTrace(name, bottom_up, root)
    if STATE.open_groups:
        record.group = STATE.open_groups[-1]
        record.group.rewrites.append(record)
    STATE.traces.append(record)
    return record


def traces_to_json(traces: list[RewriteTrace], groups: list[TraceGroup] | None = None) -> dict[str, Any]:
    """The JSON document of `traces` and `groups`: graphs are stored once as a node table, referenced by integer ids.

    A group's `rewrites` are indices into `traces`; rewrites of groups not given keep their group index as None.
    """
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

    group_list = [] if groups is None else groups
    group_number = {id(group): number for number, group in enumerate(group_list)}
    trace_number = {id(record): number for number, record in enumerate(traces)}
    rewrites = []
    for record in traces:
        rewrites.append(
            {
                "name": record.name,
                "group": None if record.group is None else group_number.get(id(record.group)),
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
    json_groups = []
    for group in group_list:
        members = [trace_number[id(record)] for record in group.rewrites if id(record) in trace_number]
        graphs: dict[str, int | list[int]] = {}
        for key, value in group.uops.items():
            graphs[key] = [node_id(root) for root in value] if isinstance(value, list) else node_id(value)
        json_groups.append(
            {"kind": group.kind, "name": group.name, "info": group.info, "uops": graphs, "rewrites": members}
        )
    return {
        "format": TRACE_FORMAT,
        "version": TRACE_VERSION,
        "nodes": nodes,
        "rewrites": rewrites,
        "groups": json_groups,
    }


def save_trace(
    path: str | os.PathLike[str], traces: list[RewriteTrace] | None = None, groups: list[TraceGroup] | None = None
) -> None:
    """Write `traces` and `groups` (default: everything recorded) as a JSON file that kiln.viz reads; the write is
    atomic (`kiln.uops.files.write_atomically`): a failing save leaves the old file."""
    if traces is None:
        traces, groups = STATE.traces, STATE.groups if groups is None else groups
    document = traces_to_json(traces, groups)
    write_atomically(path, [json.dumps(document, separators=(",", ":")).encode()])


# -- files at exit ----------------------------------------------------------------------------------------------------

ExitWriter = Callable[[str], "str | None"]
_EXIT_WRITERS: list[ExitWriter] = []
_EXIT_OUTPUT = [True]


def disable_exit_output() -> None:
    """Write nothing and serve nothing at exit, whatever VIZ / PROFILE say (the viewer's own process calls this: it
    inherits VIZ=1 from a traced script's environment, and must neither overwrite the files it serves nor start
    another server when it stops)."""
    _EXIT_OUTPUT[0] = False


def add_exit_writer(writer: ExitWriter) -> None:
    """Register `writer(directory) -> path or None`, run at exit before the trace is written (the runtime's profile)."""
    if writer not in _EXIT_WRITERS:
        _EXIT_WRITERS.append(writer)


def output_directory() -> str:
    """Where the files of this process go: `VIZ_OUT`, or a fresh kiln-viz-<pid> folder in the temp directory."""
    chosen = knobs.VIZ_OUT or os.path.join(tempfile.gettempdir(), f"kiln-viz-{os.getpid()}")
    os.makedirs(chosen, exist_ok=True)
    return chosen


def write_output_files() -> list[str]:
    """Write the registered writers' files and (with tracing on) the trace into `output_directory()`; their paths."""
    wanted = STATE.enabled or knobs.VIZ or knobs.PROFILE
    if not wanted:
        return []
    directory = output_directory()
    written = [path for writer in list(_EXIT_WRITERS) if (path := writer(directory)) is not None]
    if STATE.traces or STATE.groups or knobs.VIZ:
        trace_path = os.path.join(directory, TRACE_FILE_NAME)
        save_trace(trace_path)
        written.append(trace_path)
    return written


def _at_exit() -> None:
    if not _EXIT_OUTPUT[0] or not (knobs.VIZ or knobs.PROFILE):
        return
    try:
        written = write_output_files()
    except Exception as error:  # at exit: report, never raise into the interpreter's shutdown
        print(f"kiln: could not write the viz files: {error}", file=sys.stderr)
        return
    if not written:
        return
    directory = os.path.dirname(written[-1])
    print(f"kiln: wrote {', '.join(written)}", file=sys.stderr)
    if not (knobs.VIZ and knobs.VIZ_SERVE):
        return
    if importlib.util.find_spec("kiln.viz") is None:
        print("kiln: install kiln-viz to browse them (python -m kiln.viz --open DIR)", file=sys.stderr)
        return
    environment = dict(os.environ, VIZ="0", PROFILE="0")  # the viewer records nothing of its own
    with contextlib.suppress(KeyboardInterrupt):
        subprocess.run([sys.executable, "-m", "kiln.viz", "--open", directory], check=False, env=environment)


atexit.register(_at_exit)
