"""The JSON endpoints, checked against the trace and profile files read with plain json."""

from __future__ import annotations

import html.parser
import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kiln.viz.server import VizServer, start_server


def server_files(server: VizServer) -> Path:
    assert server.data is not None
    return Path(server.data.files.paths[0]).parent


def get(server: VizServer, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=60) as response:
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        body, status = error.read(), error.code
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:
        return status, body.decode()


def test_kernel_list_is_the_traces_kernels_with_profile_totals(
    server: VizServer, training_trace: dict[str, Any], training_profile: list[dict[str, Any]]
) -> None:
    status, answer = get(server, "/api/kernels")
    assert status == 200 and answer["profile"] is True
    expected = [(n, g["info"]["name"]) for n, g in enumerate(training_trace["groups"]) if g["kind"] == "kernel"]
    assert [(row["id"], row["name"]) for row in answer["kernels"]] == expected
    for row in answer["kernels"]:
        info = training_trace["groups"][row["id"]]["info"]
        assert (row["device"], row["opts"], row["global_size"]) == (info["device"], info["opts"], info["global_size"])
        schedules = [g for g in training_trace["groups"] if g["kind"] == "schedule"]
        made = [
            e
            for s in schedules
            for e, ast in zip(s["info"]["kernels"], s["uops"]["kernels"], strict=True)
            if ast == training_trace["groups"][row["id"]]["uops"]["ast"]
        ]
        assert row["shape"] == [output["shape"] for output in made[0]["outputs"]]
        runs = [e for e in training_profile if e.get("args", {}).get("kernel") == info["key"]]
        assert row.get("runs", 0) == len(runs)
        if runs:
            total = sum(e["dur"] for e in runs)
            assert row["time_us"] == pytest.approx(total)
            assert row["gflops"] == pytest.approx(sum(e["args"]["flops"] for e in runs) / total / 1e3)
            assert row["gbs"] == pytest.approx(sum(e["args"]["bytes"] for e in runs) / total / 1e3)
    assert any(row.get("runs") for row in answer["kernels"])


def test_a_kernel_page_has_its_rewrites_source_and_fusion(server: VizServer, training_trace: dict[str, Any]) -> None:
    groups = training_trace["groups"]
    number = next(n for n, g in enumerate(groups) if g["kind"] == "kernel")
    status, answer = get(server, f"/api/group/{number}")
    assert status == 200
    assert answer["info"]["source"] == groups[number]["info"]["source"]
    assert [r["id"] for r in answer["rewrites"]] == groups[number]["rewrites"]
    names = [training_trace["rewrites"][r]["name"] or "(unnamed rewrite)" for r in groups[number]["rewrites"]]
    assert [r["name"] for r in answer["rewrites"]] == names
    schedule = groups[answer["schedule"]["group"]]
    assert groups[number]["uops"]["ast"] in schedule["uops"]["kernels"]
    assert answer["schedule"]["outputs"][0]["reason"]


def test_one_rewrite_step_matches_the_file(server: VizServer, training_trace: dict[str, Any]) -> None:
    rewrites = training_trace["rewrites"]
    number = next(n for n, r in enumerate(rewrites) if len(r["steps"]) >= 2)
    status, first = get(server, f"/api/rewrite/{number}/step/0")
    assert (
        status == 200
        and first["step"] == 0
        and first["changed"] == []
        and first["steps"] == len(rewrites[number]["steps"])
    )
    status, step = get(server, f"/api/rewrite/{number}/step/1")
    fired = rewrites[number]["steps"][0]
    assert (step["location"], step["pattern"]) == (fired["location"], fired["pattern"])
    node = training_trace["nodes"][fired["after"]]
    assert step["after"]["op"] == node["op"]
    assert "<svg" in step["svg"] and step["svg_error"] is None
    if step["in_graph"]:
        assert step["changed"], "a rule applied inside the graph creates at least one node"
        for changed in step["changed"]:
            assert f'id="n{changed}"' in step["svg"] or step["collapsed"]
    status, last = get(server, f"/api/rewrite/{number}/step/{len(rewrites[number]['steps'])}")
    assert status == 200 and "matches_result" in last


