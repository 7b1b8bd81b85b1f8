"""The viewer's model: what each JSON endpoint returns, computed from the loaded files (lazily, cached)."""

from __future__ import annotations

import threading
from typing import Any

from kiln.viz.dot import GraphvizError, render_svg, to_dot
from kiln.viz.graphs import GraphStore
from kiln.viz.trace_file import VizFiles

__all__ = ["LOOSE_GROUP", "MAX_DRAWN_NODES", "NotFound", "VizData"]

MAX_DRAWN_NODES = 250
"""A graph larger than this is drawn in part (the changed nodes' neighbourhood and the nodes nearest the root)."""
LOOSE_GROUP = "loose"
"""The group id of rewrites that ran outside every group (tensor-graph rewrites between kernels)."""


class NotFound(LookupError):
    """A kernel, rewrite or step that the trace does not have."""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class VizData:
    """Answers the endpoints from one trace document and one profile (either may be missing)."""

    def __init__(self, files: VizFiles, max_drawn: int = MAX_DRAWN_NODES) -> None:
        self.files = files
        self.max_drawn = max_drawn
        trace = files.trace or {"nodes": [], "rewrites": [], "groups": []}
        self.rewrites: list[dict[str, Any]] = trace["rewrites"]
        self.groups: list[dict[str, Any]] = trace["groups"]
        self._store: GraphStore | None = None
        self._store_nodes = trace["nodes"]
        self._lock = threading.Lock()
        self._svg: dict[tuple[int, int], str] = {}
        grouped = {member for group in self.groups for member in group.get("rewrites", [])}
        self.loose = [number for number in range(len(self.rewrites)) if number not in grouped]
        self.kernel_of_key: dict[str, int] = {}
        self.kernel_of_ast: dict[int, int] = {}
        for number, group in enumerate(self.groups):
            if group.get("kind") == "kernel":
                key = group["info"].get("key")
                if isinstance(key, str):
                    self.kernel_of_key.setdefault(key, number)
                ast = group.get("uops", {}).get("ast")
                if isinstance(ast, int):
                    self.kernel_of_ast.setdefault(ast, number)
        self.schedule_of_kernel: dict[int, tuple[int, int]] = {}
        for number, group in enumerate(self.groups):
            if group.get("kind") == "schedule":
                for index, ast in enumerate(group.get("uops", {}).get("kernels", [])):
                    kernel = self.kernel_of_ast.get(ast)
                    if kernel is not None:
                        self.schedule_of_kernel.setdefault(kernel, (number, index))
        self.runs = self._profile_totals()

    @property
    def store(self) -> GraphStore:
        """The node table (interned on first use: opening a big trace's kernel list does not wait for it)."""
        with self._lock:
            if self._store is None:
                self._store = GraphStore(self._store_nodes, self.rewrites)
            return self._store

    # -- profile ------------------------------------------------------------------------------------------------------
    def _profile_totals(self) -> dict[int, dict[str, float]]:
        totals: dict[int, dict[str, float]] = {}
        for event in self.files.profile or []:
            key = (event.get("args") or {}).get("kernel")
            kernel = self.kernel_of_key.get(key) if isinstance(key, str) else None
            if kernel is None:
                continue
            entry = totals.setdefault(kernel, {"runs": 0, "total_us": 0.0, "flops": 0.0, "bytes": 0.0})
            entry["runs"] += 1
            entry["total_us"] += float(event["dur"])
            entry["flops"] += _number(event["args"].get("flops")) or 0.0
            entry["bytes"] += _number(event["args"].get("bytes")) or 0.0
        return totals

    @staticmethod
    def _rates(flops: float, memory: float, micros: float) -> tuple[float | None, float | None]:
        if micros <= 0:
            return None, None
        return flops / micros / 1e3, memory / micros / 1e3

    # -- endpoints ----------------------------------------------------------------------------------------------------
    def kernels(self) -> dict[str, Any]:
        """/api/kernels: every kernel with its facts and profile totals; the other groups; what was loaded."""
        rows = []
        others = []
        for number, group in enumerate(self.groups):
            info = group["info"]
            if group.get("kind") != "kernel":
                others.append({"id": number, "kind": group.get("kind"), "name": group.get("name", "")})
                continue
            row: dict[str, Any] = {
                "id": number,
                "name": info.get("name", group.get("name", "")),
                "device": info.get("device", ""),
                "global_size": info.get("global_size"),
                "local_size": info.get("local_size"),
                "opts": info.get("opts", []),
                "flops": info.get("flops"),
                "global_bytes": info.get("global_bytes"),
                "shape": self._output_shapes(number),
                "rewrites": len(group.get("rewrites", [])),
                "steps": sum(len(self.rewrites[r]["steps"]) for r in group.get("rewrites", [])),
            }
            totals = self.runs.get(number)
            if totals is not None:
                gflops, gbs = self._rates(totals["flops"], totals["bytes"], totals["total_us"])
                row.update(runs=int(totals["runs"]), time_us=totals["total_us"], gflops=gflops, gbs=gbs)
            rows.append(row)
        if self.loose:
            others.append(
                {"id": LOOSE_GROUP, "kind": "rewrites", "name": f"{len(self.loose)} rewrites outside kernels"}
            )
        return {"kernels": rows, "others": others, "files": self.files.paths, "profile": self.files.profile is not None}

    def _output_shapes(self, kernel: int) -> list[list[int]]:
        # the shapes of the tensors the kernel computes (from the schedule that made it; [] if none recorded)
        placed = self.schedule_of_kernel.get(kernel)
        if placed is None:
            return []
        schedule, index = placed
        return [output["shape"] for output in self.groups[schedule]["info"]["kernels"][index]["outputs"]]

    def _rewrite_summary(self, number: int) -> dict[str, Any]:
        record = self.rewrites[number]
        steps = len(record["steps"]) or self.store.step_count(number)
        return {"id": number, "name": record.get("name") or "(unnamed rewrite)", "steps": steps}

    def group(self, group_id: str) -> dict[str, Any]:
        """/api/group/<id>: a kernel's (or other group's) facts, its rewrites in order, and its schedule entry."""
        if group_id == LOOSE_GROUP:
            return {
                "id": LOOSE_GROUP,
                "kind": "rewrites",
                "name": "rewrites outside kernels",
                "info": {},
                "rewrites": [self._rewrite_summary(r) for r in self.loose],
            }
        if not group_id.isdigit() or int(group_id) >= len(self.groups):
            raise NotFound(f"no group {group_id!r}: the trace has groups 0..{len(self.groups) - 1}")
        number = int(group_id)
        group = self.groups[number]
        answer: dict[str, Any] = {
            "id": number,
            "kind": group.get("kind"),
            "name": group.get("name", ""),
            "info": group["info"],
            "rewrites": [self._rewrite_summary(r) for r in group.get("rewrites", [])],
        }
        if group.get("kind") == "schedule":
            answer["kernel_links"] = [self.kernel_of_ast.get(ast) for ast in group.get("uops", {}).get("kernels", [])]
            answer["rules"] = schedule_rules(group["info"])
        placed = self.schedule_of_kernel.get(number)
        if placed is not None:
            schedule, index = placed
            answer["schedule"] = {"group": schedule, **self.groups[schedule]["info"]["kernels"][index]}
        totals = self.runs.get(number)
        if totals is not None:
            gflops, gbs = self._rates(totals["flops"], totals["bytes"], totals["total_us"])
            answer["profile"] = {**totals, "gflops": gflops, "gbs": gbs}
        return answer

    def step(self, rewrite: int, number: int) -> dict[str, Any]:
        """/api/rewrite/<r>/step/<s>: the graph after `number` rules (0: the input), drawn as SVG, with the rule."""
        if not 0 <= rewrite < len(self.rewrites):
            raise NotFound(f"no rewrite {rewrite}: the trace has rewrites 0..{len(self.rewrites) - 1}")
        record = self.rewrites[rewrite]
        steps = record["steps"]
        store = self.store
        count = store.step_count(rewrite)
        if not 0 <= number <= count:
            raise NotFound(f"rewrite {rewrite} has steps 0..{count}, not {number}")
        with self._lock:
            graph = store.step(rewrite, number)
            drawn = store.drawn(graph.root, graph.changed, self.max_drawn)
            svg_error = None
            svg = self._svg.get((rewrite, number))
            if svg is None:
                try:
                    svg = self._svg[(rewrite, number)] = render_svg(to_dot(store, drawn, graph.changed))
                except GraphvizError as error:
                    svg, svg_error = "", str(error)
        answer: dict[str, Any] = {
            "rewrite": rewrite,
            "name": record.get("name") or "(unnamed rewrite)",
            "step": number,
            "steps": count,
            "root": graph.root,
            "changed": sorted(graph.changed),
            "in_graph": graph.in_graph,
            "node_count": drawn.total,
            "drawn_count": len(drawn.nodes),
            "collapsed": len(drawn.nodes) < drawn.total,
            "svg": svg,
            "svg_error": svg_error,
        }
        if number > 0 and not steps:
            answer.update(location="", pattern="(a pass that is not a pattern rewrite: its whole result)")
        elif number > 0:
            fired = steps[number - 1]
            answer.update(
                location=fired.get("location", ""),
                pattern=fired.get("pattern", ""),
                before=store.describe(store.canonical[fired["before"]]),
                after=store.describe(store.canonical[fired["after"]]),
            )
        if number == len(steps) and steps:
            answer["matches_result"] = store.result_matches(rewrite)
        return answer

    def timeline(self) -> dict[str, Any]:
        """/api/timeline: events per device and queue (times in µs from the first event), linked to kernels."""
        events = self.files.profile or []
        if not events:
            return {"devices": [], "start": 0.0, "end": 0.0, "profile": self.files.profile is not None}
        start = min(float(event["ts"]) for event in events)
        end = max(float(event["ts"]) + float(event["dur"]) for event in events)
        devices: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for event in events:
            args = event.get("args") or {}
            key = args.get("kernel")
            kernel = self.kernel_of_key.get(key) if isinstance(key, str) else None
            duration = float(event["dur"])
            gflops, gbs = self._rates(_number(args.get("flops")) or 0.0, _number(args.get("bytes")) or 0.0, duration)
            entry = {
                "name": event.get("name", ""),
                "category": event.get("cat", ""),
                "start": float(event["ts"]) - start,
                "duration": duration,
                "kernel": kernel,
                "flops": args.get("flops"),
                "bytes": args.get("bytes"),
                "gflops": gflops if args.get("flops") is not None else None,
                "gbs": gbs if args.get("bytes") is not None else None,
            }
            queues = devices.setdefault(str(event.get("pid", "?")), {})
            queues.setdefault(str(event.get("tid", "?")), []).append(entry)
        return {
            "devices": [
                {"name": name, "queues": [{"name": queue, "events": found} for queue, found in queues.items()]}
                for name, queues in devices.items()
            ],
            "start": 0.0,
            "end": end - start,
            "profile": True,
        }

    def schedules(self) -> dict[str, Any]:
        """/api/schedule: each scheduled graph's kernels (outputs, why each is a boundary, fused ops, kernel link) and
        its placement rules' decisions, rule by rule (`schedule_rules`)."""
        answer = []
        for number, group in enumerate(self.groups):
            if group.get("kind") != "schedule":
                continue
            asts = group.get("uops", {}).get("kernels", [])
            kernels = [
                {**entry, "kernel": self.kernel_of_ast.get(asts[index]) if index < len(asts) else None}
                for index, entry in enumerate(group["info"].get("kernels", []))
            ]
            rules = schedule_rules(group["info"])
            answer.append({"id": number, "name": group.get("name", ""), "kernels": kernels, "rules": rules})
        return {"schedules": answer}

    def chrome_trace(self) -> dict[str, Any]:
        """/api/profile.json: the profile's events as a Chrome trace (what Perfetto opens)."""
        return {"traceEvents": self.files.profile_events, "displayTimeUnit": "ns"}


def schedule_rules(info: dict[str, Any]) -> list[dict[str, Any]]:
    """A schedule group's decisions (`info["decisions"]`, in the order the scheduler made them) gathered by rule, in
    the order each rule first decided: the rule's name and "file:line", and per decision the node described, what
    was decided (with the costs the rule compared) and whether the node got a buffer. Traces written before
    decisions were recorded have none: []."""
    rules: dict[str, dict[str, Any]] = {}
    for entry in info.get("decisions", []):
        rule = rules.setdefault(
            entry["rule"], {"rule": entry["rule"], "location": entry.get("location", ""), "decisions": []}
        )
        rule["decisions"].append(
            {"description": entry["description"], "decision": entry["decision"], "cut": entry.get("cut", True)}
        )
    return list(rules.values())
