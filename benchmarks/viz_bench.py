"""kiln.viz at scale, measured in headless Chromium: a trace of 500 kernels and a kernel whose graph has 5,000 nodes.

    uv run python benchmarks/viz_bench.py [--runs 5] [--kernels 500] [--nodes 5000] [--chromium PATH]

The trace is recorded by kiln.uops' own tracer (real graph_rewrite calls in trace groups, saved with save_trace), with
a profile of 20 launches per kernel. Figures are medians over `--runs` fresh page loads:
- server load: reading and checking the files (VizServer construction), before the first request;
- first paint: navigation until the 500-row kernel list is in the DOM;
- open kernel: click on a small kernel's row until its first rewrite's graph is drawn;
- open big kernel: the same for the kernel with the 5,000-node graph (drawn in part: the changed nodes' neighbourhood
  and the nodes nearest the root, at most kiln.viz.data.MAX_DRAWN_NODES);
- step big graph: the next rule application of that graph drawn;
- timeline: opening the timeline of 10,000 events until its bars are drawn.
Target (issue 18): first paint and open kernel under 1 s on the project's 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from kiln.uops import PatternMatcher, UOp, UPat, graph_rewrite, save_trace, trace_group, tracing
from kiln.uops import trace as trace_module
from kiln.viz.server import VizServer

IDENTITIES = PatternMatcher([(UPat.var("x") + 0, lambda x: x), (UPat.var("x") * 1, lambda x: x)])


def _small_graph(seed: int) -> UOp:
    a, b = UOp.variable(f"a{seed}", 0, 9), UOp.variable(f"b{seed}", 0, 9)
    return ((a + 0) * 1 + (b * 1) * (a + seed)) * 1


def _big_graph(nodes: int) -> UOp:
    x = UOp.variable("x", 0, 9)
    value = x
    for index in range(nodes // 2):  # each step adds an ADD and a CONST
        value = (value + index) + 0 if index % 50 == 0 else value + index
    return value


def build_files(directory: Path, kernels: int, nodes: int) -> tuple[int, int]:
    """Write trace.json and profile.json; (number of the big kernel, its graph's node count)."""
    trace_module.clear_traces()
    with tracing():
        for number in range(kernels):
            with trace_group("kernel") as group:
                assert group is not None
                graph = _big_graph(nodes) if number == kernels // 2 else _small_graph(number)
                graph_rewrite(graph, IDENTITIES, name="identities")
                graph_rewrite(graph, PatternMatcher([]), name="nothing")
                name = f"r_{number}_{number % 7 + 1}_16"
                source = "\n".join(f"  acc{i} += data1[gidx*16+{i}] * {i}.0f;" for i in range(40))
                group.name = name
                group.info.update(
                    name=name,
                    key=f"{name}-k{number}",
                    device="CPU",
                    renderer="CRenderer",
                    language="c",
                    global_size=[number + 1, 1, 1],
                    local_size=None,
                    opts=["Opt(op=OptOps.UPCAST, axis=0, arg=4)"],
                    flops=1000 * number,
                    global_bytes=4096,
                    local_bytes=0,
                    variables=[],
                    linear="\n".join(f"{i:4d} ALU" for i in range(200)),
                    source=f"void kiln_kernel(float* data0, const float* data1) {{\n{source}\n}}\n",
                    disassembly=None,
                )
    save_trace(directory / "trace.json")
    big_nodes = len(_big_graph(nodes).toposort())
    events = []
    for launch in range(20):
        for number in range(kernels):
            name = f"r_{number}_{number % 7 + 1}_16"
            start = (launch * kernels + number) * 12.0
            args = {"kernel": f"{name}-k{number}", "flops": 1000 * number, "bytes": 4096}
            events.append(
                {
                    "name": name,
                    "cat": "program",
                    "ph": "X",
                    "ts": start,
                    "dur": 10.0,
                    "pid": "CPU",
                    "tid": "compute",
                    "args": args,
                }
            )
    (directory / "profile.json").write_text(json.dumps({"traceEvents": events}))
    trace_module.clear_traces()
    return kernels // 2, big_nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    options = parser.parse_args()
    if options.chromium is None:
        raise SystemExit("viz_bench needs Chromium: apt-get install chromium (or pass --chromium PATH)")
    from playwright.sync_api import sync_playwright  # a dev dependency: only this benchmark and the tests use it

    directory = Path(tempfile.mkdtemp(prefix="kiln-viz-bench-"))
    started = time.perf_counter()
    big, big_nodes = build_files(directory, options.kernels, options.nodes)
    print(
        f"trace: {options.kernels} kernels, big graph {big_nodes} nodes, "
        f"{(directory / 'trace.json').stat().st_size / 1e6:.1f} MB, written in {time.perf_counter() - started:.1f} s"
    )
    figures: dict[str, list[float]] = {}

    def record(name: str, seconds: float) -> None:
        figures.setdefault(name, []).append(seconds)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=options.chromium, args=["--no-sandbox"])
        for _ in range(options.runs):
            started = time.perf_counter()
            server = VizServer([directory], port=0).start()
            record("server load", time.perf_counter() - started)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            started = time.perf_counter()
            page.goto(server.url)
            page.wait_for_function(f"() => document.querySelectorAll('tr.kernel-row').length === {options.kernels}")
            record("first paint (500 kernels)", time.perf_counter() - started)
            started = time.perf_counter()
            page.click("tr.kernel-row[data-id='3']")
            page.wait_for_selector("#graph svg")
            record("open kernel", time.perf_counter() - started)
            started = time.perf_counter()
            page.evaluate(f"location.hash = '#/kernel/{big}'")
            page.wait_for_function("() => document.querySelector('#rule-info').textContent.includes('showing')")
            record(f"open big kernel ({big_nodes} nodes)", time.perf_counter() - started)
            started = time.perf_counter()
            page.click("#next-step")
            page.wait_for_function("() => document.querySelector('#step-label').textContent.includes('step 1 /')")
            page.wait_for_selector("#graph svg")
            record("step big graph", time.perf_counter() - started)
            started = time.perf_counter()
            page.click("#nav-timeline")
            page.wait_for_selector("#timeline rect.bar")
            record(f"timeline ({20 * options.kernels} events)", time.perf_counter() - started)
            page.close()
            server.shutdown()
        browser.close()
    print(f"{'measure':<34}{'median s':>10}{'min s':>10}{'max s':>10}   (runs: {options.runs})")
    for name, values in figures.items():
        print(f"{name:<34}{statistics.median(values):>10.3f}{min(values):>10.3f}{max(values):>10.3f}")
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