def test_timeline_and_chrome_export_match_the_profile(
    server: VizServer, training_trace: dict[str, Any], training_profile: list[dict[str, Any]]
) -> None:
    status, timeline = get(server, "/api/timeline")
    assert status == 200
    events = [event for device in timeline["devices"] for queue in device["queues"] for event in queue["events"]]
    assert len(events) == len(training_profile)
    first = min(e["ts"] for e in training_profile)
    expected = sorted((e["name"], e["ts"] - first, e["dur"]) for e in training_profile)
    got = sorted((e["name"], e["start"], e["duration"]) for e in events)
    assert [name for name, _, _ in got] == [name for name, _, _ in expected]
    assert [v for _, s, d in got for v in (s, d)] == pytest.approx([v for _, s, d in expected for v in (s, d)])
    for event in events:
        if event["category"] == "program":
            group = training_trace["groups"][event["kernel"]]
            assert group["kind"] == "kernel" and group["info"]["name"] == event["name"]
            assert event["gflops"] == pytest.approx(event["flops"] / event["duration"] / 1e3)
    status, chrome = get(server, "/api/profile.json")
    raw = json.loads((server_files(server) / "profile.json").read_text())["traceEvents"]
    assert status == 200 and chrome["traceEvents"] == raw


def test_schedule_view_links_kernels(server: VizServer, training_trace: dict[str, Any]) -> None:
    status, answer = get(server, "/api/schedule")
    assert status == 200
    schedules = [g for g in training_trace["groups"] if g["kind"] == "schedule"]
    assert len(answer["schedules"]) == len(schedules)
    for entry, group in zip(answer["schedules"], schedules, strict=True):
        assert len(entry["kernels"]) == len(group["info"]["kernels"])
        for kernel, ast in zip(entry["kernels"], group["uops"]["kernels"], strict=True):
            assert training_trace["groups"][kernel["kernel"]]["uops"]["ast"] == ast


def test_schedule_view_lists_the_decisions_rule_by_rule(server: VizServer, training_trace: dict[str, Any]) -> None:
    # every recorded decision appears once, under its rule, in the order the scheduler made them within that rule;
    # the rules in the order each first decided
    _, answer = get(server, "/api/schedule")
    schedules = [g for g in training_trace["groups"] if g["kind"] == "schedule"]
    assert any(group["info"]["decisions"] for group in schedules)
    for entry, group in zip(answer["schedules"], schedules, strict=True):
        recorded = group["info"]["decisions"]
        first_seen = list(dict.fromkeys(decision["rule"] for decision in recorded))
        assert [rule["rule"] for rule in entry["rules"]] == first_seen
        for rule in entry["rules"]:
            mine = [d for d in recorded if d["rule"] == rule["rule"]]
            assert rule["location"] == mine[0]["location"] and ":" in rule["location"]
            assert rule["decisions"] == [
                {"description": d["description"], "decision": d["decision"], "cut": d["cut"]} for d in mine
            ]
    number = next(n for n, g in enumerate(training_trace["groups"]) if g["kind"] == "schedule")
    _, group_answer = get(server, f"/api/group/{number}")
    assert group_answer["rules"] == answer["schedules"][0]["rules"]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/group/99999", 404),
        ("/api/rewrite/99999/step/0", 404),
        ("/api/rewrite/0/step/99999", 404),
        ("/api/nothing", 404),
        ("/static/../server.py", 404),
        ("/nowhere", 404),
    ],
)
def test_unknown_things_are_404_with_a_message(server: VizServer, path: str, status: int) -> None:
    got, answer = get(server, path)
    assert got == status
    assert answer


def test_page_and_assets_are_served(server: VizServer) -> None:
    status, page = get(server, "/")
    assert status == 200 and "kiln.viz" in page and "/static/app.js" in page
    for asset in ("app.js", "highlight.js", "style.css"):
        assert get(server, f"/static/{asset}")[0] == 200


