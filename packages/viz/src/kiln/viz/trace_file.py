"""Reading the files the lower layers write: the rewrite trace (kiln.uops.trace) and the profile (Chrome trace events
from kiln.runtime).

A trace is untrusted input (it may come from another machine): every problem, whatever the bytes, is a
`TraceFileError` (a ValueError) naming the file and the field at fault, never another exception. The JSON may nest
at most `MAX_DEPTH` levels, its numbers must be finite and of magnitude at most `MAX_MAGNITUDE`, and every field the
viewer reads is checked for its type and its references (node, rewrite and kernel ids) before any of it is used.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["MAX_DEPTH", "MAX_MAGNITUDE", "PROFILE_NAME", "TRACE_NAME", "TraceFileError", "VizFiles", "load_files"]

TRACE_FORMAT = "kiln-rewrite-trace"
SUPPORTED_VERSIONS = (1, 2)
TRACE_NAME = "trace.json"
PROFILE_NAME = "profile.json"
MAX_DEPTH = 32
"""The deepest nesting of arrays and objects accepted (kiln's own files nest about 10 levels)."""
MAX_MAGNITUDE = 2.0**63
"""The largest magnitude of a number accepted: sums of many of them stay finite, so every answer is valid JSON."""


class TraceFileError(ValueError):
    """A trace or profile file that cannot be read: missing, not JSON, truncated, or not in the expected shape."""


@dataclass
class VizFiles:
    """What was read: the trace document (or None), the profile's events (or None), and the paths they came from."""

    trace: dict[str, Any] | None = None
    profile: list[dict[str, Any]] | None = None
    profile_events: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is not finite")
    return value


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _check_depth(path: Path, document: Any) -> None:
    # level by level, without recursion (a hostile file must not make the checker itself recurse); json.loads makes
    # plain dicts and lists only
    level = [document] if type(document) in (dict, list) else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise TraceFileError(f"{path}: the JSON nests deeper than {MAX_DEPTH} levels")
        level = [
            child
            for value in level
            for child in (value.values() if type(value) is dict else value)
            if type(child) is dict or type(child) is list
        ]


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise TraceFileError(f"{path}: cannot be read ({error})") from None
    if not text.strip():
        raise TraceFileError(f"{path}: the file is empty")
    try:
        document = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        cut = error.pos >= len(text.rstrip()) - 1 or not text.rstrip().endswith(("}", "]"))
        ending = " (the file looks truncated)" if cut else ""
        raise TraceFileError(
            f"{path}: not valid JSON{ending}: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except RecursionError:
        raise TraceFileError(f"{path}: the JSON nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:  # a hook's refusal (NaN, 1e999) or an integer of too many digits
        raise TraceFileError(f"{path}: not a number the viewer reads: {error}") from None
    _check_depth(path, document)
    return document


class _Fields:
    """Type checks of one file's fields; each failure names the file, the field and what was expected."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, expected: str, value: Any) -> NoReturn:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise TraceFileError(f"{self.path}: {where} must be {expected}, got {shown}")

    def object(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, "an object", value)
        return value

    def list(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(where, "a list", value)
        return value

    def text(self, value: Any, where: str, optional: bool = True) -> None:
        if not (isinstance(value, str) or (optional and value is None)):
            self.fail(where, "a string" + (" or null" if optional else ""), value)

    def number(self, value: Any, where: str, optional: bool = True, minimum: float = -MAX_MAGNITUDE) -> None:
        if value is None and optional:
            return
        if not isinstance(value, int | float) or isinstance(value, bool) or not minimum <= value <= MAX_MAGNITUDE:
            self.fail(where, f"a number in [{minimum:g}, {MAX_MAGNITUDE:g}]", value)

    def index(self, value: Any, where: str, count: int, what: str, optional: bool = False) -> None:
        if value is None and optional:
            return
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
            self.fail(where, f"the id of {what} (0 <= id < {count})", value)

    def sizes(self, value: Any, where: str, optional: bool = True) -> None:
        # a shape or launch size: numbers, or strings for symbolic sizes
        if value is None and optional:
            return
        for number, item in enumerate(self.list(value, where)):
            if isinstance(item, str):
                continue
            self.number(item, f"{where}[{number}]", optional=False)

    def texts(self, value: Any, where: str) -> None:
        for number, item in enumerate(self.list(value, where)):
            self.text(item, f"{where}[{number}]", optional=False)


_TEXT_OR_NULL = (str, type(None))


def _plain_node(node: Any, number: int) -> bool:
    # the common case, checked fast (a trace has thousands of nodes); anything else takes the path that names the field
    if type(node) is not dict or type(node.get("op")) is not str or type(sources := node.get("src")) is not list:
        return False
    if type(node.get("dtype")) not in _TEXT_OR_NULL or type(node.get("arg")) not in _TEXT_OR_NULL:
        return False
    return type(node.get("tag")) in _TEXT_OR_NULL and all(type(s) is int and 0 <= s < number for s in sources)


def _check_nodes(fields: _Fields, nodes: list[Any]) -> None:
    for number, node in enumerate(nodes):
        if _plain_node(node, number):
            continue
        where = f"nodes[{number}]"
        fields.object(node, where)
        fields.text(node.get("op"), f"{where}.op", optional=False)
        for key in ("dtype", "arg", "tag"):
            fields.text(node.get(key), f"{where}.{key}")
        for position, source in enumerate(fields.list(node.get("src"), f"{where}.src")):
            fields.index(source, f"{where}.src[{position}]", number, "an earlier node")


def _check_rewrites(fields: _Fields, rewrites: list[Any], nodes: int) -> None:
    for number, rewrite in enumerate(rewrites):
        where = f"rewrites[{number}]"
        fields.object(rewrite, where)
        fields.text(rewrite.get("name"), f"{where}.name")
        fields.index(rewrite.get("input"), f"{where}.input", nodes, "a node")
        fields.index(rewrite.get("result"), f"{where}.result", nodes, "a node", optional=True)
        for index, step in enumerate(fields.list(rewrite.get("steps"), f"{where}.steps")):
            at = f"{where}.steps[{index}]"
            fields.object(step, at)
            fields.index(step.get("before"), f"{at}.before", nodes, "a node")
            fields.index(step.get("after"), f"{at}.after", nodes, "a node")
            fields.text(step.get("location"), f"{at}.location")
            fields.text(step.get("pattern"), f"{at}.pattern")


def _check_kernel_info(fields: _Fields, info: dict[str, Any], where: str) -> None:
    for key in ("key", "name", "device", "source", "linear", "disassembly", "disassembly_note", "language"):
        fields.text(info.get(key), f"{where}.{key}")
    fields.sizes(info.get("global_size"), f"{where}.global_size")
    fields.sizes(info.get("local_size"), f"{where}.local_size")
    fields.texts(info.get("opts", []), f"{where}.opts")
    fields.number(info.get("flops"), f"{where}.flops")
    fields.number(info.get("global_bytes"), f"{where}.global_bytes")


def _check_schedule_info(fields: _Fields, info: dict[str, Any], asts: list[Any], where: str) -> None:
    entries = fields.list(info.get("kernels", []), f"{where}.kernels")
    if len(entries) != len(asts):
        fields.fail(f"{where}.kernels", f"one entry per kernel of uops.kernels ({len(asts)})", entries)
    for number, entry in enumerate(entries):
        at = f"{where}.kernels[{number}]"
        fields.object(entry, at)
        fields.text(entry.get("device"), f"{at}.device", optional=False)
        fields.texts(entry.get("fused_ops"), f"{at}.fused_ops")
        fields.number(entry.get("fused_count"), f"{at}.fused_count", optional=False)
        for index, output in enumerate(fields.list(entry.get("outputs"), f"{at}.outputs")):
            fields.object(output, f"{at}.outputs[{index}]")
            fields.text(output.get("op"), f"{at}.outputs[{index}].op", optional=False)
            fields.text(output.get("reason"), f"{at}.outputs[{index}].reason", optional=False)
            fields.sizes(output.get("shape"), f"{at}.outputs[{index}].shape", optional=False)
    for number, decision in enumerate(fields.list(info.get("decisions", []), f"{where}.decisions")):
        at = f"{where}.decisions[{number}]"
        fields.object(decision, at)
        for key in ("rule", "description", "decision"):
            fields.text(decision.get(key), f"{at}.{key}", optional=False)
        fields.text(decision.get("location"), f"{at}.location")
        if not isinstance(decision.get("cut", True), bool):
            fields.fail(f"{at}.cut", "true or false", decision.get("cut"))


def _check_groups(fields: _Fields, groups: list[Any], rewrites: int, nodes: int) -> None:
    for number, group in enumerate(groups):
        where = f"groups[{number}]"
        fields.object(group, where)
        fields.text(group.get("kind"), f"{where}.kind")
        fields.text(group.get("name"), f"{where}.name")
        for index, member in enumerate(fields.list(group.setdefault("rewrites", []), f"{where}.rewrites")):
            fields.index(member, f"{where}.rewrites[{index}]", rewrites, "a rewrite")
        info = fields.object(group.setdefault("info", {}), f"{where}.info")
        uops = fields.object(group.setdefault("uops", {}), f"{where}.uops")
        fields.index(uops.get("ast"), f"{where}.uops.ast", nodes, "a node", optional=True)
        asts = fields.list(uops.get("kernels", []), f"{where}.uops.kernels")
        for index, ast in enumerate(asts):
            fields.index(ast, f"{where}.uops.kernels[{index}]", nodes, "a node")
        _check_kernel_info(fields, info, f"{where}.info")  # the page shows these facts for any group it opens
        if group.get("kind") == "schedule":
            _check_schedule_info(fields, info, asts, f"{where}.info")


def _check_trace(path: Path, document: dict[str, Any]) -> dict[str, Any]:
    version = document.get("version")
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        raise TraceFileError(f"{path}: trace version {version!r} is not one this viewer reads {SUPPORTED_VERSIONS}")
    fields = _Fields(path)
    nodes = fields.list(document.get("nodes"), "nodes")
    rewrites = fields.list(document.get("rewrites"), "rewrites")
    _check_nodes(fields, nodes)
    _check_rewrites(fields, rewrites, len(nodes))
    _check_groups(fields, fields.list(document.setdefault("groups", []), "groups"), len(rewrites), len(nodes))
    return document


def _check_profile(path: Path, document: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # (the complete events with "pid"/"tid" replaced by the process / thread names of the metadata events, every event)
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise TraceFileError(f"{path}: a profile needs a 'traceEvents' list (Chrome trace-event format)")
    fields = _Fields(path)
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    for number, event in enumerate(events):
        where = f"traceEvents[{number}]"
        fields.object(event, where)
        for key in ("pid", "tid"):
            if not (event.get(key) is None or isinstance(event.get(key), int | str)):
                fields.fail(f"{where}.{key}", "an integer or a string", event.get(key))
        args = fields.object(event.get("args", {}), f"{where}.args") if event.get("args") is not None else {}
        name = args.get("name")
        if event.get("ph") == "M" and event.get("name") == "process_name" and isinstance(name, str):
            processes[event.get("pid")] = name
        elif event.get("ph") == "M" and event.get("name") == "thread_name" and isinstance(name, str):
            threads[(event.get("pid"), event.get("tid"))] = name
    checked = []
    for number, event in enumerate(events):
        if event.get("ph") != "X":
            continue  # metadata and instant events carry no duration to draw
        where = f"traceEvents[{number}]"
        for key, minimum in (("ts", -MAX_MAGNITUDE), ("dur", 0.0)):
            if not isinstance(event.get(key), int | float):
                raise TraceFileError(f"{path}: event {number} has no numeric {key!r}")
            fields.number(event.get(key), f"{where}.{key}", optional=False, minimum=minimum)
        fields.text(event.get("name"), f"{where}.name")
        fields.text(event.get("cat"), f"{where}.cat")
        args = event.get("args") or {}
        fields.text(args.get("kernel"), f"{where}.args.kernel")
        fields.number(args.get("flops"), f"{where}.args.flops")
        fields.number(args.get("bytes"), f"{where}.args.bytes")
        pid, tid = event.get("pid"), event.get("tid")
        named = dict(event, pid=processes.get(pid, str(pid)), tid=threads.get((pid, tid), str(tid)))
        checked.append(named)
    return checked, events


def load_files(paths: list[str | os.PathLike[str]]) -> VizFiles:
    """Read every path: a directory (its trace.json and profile.json), a trace file or a profile file (by contents).

    Raises TraceFileError (a ValueError) naming the file and the field for anything it cannot read."""
    found = VizFiles()
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            inside = [path / name for name in (TRACE_NAME, PROFILE_NAME) if (path / name).exists()]
            if not inside:
                raise TraceFileError(f"{path}: the directory has neither {TRACE_NAME} nor {PROFILE_NAME}")
            files.extend(inside)
        else:
            files.append(path)
    for path in files:
        document = _read_json(path)
        if isinstance(document, dict) and document.get("format") == TRACE_FORMAT:
            if found.trace is not None:
                raise TraceFileError(f"{path}: only one rewrite trace can be opened at a time")
            found.trace = _check_trace(path, document)
        elif (isinstance(document, dict) and "traceEvents" in document) or isinstance(document, list):
            events, everything = _check_profile(path, document)
            found.profile = events if found.profile is None else found.profile + events
            found.profile_events.extend(everything)
        else:
            raise TraceFileError(f"{path}: neither a kiln rewrite trace nor a Chrome trace-event profile")
        found.paths.append(str(path))
    return found
