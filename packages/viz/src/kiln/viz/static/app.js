// kiln.viz front end: a kernel list, a kernel page (rewrites stepped rule by rule, uops, source, disassembly,
// fusion), the scheduler's view and the profile timeline. Everything is fetched lazily from the JSON endpoints.
// Every string of a trace is untrusted: it reaches the page only as a text node or an attribute value set through the
// DOM (el / svgEl below), never through innerHTML or markup in a template string; the server's CSP forbids inline
// script besides.
"use strict";
(() => {
  const $ = (selector) => document.querySelector(selector);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const cache = new Map();

  // an element with its attributes set as values (null / undefined left out) and its children appended: nodes as
  // they are, anything else as a text node
  function build(element, attributes, children) {
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value !== null && value !== undefined) element.setAttribute(name, String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined) continue;
      element.append(child instanceof Node ? child : String(child));
    }
    return element;
  }
  const el = (tag, attributes, ...children) => build(document.createElement(tag), attributes, children);
  const svgEl = (tag, attributes, ...children) => build(document.createElementNS(SVG_NS, tag), attributes, children);
  const text = (value) => (value === null || value === undefined ? "" : String(value));

  function fill(target, ...children) {
    const fragment = document.createDocumentFragment();
    build(fragment, {}, children);
    target.replaceChildren(fragment);
  }

  // Graphviz's drawing, parsed as XML (not HTML) and imported: anything that could run (script, foreignObject,
  // handlers, links out of the page) is dropped, though Graphviz writes none and the CSP would block it
  function importSvg(markup) {
    const root = new DOMParser().parseFromString(markup, "image/svg+xml").documentElement;
    if (root.namespaceURI !== SVG_NS || root.localName !== "svg") return null;
    for (const node of root.querySelectorAll("script, foreignObject, iframe, object, embed")) node.remove();
    for (const node of [root, ...root.querySelectorAll("*")]) {
      for (const attribute of [...node.attributes]) {
        const name = attribute.name.toLowerCase();
        if (name.startsWith("on") || (name.endsWith("href") && !attribute.value.startsWith("#"))) {
          node.removeAttribute(attribute.name);
        }
      }
    }
    return document.importNode(root, true);
  }

  const state = { kernels: null, sort: null, kernel: null, rewrite: null, step: 0, steps: 0, tab: "source",
                  zoom: 1, timeline: null, view: null, stepToken: 0, compact: true };

  async function api(path) {
    if (cache.has(path)) return cache.get(path);
    const response = await fetch(path);
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || `${path}: HTTP ${response.status}`);
    if (!path.includes("/step/")) cache.set(path, body);
    return body;
  }

  function setStatus(text, isError) {
    const status = $("#status");
    status.textContent = text || "";
    status.style.color = isError ? "#ff8a80" : "#ffcc80";
  }

  function fmt(value, digits = 1) {
    if (value === null || value === undefined) return "";
    if (typeof value !== "number") return String(value);
    return value >= 1000 ? value.toFixed(0) : value.toFixed(digits);
  }

  function fmtTime(us) {
    if (us === undefined || us === null) return "";
    return us >= 1000 ? `${(us / 1000).toFixed(2)} ms` : `${us.toFixed(1)} µs`;
  }

  function showView(name) {
    for (const view of ["kernels", "kernel", "schedule", "timeline"]) {
      $(`#view-${view}`).hidden = view !== name;
      const link = $(`#nav-${view}`);
      if (link) link.classList.toggle("active", view === name || (name === "kernel" && view === "kernels"));
    }
    state.view = name;
  }

  // ---- kernel list -------------------------------------------------------------------------------------------------
  function launchText(row) {
    const global = (row.global_size || []).join("×");
    return row.local_size ? `${global} / ${row.local_size.join("×")}` : global;
  }

  function renderKernelList() {
    const query = $("#search").value.trim().toLowerCase();
    let rows = state.kernels.kernels.filter((row) => !query ||
      `${row.name} ${row.device} ${(row.opts || []).join(" ")}`.toLowerCase().includes(query));
    if (state.sort) {
      const key = state.sort;
      rows = rows.slice().sort((a, b) => {
        const x = a[key], y = b[key];
        if (typeof x === "number" || typeof y === "number") return (y ?? -1) - (x ?? -1);
        return String(x ?? "").localeCompare(String(y ?? ""));
      });
    }
    const body = rows.map((row) => el("tr", { class: "kernel-row", "data-id": row.id },
      el("td", { class: "name" }, text(row.name)), el("td", {}, text(row.device)),
      el("td", {}, (row.shape || []).map((s) => `(${s.join(", ")})`).join(" ")), el("td", {}, launchText(row)),
      el("td", { class: "num" }, text(row.runs)), el("td", { class: "num" }, fmtTime(row.time_us)),
      el("td", { class: "num" }, fmt(row.gflops, 2)), el("td", { class: "num" }, fmt(row.gbs, 2)),
      el("td", {}, (row.opts || []).join(", "))));
    fill($("#kernel-list tbody"), body);
    const others = state.kernels.others.map((group) =>
      el("a", { href: `#/kernel/${encodeURIComponent(group.id)}`, class: "other-group" },
        `${text(group.kind)}: ${text(group.name)}`));
    fill($("#other-groups"), others.length ? [el("h3", {}, "Other traced work"), others] : []);
    setStatus(`${rows.length} of ${state.kernels.kernels.length} kernels`);
  }

  async function showKernels() {
    showView("kernels");
    if (!state.kernels) state.kernels = await api("/api/kernels");
    renderKernelList();
  }

  // ---- kernel page -------------------------------------------------------------------------------------------------
  async function showKernel(id, rewrite, step) {
    showView("kernel");
    const group = await api(`/api/group/${id}`);
    if (state.kernel !== group) {
      state.kernel = group;
      const info = group.info || {};
      const facts = [];
      if (info.device) facts.push(info.device);
      if (info.global_size) facts.push(`global ${info.global_size.join("×")}`);
      if (info.local_size) facts.push(`local ${info.local_size.join("×")}`);
      if (info.flops !== undefined && info.flops !== null) facts.push(`${info.flops} flops`);
      if (info.global_bytes !== undefined && info.global_bytes !== null) facts.push(`${info.global_bytes} bytes`);
      if (group.profile) {
        facts.push(`${group.profile.runs} runs, ${fmtTime(group.profile.total_us)}`);
        if (group.profile.gflops !== null) facts.push(`${fmt(group.profile.gflops, 2)} GFLOP/s`);
        if (group.profile.gbs !== null) facts.push(`${fmt(group.profile.gbs, 2)} GB/s`);
      }
      if (info.opts && info.opts.length) facts.push(`opts: ${info.opts.join(", ")}`);
      fill($("#kernel-header"), el("b", { class: "kernel-name" }, text(group.name || group.kind)), " ",
        el("span", { class: "facts" }, facts.join(" · ")));
      const items = group.rewrites.map((r) =>
        el("div", { "data-rewrite": r.id, title: text(r.name) }, text(r.name), el("span", { class: "count" }, r.steps)));
      fill($("#rewrite-list"), items.length ? items : el("div", {}, "no rewrites recorded"));
      renderCode();
    }
    if (!group.rewrites.length) {
      $("#graph").replaceChildren();
      return;
    }
    const chosen = rewrite !== undefined ? rewrite :
      (group.rewrites.find((r) => r.steps > 0) || group.rewrites[0]).id;
    await showStep(chosen, step || 0);
  }

  function renderCode() {
    const group = state.kernel;
    if (!group) return;
    const info = group.info || {};
    for (const button of document.querySelectorAll("#code-tabs button")) {
      button.classList.toggle("active", button.dataset.tab === state.tab);
    }
    const view = $("#code-view");
    if (state.tab === "schedule") {
      view.className = "";
      fill(view, group.schedule ? scheduleEntry(group.schedule, false) :
        (group.kind === "schedule" ? scheduleGroup(group) : "no schedule recorded for this kernel"));
      return;
    }
    const source = state.tab === "source" ? info.source : state.tab === "linear" ? info.linear :
      info.disassembly || info.disassembly_note || "the renderer's compiler offers no disassembly";
    const language = state.tab === "source" ? info.language : state.tab === "linear" ? "python" : "asm";
    view.className = `lang-${text(language)}`;
    fill(view, source ? KilnHighlight.highlight(source, language || "c") : "(nothing recorded)");
  }

  async function showStep(rewrite, step) {
    const token = ++state.stepToken;
    state.rewrite = rewrite;
    for (const item of document.querySelectorAll("#rewrite-list div")) {
      item.classList.toggle("active", Number(item.dataset.rewrite) === rewrite);
    }
    setStatus("laying out…");
    let answer;
    try {
      answer = await api(`/api/rewrite/${rewrite}/step/${step}`);
    } catch (error) {
      setStatus(String(error.message), true);
      return;
    }
    if (token !== state.stepToken) return; // a later request replaced this one
    state.step = answer.step;
    state.steps = answer.steps;
    const slider = $("#step-slider");
    slider.max = String(answer.steps);
    slider.value = String(answer.step);
    $("#step-label").textContent = `${answer.name}: step ${answer.step} / ${answer.steps}`;
    let rule = answer.step === 0 ? "input graph" : `${answer.location}\n${answer.pattern}`;
    if (answer.step > 0 && !answer.in_graph) rule += "\n(this rule rewrote a node outside the current graph)";
    if (answer.matches_result === false) rule += "\n(the replayed graph differs from the recorded result)";
    if (answer.collapsed) rule += `\nshowing ${answer.drawn_count} of ${answer.node_count} nodes`;
    $("#rule-info").textContent = rule;
    const graph = $("#graph");
    const drawing = answer.svg_error ? null : importSvg(answer.svg);
    if (!drawing) {
      fill(graph, el("div", { class: "notice" }, answer.svg_error || "the graph's drawing could not be read"));
    } else {
      graph.replaceChildren(drawing);
      drawing.style.transform = `scale(${state.zoom})`;
      for (const id of answer.changed) {
        const node = document.getElementById(`n${id}`);
        if (node) node.classList.add("changed");
      }
      const first = graph.querySelector("g.node.changed");
      if (first) {
        // scroll the graph panel (not the page) so the first changed node is in view
        const box = graph.getBoundingClientRect(), node = first.getBoundingClientRect();
        graph.scrollTop += node.top - box.top - box.height / 2 + node.height / 2;
        graph.scrollLeft += node.left - box.left - box.width / 2 + node.width / 2;
      }
    }
    setStatus(`${answer.node_count} nodes, ${answer.changed.length} changed`);
    const hash = `#/kernel/${state.kernel.id}/rewrite/${rewrite}/step/${answer.step}`;
    if (location.hash !== hash) history.replaceState(null, "", hash);
  }

  // ---- schedule ----------------------------------------------------------------------------------------------------
  function scheduleEntry(entry, withLink) {
    const outputs = entry.outputs.map((output) => el("div", {}, `${text(output.op)} ${JSON.stringify(output.shape)}: `,
      el("span", { class: "reason" }, text(output.reason))));
    const link = withLink && entry.kernel !== null && entry.kernel !== undefined ?
      el("a", { href: `#/kernel/${encodeURIComponent(entry.kernel)}`, class: "kernel-link" }, "open kernel") : null;
    const more = entry.fused_count > entry.fused_ops.length ? ` (+${entry.fused_count - entry.fused_ops.length} more)` : "";
    return el("div", { class: "schedule-kernel" }, el("b", {}, text(entry.device)), " ", link,
      el("div", {}, "outputs (each is a kernel boundary, not fused into its readers, because):"), outputs,
      el("div", {}, `fused tensor ops (${entry.fused_count}):`),
      el("div", { class: "ops" }, entry.fused_ops.join("\n"), more));
  }

  // the placement rules' decisions, rule by rule (as codegen's passes are listed): each node, what the rule decided
  // (with the costs it compared) and whether the node got a buffer or stays fused
  function scheduleRules(rules) {
    if (!rules || !rules.length) return null;
    return el("div", { class: "schedule-rules" }, el("div", {}, "placement rules, in the order they decided:"),
      rules.map((rule) => el("div", { class: "schedule-rule" },
        el("b", {}, text(rule.rule)), " ", el("span", { class: "location" }, text(rule.location)),
        rule.decisions.map((decision) => el("div", { class: decision.cut ? "decision cut" : "decision kept" },
          el("span", { class: "verdict" }, decision.cut ? "buffer" : "fused"), " ", text(decision.description), ": ",
          text(decision.decision))))));
  }

  function scheduleGroup(group) {
    return [scheduleRules(group.rules), (group.info.kernels || []).map((entry, index) =>
      scheduleEntry({ ...entry, kernel: (group.kernel_links || [])[index] }, true))];
  }

  async function showSchedule() {
    showView("schedule");
    const data = await api("/api/schedule");
    const parts = data.schedules.map((schedule) =>
      [el("h3", {}, text(schedule.name)), scheduleRules(schedule.rules),
        schedule.kernels.map((entry) => scheduleEntry(entry, true))]);
    fill($("#view-schedule"), parts.length ? parts : "no schedules recorded");
    setStatus(`${data.schedules.length} schedules`);
  }

  // ---- timeline ----------------------------------------------------------------------------------------------------
  const LANE = 22, LABEL = 150;

  function drawTimeline() {
    const data = state.timeline;
    const svg = $("#timeline");
    const width = Math.max(300, $("#timeline-box").clientWidth);
    const lanes = [];
    for (const device of data.devices) for (const queue of device.queues) lanes.push({ device, queue });
    const height = Math.max(1, lanes.length) * LANE + 24;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("height", String(height));
    const [t0, t1] = state.window;
    const scale = (width - LABEL - 10) / Math.max(1e-9, t1 - t0);
    const place = state.compact ? state.compactTime : (t) => t;
    const parts = [];
    lanes.forEach((lane, row) => {
      const y = row * LANE + 4;
      parts.push(svgEl("text", { x: 4, y: y + 14, class: "lane-label" }, `${lane.device.name} ${lane.queue.name}`));
      lane.queue.events.forEach((event, index) => {
        const begin = place(event.start);
        const end = begin + event.duration;
        if (end < t0 || begin > t1) return;
        const x = LABEL + (begin - t0) * scale;
        const w = Math.max(2, event.duration * scale);
        const rates = [fmtTime(event.duration)];
        if (event.gflops !== null && event.gflops !== undefined) rates.push(`${fmt(event.gflops, 2)} GFLOP/s`);
        if (event.gbs !== null && event.gbs !== undefined) rates.push(`${fmt(event.gbs, 2)} GB/s`);
        const kernel = event.kernel === null || event.kernel === undefined ? "" : event.kernel;
        // the category is a class (the bar's colour) set as an attribute value, never parsed as markup
        parts.push(svgEl("rect", { class: `bar ${text(event.category)}`, x, y, width: w, height: LANE - 6,
          "data-kernel": kernel, "data-lane": row, "data-index": index },
          svgEl("title", {}, `${text(event.name)}: ${rates.join(", ")}`)));
        if (w > 40) parts.push(svgEl("text", { x: x + 2, y: y + 12 }, text(event.name).slice(0, Math.floor(w / 6))));
      });
    });
    for (let tick = 0; tick <= 5; tick++) {  // a time axis: six evenly spaced labels
      const x = LABEL + tick / 5 * (width - LABEL - 10);
      parts.push(svgEl("line", { x1: x, x2: x, y1: 0, y2: height - 18, stroke: "#eee" }));
      const label = state.compact ? `+${fmtTime(tick / 5 * (t1 - t0))}` : fmtTime(t0 + tick / 5 * (t1 - t0));
      parts.push(svgEl("text", { x: Math.min(x, width - 70), y: height - 6 }, label));
    }
    fill(svg, parts);
    state.lanes = lanes;
  }

  // "compress idle gaps": host time between launches usually dwarfs kernel time; gaps longer than GAP µs are drawn
  // GAP µs wide (event order and durations are kept, the axis then counts drawn time)
  const GAP = 20;
  function buildCompactTime() {
    const events = [];
    for (const device of state.timeline.devices) for (const queue of device.queues) events.push(...queue.events);
    events.sort((a, b) => a.start - b.start);
    const starts = [], shifts = [];
    let busyUntil = 0, shift = 0;
    for (const event of events) {
      if (event.start > busyUntil + GAP) { shift += event.start - busyUntil - GAP; starts.push(event.start); shifts.push(shift); }
      busyUntil = Math.max(busyUntil, event.start + event.duration);
    }
    state.compactEnd = busyUntil - shift;
    state.compactTime = (t) => {
      let low = 0, high = starts.length - 1, found = 0;
      while (low <= high) { const mid = (low + high) >> 1; if (starts[mid] <= t) { found = shifts[mid]; low = mid + 1; } else high = mid - 1; }
      return t - found;
    };
  }

  function resetWindow() {
    const end = state.compact ? state.compactEnd : state.timeline.end;
    state.window = [0, Math.max(1, end)];
  }

  async function showTimeline() {
    showView("timeline");
    if (!state.timeline) {
      state.timeline = await api("/api/timeline");
      buildCompactTime();
      resetWindow();
    }
    if (!state.timeline.devices.length) {
      $("#timeline-info").textContent = state.timeline.profile ? "the profile has no events" :
        "no profile recorded: run with PROFILE=1 (python -m kiln.viz SCRIPT does)";
    }
    drawTimeline();
    const count = state.timeline.devices.reduce((n, d) => n + d.queues.reduce((m, q) => m + q.events.length, 0), 0);
    setStatus(`${count} events`);
  }

  function timelineEvents() {
    const box = $("#timeline-box");
    let drag = null;
    box.addEventListener("wheel", (event) => {
      if (!state.timeline) return;
      event.preventDefault();
      const rect = box.getBoundingClientRect();
      const [t0, t1] = state.window;
      const fraction = Math.min(1, Math.max(0, (event.clientX - rect.left - LABEL) / (rect.width - LABEL - 10)));
      const pivot = t0 + fraction * (t1 - t0);
      const factor = event.deltaY < 0 ? 0.8 : 1.25;
      state.window = [pivot - (pivot - t0) * factor, pivot + (t1 - pivot) * factor];
      drawTimeline();
    }, { passive: false });
    box.addEventListener("mousedown", (event) => { drag = { x: event.clientX, window: state.window.slice() }; });
    window.addEventListener("mouseup", () => { drag = null; });
    window.addEventListener("mousemove", (event) => {
      if (!drag || !state.timeline) return;
      const rect = box.getBoundingClientRect();
      const [t0, t1] = drag.window;
      const shift = (event.clientX - drag.x) / (rect.width - LABEL - 10) * (t1 - t0);
      if (Math.abs(event.clientX - drag.x) > 2) drag.moved = true;
      state.window = [t0 - shift, t1 - shift];
      drawTimeline();
    });
    $("#compact").addEventListener("change", (event) => {
      state.compact = event.target.checked;
      if (state.timeline) { resetWindow(); drawTimeline(); }
    });
    $("#timeline").addEventListener("click", (event) => {
      const bar = event.target.closest("rect.bar");
      if (!bar || (drag && drag.moved)) return;
      const lane = state.lanes[Number(bar.dataset.lane)];
      const item = lane.queue.events[Number(bar.dataset.index)];
      $("#timeline-detail").textContent = `${item.name} on ${lane.device.name}: ${fmtTime(item.duration)}` +
        (item.gflops !== null && item.gflops !== undefined ? `, ${fmt(item.gflops, 2)} GFLOP/s` : "") +
        (item.gbs !== null && item.gbs !== undefined ? `, ${fmt(item.gbs, 2)} GB/s` : "");
      if (bar.dataset.kernel !== "") location.hash = `#/kernel/${bar.dataset.kernel}`;
    });
  }

  // ---- routing and controls ----------------------------------------------------------------------------------------
  async function route() {
    const parts = location.hash.replace(/^#\/?/, "").split("/");
    try {
      if (parts[0] === "kernel" && parts[1] !== undefined) {
        const rewrite = parts[2] === "rewrite" ? Number(parts[3]) : undefined;
        const step = parts[4] === "step" ? Number(parts[5]) : 0;
        if (state.view === "kernel" && state.kernel && String(state.kernel.id) === parts[1] &&
            rewrite === state.rewrite && step === state.step) return;
        await showKernel(parts[1], rewrite, step);
      } else if (parts[0] === "schedule") await showSchedule();
      else if (parts[0] === "timeline") await showTimeline();
      else await showKernels();
    } catch (error) {
      setStatus(String(error.message), true);
      document.body.dataset.error = String(error.message);
    }
  }

  function go(step) {
    if (state.rewrite === null) return;
    const next = Math.min(state.steps, Math.max(0, step));
    if (next !== state.step) showStep(state.rewrite, next);
  }

  function wire() {
    $("#search").addEventListener("input", () => { if (state.kernels) { showView("kernels"); renderKernelList(); } });
    $("#kernel-list thead").addEventListener("click", (event) => {
      const header = event.target.closest("th[data-sort]");
      if (!header) return;
      state.sort = header.dataset.sort === state.sort ? null : header.dataset.sort;
      renderKernelList();
    });
    $("#kernel-list tbody").addEventListener("click", (event) => {
      const row = event.target.closest("tr.kernel-row");
      if (row) location.hash = `#/kernel/${row.dataset.id}`;
    });
    $("#rewrite-list").addEventListener("click", (event) => {
      const item = event.target.closest("div[data-rewrite]");
      if (item) showStep(Number(item.dataset.rewrite), 0);
    });
    $("#prev-step").addEventListener("click", () => go(state.step - 1));
    $("#next-step").addEventListener("click", () => go(state.step + 1));
    $("#step-slider").addEventListener("change", (event) => go(Number(event.target.value)));
    $("#zoom-in").addEventListener("click", () => zoom(1.25));
    $("#zoom-out").addEventListener("click", () => zoom(0.8));
    $("#code-tabs").addEventListener("click", (event) => {
      const button = event.target.closest("button[data-tab]");
      if (button) { state.tab = button.dataset.tab; renderCode(); }
    });
    document.addEventListener("keydown", (event) => {
      if (state.view !== "kernel" || event.target.tagName === "INPUT") return;
      if (event.key === "ArrowRight") go(state.step + 1);
      if (event.key === "ArrowLeft") go(state.step - 1);
    });
    window.addEventListener("hashchange", route);
    window.addEventListener("resize", () => { if (state.view === "timeline") drawTimeline(); });
    timelineEvents();
  }

  function zoom(factor) {
    state.zoom = Math.min(4, Math.max(0.1, state.zoom * factor));
    const svg = $("#graph svg");
    if (svg) svg.style.transform = `scale(${state.zoom})`;
  }

  wire();
  route().then(() => { document.body.dataset.ready = "1"; });
})();