def test_a_corrupt_trace_gets_an_error_page_not_a_crash(training_files: Path, tmp_path: Path) -> None:
    broken = tmp_path / "trace.json"
    text = (training_files / "trace.json").read_text()
    broken.write_text(text[: len(text) // 2])
    running = start_server([broken])
    try:
        status, page = get(running, "/")
        assert status == 500 and "truncated" in page and str(broken) in page
        status, answer = get(running, "/api/kernels")
        assert status == 500 and "truncated" in answer["error"]
    finally:
        running.shutdown()


def raw_get(server: VizServer, path: str, host: str | None) -> tuple[int, dict[str, str], bytes]:
    """GET `path` with exactly the `Host` header given (None: no Host header at all)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.putrequest("GET", path, skip_host=True)
        if host is not None:
            connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, {key.lower(): value for key, value in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_every_response_carries_a_content_security_policy_and_nosniff(server: VizServer, tmp_path: Path) -> None:
    broken = tmp_path / "trace.json"
    broken.write_text("{")
    failing = start_server([broken])
    try:
        answers = [raw_get(server, path, f"127.0.0.1:{server.port}") for path in PAGES]
        answers.append(raw_get(failing, "/", f"127.0.0.1:{failing.port}"))
        answers.append(raw_get(server, "/", "attacker.example"))
    finally:
        failing.shutdown()
    for _, headers, _ in answers:
        policy = {
            part.split()[0]: part.split()[1:] for part in headers["content-security-policy"].split(";") if part.strip()
        }
        # scripts and styles only from the server's own files: no inline script, no eval, no other origin
        assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
        assert policy["default-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
        assert headers["x-content-type-options"] == "nosniff"
    assert [status for status, _, _ in answers] == [200, 200, 200, 404, 500, 421]


PAGES = ("/", "/static/app.js", "/api/kernels", "/api/nothing")


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "LOCALHOST:{port}"])
def test_loopback_hosts_with_the_port_are_answered(server: VizServer, host: str) -> None:
    status, _, body = raw_get(server, "/api/kernels", host.format(port=server.port))
    assert status == 200 and json.loads(body)["kernels"]


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example:{port}",  # DNS rebinding: the attacker's name resolved to 127.0.0.1
        "attacker.example",
        "127.0.0.1",  # the right address, another port (80)
        "127.0.0.1:{other}",
        "localhost.attacker.example:{port}",
        "127.0.0.1:{port}@attacker.example",
        "",
        None,
    ],
)
def test_other_hosts_are_refused_with_421(server: VizServer, host: str | None) -> None:
    given = None if host is None else host.format(port=server.port, other=server.port + 1)
    status, headers, body = raw_get(server, "/api/kernels", given)
    assert status == 421 and headers["content-type"].startswith("text/plain")
    assert f"127.0.0.1:{server.port}" in body.decode() and b"kernels" not in body


def test_the_server_binds_loopback_by_default(training_files: Path) -> None:
    running = VizServer([training_files])
    try:
        assert running.host == "127.0.0.1" and running.url == f"http://127.0.0.1:{running.port}/"
    finally:
        running.httpd.server_close()
    # bound to every address on request, the page's address and the accepted Host stay loopback
    everywhere = VizServer([training_files], "0.0.0.0", 0)
    try:
        assert everywhere.url == f"http://127.0.0.1:{everywhere.port}/"
        assert everywhere.accepts_host(f"localhost:{everywhere.port}")
        assert not everywhere.accepts_host(f"0.0.0.0:{everywhere.port}")
    finally:
        everywhere.httpd.server_close()


def test_the_error_page_shows_a_hostile_message_as_text(tmp_path: Path) -> None:
    folder = tmp_path / '"><img src=x onerror=window.pwned=1><b x="'
    folder.mkdir()
    broken = folder / "trace.json"
    hostile = '"><script>window.pwned=1</script>'
    document = {"format": "kiln-rewrite-trace", "version": 2, "nodes": [], "rewrites": [], "groups": [hostile]}
    broken.write_text(json.dumps(document))
    running = start_server([broken])
    try:
        status, _, body = raw_get(running, "/", f"127.0.0.1:{running.port}")
    finally:
        running.shutdown()
    # the stdlib's HTML parser as the browser's stand-in: no element but the page's own, the message as text
    parser = _Elements()
    parser.feed(body.decode())
    assert status == 500 and parser.tags == ["html", "head", "meta", "title", "link", "body", "h1", "pre"]
    assert f"{broken}: groups[0] must be an object, got {hostile!r}" in parser.text["pre"]


class _Elements(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        if self.tags:
            self.text[self.tags[-1]] = self.text.get(self.tags[-1], "") + data
