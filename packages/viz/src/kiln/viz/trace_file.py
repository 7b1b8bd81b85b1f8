"""Reading the files the lower layers write: the rewrite trace (kiln.uops.trace) and the profile (Chrome trace events
from kiln.runtime). Every problem is a `TraceFileError` naming the file and what is wrong with it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PROFILE_NAME", "TRACE_NAME", "TraceFileError", "VizFiles", "load_files"]

TRACE_FORMAT = "kiln-rewrite-trace"
SUPPORTED_VERSIONS = (1, 2)
TRACE_NAME = "trace.json"
PROFILE_NAME = "profile.json"


class TraceFileError(ValueError):
    """A trace or profile file that cannot be read: missing, not JSON, truncated, or not in the expected shape."""


@dataclass
class VizFiles:
    """What was read: the trace document (or None), the profile's events (or None), and the paths they came from."""

    trace: dict[str, Any] | None = None
    profile: list[dict[str, Any]] | None = None
    profile_events: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


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
        return json.loads(text)
    except json.JSONDecodeError as error:
        cut = error.pos >= len(text.rstrip()) - 1 or not text.rstrip().endswith(("}", "]"))
        ending = " (the file looks truncated)" if cut else ""
        raise TraceFileError(
            f"{path}: not valid JSON{ending}: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None


def _check_trace(path: Path, document: dict[str, Any]) -> dict[str, Any]:
    version = document.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise TraceFileError(f"{path}: trace version {version!r} is not one this viewer reads {SUPPORTED_VERSIONS}")
    nodes, rewrites = document.get("nodes"), document.get("rewrites")
    if not isinstance(nodes, list) or not isinstance(rewrites, list):
        raise TraceFileError(f"{path}: a trace needs 'nodes' and 'rewrites' lists")
    for number, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("op"), str) or not isinstance(node.get("src"), list):
            raise TraceFileError(f"{path}: node {number} is malformed (needs 'op' and 'src')")
        for source in node["src"]:
            if not isinstance(source, int) or not 0 <= source < number:
                raise TraceFileError(f"{path}: node {number} has source {source!r}, not an earlier node")
    count = len(nodes)

    def check_id(value: Any, where: str, optional: bool = False) -> None:
        if value is None and optional:
            return
        if not isinstance(value, int) or not 0 <= value < count:
            raise TraceFileError(f"{path}: {where} refers to node {value!r}, the trace has {count} nodes")

    for number, rewrite in enumerate(rewrites):
        if not isinstance(rewrite, dict) or not isinstance(rewrite.get("steps"), list):
            raise TraceFileError(f"{path}: rewrite {number} is malformed (needs 'steps')")
        check_id(rewrite.get("input"), f"rewrite {number} input")
        check_id(rewrite.get("result"), f"rewrite {number} result", optional=True)
        for index, step in enumerate(rewrite["steps"]):
            if not isinstance(step, dict):
                raise TraceFileError(f"{path}: rewrite {number} step {index} is malformed")
            check_id(step.get("before"), f"rewrite {number} step {index}")
            check_id(step.get("after"), f"rewrite {number} step {index}")
    groups = document.setdefault("groups", [])
    if not isinstance(groups, list):
        raise TraceFileError(f"{path}: 'groups' must be a list")
    for number, group in enumerate(groups):
        if not isinstance(group, dict) or not isinstance(group.get("rewrites", []), list):
            raise TraceFileError(f"{path}: group {number} is malformed")
        for member in group.get("rewrites", []):
            if not isinstance(member, int) or not 0 <= member < len(rewrites):
                raise TraceFileError(f"{path}: group {number} lists rewrite {member!r}, there are {len(rewrites)}")
        group.setdefault("info", {})
        group.setdefault("uops", {})
    return document


def _check_profile(path: Path, document: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # (the complete events with "pid"/"tid" replaced by the process / thread names of the metadata events, every event)
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise TraceFileError(f"{path}: a profile needs a 'traceEvents' list (Chrome trace-event format)")
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    for number, event in enumerate(events):
        if not isinstance(event, dict):
            raise TraceFileError(f"{path}: event {number} is not an object")
        name = (event.get("args") or {}).get("name") if isinstance(event.get("args"), dict) else None
        if event.get("ph") == "M" and event.get("name") == "process_name" and isinstance(name, str):
            processes[event.get("pid")] = name
        elif event.get("ph") == "M" and event.get("name") == "thread_name" and isinstance(name, str):
            threads[(event.get("pid"), event.get("tid"))] = name
    checked = []
    for number, event in enumerate(events):
        if event.get("ph") != "X":
            continue  # metadata and instant events carry no duration to draw
        for key in ("ts", "dur"):
            if not isinstance(event.get(key), int | float):
                raise TraceFileError(f"{path}: event {number} has no numeric {key!r}")
        pid, tid = event.get("pid"), event.get("tid")
        named = dict(event, pid=processes.get(pid, str(pid)), tid=threads.get((pid, tid), str(tid)))
        checked.append(named)
    return checked, events


def load_files(paths: list[str | os.PathLike[str]]) -> VizFiles:
    """Read every path: a directory (its trace.json and profile.json), a trace file or a profile file (by contents)."""
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
