"""What the lower layers write at exit with VIZ / PROFILE on, and how the viewer reads good and bad files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kiln.viz.trace_file import TraceFileError, load_files

from .conftest import run_traced


def test_a_traced_training_step_writes_kernel_and_schedule_groups(training_trace: dict[str, Any]) -> None:
    groups = training_trace["groups"]
    kernels = [group for group in groups if group["kind"] == "kernel"]
    schedules = [group for group in groups if group["kind"] == "schedule"]
    assert kernels and schedules
    for kernel in kernels:
        info = kernel["info"]
        assert info["name"] and info["source"] and info["linear"]
        # the kernel's function is the one in its source, and the key names the kernel
        assert info["key"].startswith(info["name"] + "-")
        assert info["device"].startswith("CPU")
        assert "kiln_kernel" in info["source"]
        assert isinstance(kernel["uops"]["ast"], int)
        # every rewrite of a kernel points back at its group
        for rewrite in kernel["rewrites"]:
            assert groups[training_trace["rewrites"][rewrite]["group"]] is kernel
    # every kernel the schedules made was built (the same AST node is in both groups)
    built = {kernel["uops"]["ast"] for kernel in kernels}
    scheduled = [ast for schedule in schedules for ast in schedule["uops"]["kernels"]]
    assert set(scheduled) <= built
    for schedule in schedules:
        for entry in schedule["info"]["kernels"]:
            assert all(output["reason"] for output in entry["outputs"])
            assert entry["fused_count"] >= len(entry["fused_ops"]) > 0


def test_the_profile_is_a_chrome_trace_linked_to_the_kernels(
    training_trace: dict[str, Any], training_profile: list[dict[str, Any]]
) -> None:
    keys = {group["info"]["key"] for group in training_trace["groups"] if group["kind"] == "kernel"}
    programs = [event for event in training_profile if event["cat"] == "program"]
    assert programs
    for event in programs:
        assert event["ph"] == "X" and event["dur"] >= 0 and event["pid"].startswith("CPU")
        assert event["args"]["kernel"] in keys
        assert event["args"]["flops"] >= 0 and event["args"]["bytes"] > 0


def test_trace_directory_and_single_files_load(training_files: Path) -> None:
    both = load_files([training_files])
    assert both.trace is not None and both.profile is not None
    only_trace = load_files([training_files / "trace.json"])
    assert only_trace.profile is None and only_trace.trace == both.trace
    only_profile = load_files([training_files / "profile.json"])
    assert only_profile.trace is None and only_profile.profile == both.profile


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty"),
        ('{"format": "kiln-rewrite-trace", "version": 2, "nodes": [', "truncated"),
        ("not json at all", "not valid JSON"),
        ('{"hello": 1}', "neither a kiln rewrite trace"),
        ('{"format": "kiln-rewrite-trace", "version": 99, "nodes": [], "rewrites": []}', "version 99"),
        (
            json.dumps(
                {"format": "kiln-rewrite-trace", "version": 2, "rewrites": [], "nodes": [{"op": "ADD", "src": [3]}]}
            ),
            r"nodes\[0\]\.src\[0\] must be the id of an earlier node \(0 <= id < 0\), got 3",
        ),
        (
            json.dumps(
                {
                    "format": "kiln-rewrite-trace",
                    "version": 2,
                    "nodes": [{"op": "CONST", "src": []}],
                    "rewrites": [{"steps": [], "input": 7}],
                }
            ),
            r"rewrites\[0\]\.input must be the id of a node \(0 <= id < 1\), got 7",
        ),
        ('{"traceEvents": [{"ph": "X", "ts": "soon"}]}', "numeric 'ts'"),
    ],
)
def test_bad_files_raise_a_clear_error_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(TraceFileError, match=message) as raised:
        load_files([path])
    assert str(path) in str(raised.value)


def test_truncating_a_real_trace_anywhere_is_reported(training_files: Path, tmp_path: Path) -> None:
    text = (training_files / "trace.json").read_text()
    for fraction in (0.1, 0.5, 0.99):
        path = tmp_path / f"cut{fraction}.json"
        path.write_text(text[: int(len(text) * fraction)])
        with pytest.raises(TraceFileError, match="truncated"):
            load_files([path])


def test_missing_paths_are_named(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="no such file"):
        load_files([tmp_path / "nope.json"])
    with pytest.raises(TraceFileError, match=r"neither trace\.json nor profile\.json"):
        load_files([tmp_path])


JITTED = """
import numpy as np
from kiln.tensor import Tensor, TinyJit
w = Tensor(np.ones((16, 16), np.float32))

@TinyJit
def step(x):
    return ((x @ w).relu() + 1).contiguous()

for i in range(6):
    assert step(Tensor(np.full((4, 16), i, np.float32))).numpy().sum() == 4 * 16 * (16 * i + 1)
"""


def test_jit_replays_are_profiled_kernel_by_kernel(tmp_path: Path) -> None:
    out = tmp_path / "jit"
    run_traced(JITTED, out)
    trace = json.loads((out / "trace.json").read_text())
    events = json.loads((out / "profile.json").read_text())["traceEvents"]
    keys = {group["info"]["key"]: group["info"]["name"] for group in trace["groups"] if group["kind"] == "kernel"}
    programs = [event for event in events if event.get("cat") == "program"]
    # the step's one kernel ran six times (captured once, replayed after), each run an event linked to the kernel
    assert len(programs) == 6
    assert {event["args"]["kernel"] for event in programs} <= set(keys)
    assert all(event["name"] == keys[event["args"]["kernel"]] for event in programs)


def _retyped(document: dict[str, Any], change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(document))
    change(copied)
    return copied


def _kernel(document: dict[str, Any]) -> dict[str, Any]:
    return next(group for group in document["groups"] if group["kind"] == "kernel")


def _schedule(document: dict[str, Any]) -> dict[str, Any]:
    return next(group for group in document["groups"] if group["kind"] == "schedule")


# each a malformed trace that loaded (and then crashed the viewer or the page) or crashed the loader before
MALFORMED_TRACES: list[tuple[str, Callable[[dict[str, Any]], object], str]] = [
    ("uops a list", lambda d: _kernel(d).update(uops=[1, 2]), r"groups\[\d+\]\.uops must be an object, got \[1, 2\]"),
    ("info a list", lambda d: _kernel(d).update(info=[]), r"groups\[\d+\]\.info must be an object"),
    ("version true", lambda d: d.update(version=True), "trace version True"),
    ("node id true", lambda d: d["rewrites"][0].update(input=True), r"rewrites\[0\]\.input must be the id of a node"),
    ("tag a list", lambda d: d["nodes"][0].update(tag=[1]), r"nodes\[0\]\.tag must be a string or null, got \[1\]"),
    ("ast a list", lambda d: _kernel(d)["uops"].update(ast=[0]), r"groups\[\d+\]\.uops\.ast must be the id of a node"),
    (
        "schedule kernels unhashable",
        lambda d: _schedule(d)["uops"].update(kernels=[[0]]),
        r"groups\[\d+\]\.uops\.kernels\[0\] must be the id of a node",
    ),
    (
        "schedule entries missing",
        lambda d: _schedule(d)["info"].update(kernels=[]),
        r"groups\[\d+\]\.info\.kernels must be one entry per kernel of uops\.kernels \(1\)",
    ),
    (
        "decision without a rule",
        lambda d: _schedule(d)["info"]["decisions"][0].pop("rule"),
        r"groups\[\d+\]\.info\.decisions\[0\]\.rule must be a string",
    ),
    (
        "decision verdict a string",
        lambda d: _schedule(d)["info"]["decisions"][0].update(cut="yes"),
        r"groups\[\d+\]\.info\.decisions\[0\]\.cut must be true or false, got 'yes'",
    ),
    ("source a number", lambda d: _kernel(d)["info"].update(source=5), r"groups\[\d+\]\.info\.source must be a string"),
    ("opts a string", lambda d: _kernel(d)["info"].update(opts="UPCAST"), r"groups\[\d+\]\.info\.opts must be a list"),
    ("flops huge", lambda d: _kernel(d)["info"].update(flops=10**30), r"groups\[\d+\]\.info\.flops must be a number"),
    ("step pattern", lambda d: d["rewrites"][0]["steps"].append({"before": 0, "after": 0, "pattern": {}}), "pattern"),
]


@pytest.mark.parametrize(
    ("change", "message"), [case[1:] for case in MALFORMED_TRACES], ids=[case[0] for case in MALFORMED_TRACES]
)
def test_a_malformed_field_is_a_trace_file_error_naming_it(
    small_files: Path, tmp_path: Path, change: Callable[[dict[str, Any]], object], message: str
) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_retyped(json.loads((small_files / "trace.json").read_text()), change)))
    with pytest.raises(TraceFileError, match=message) as raised:
        load_files([path])
    assert str(path) in str(raised.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nests deeper than 32 levels"),  # json's own recursion limit: RecursionError
        ('{"traceEvents": ' + "[" * 40 + "]" * 40 + "}", "nests deeper than 32 levels"),
        ('{"traceEvents": [{"ph": "X", "ts": NaN, "dur": 1}]}', "NaN is not a JSON number"),
        ('{"traceEvents": [{"ph": "X", "ts": 1e999, "dur": 1}]}', "1e999 is not finite"),
        ('{"traceEvents": [{"ph": "X", "ts": ' + "9" * 5000 + ', "dur": 1}]}', "not a number the viewer reads"),
        ('{"traceEvents": [{"ph": "X", "ts": 1e300, "dur": 1}]}', r"traceEvents\[0\]\.ts must be a number"),
        ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": -5}]}', r"traceEvents\[0\]\.dur must be a number in \[0"),
        ('{"traceEvents": [{"ph": "M", "pid": [1], "name": "x"}]}', r"traceEvents\[0\]\.pid must be an integer"),
        ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": {"flops": "many"}}]}', r"args\.flops must be"),
        ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "cat": ["program"]}]}', r"traceEvents\[0\]\.cat must be"),
    ],
    ids=["deep", "past-max-depth", "nan", "inf", "many-digits", "huge", "negative-duration", "pid", "flops", "cat"],
)
def test_hostile_json_is_a_trace_file_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(TraceFileError, match=message) as raised:
        load_files([path])
    assert str(path) in str(raised.value)
