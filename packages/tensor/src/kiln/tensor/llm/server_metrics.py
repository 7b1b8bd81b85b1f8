"""`ServerMetrics`: the OpenAI-compatible server's counters and latency histograms, written for `GET /metrics` in
Prometheus' text exposition format (version 0.0.4: `# HELP` and `# TYPE` lines, then one `name{labels} value` line
per sample; a histogram as cumulative `_bucket{le=...}` samples ending with `le="+Inf"`, then `_sum` and `_count`).

Every update takes one lock, so the numbers of one scrape are consistent with each other.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence

__all__ = ["LATENCY_BUCKETS", "Histogram", "ServerMetrics"]

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Upper bounds (seconds) of the latency histograms' buckets."""


class Histogram:
    """Observations counted per bucket (each bucket counts the values up to its bound), with their sum."""

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"histogram bounds must be strictly increasing, got {list(bounds)}")
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)  # per bucket, not cumulative
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += 1
                break
        self.total += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        """The `_bucket`, `_sum` and `_count` samples (the buckets cumulative, as the format wants)."""
        lines, cumulative = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            cumulative += count
            lines.append(f'{name}_bucket{{le="{_number(bound)}"}} {cumulative}')
        lines.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        return [*lines, f"{name}_sum {_number(self.total)}", f"{name}_count {self.count}"]


_OUTCOMES = ("finished", "cancelled", "failed")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _label(value: str) -> str:
    """A label value escaped as the format says: backslash, double quote and line feed."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class ServerMetrics:
    """What the server counts: responses by method, route and status; prompt and completion tokens; generations
    finished, cancelled (the client left) and failed; request latency and time to the first text."""

    def __init__(self, prefix: str = "kiln_llm") -> None:
        self.prefix = prefix
        self.lock = threading.Lock()
        self.responses: Counter[tuple[str, str, int]] = Counter()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.generations: Counter[str] = Counter()  # by outcome (_OUTCOMES)
        self.request_seconds = Histogram(LATENCY_BUCKETS)
        self.first_text_seconds = Histogram(LATENCY_BUCKETS)

    def count_response(self, method: str, route: str, status: int) -> None:
        with self.lock:
            self.responses[(method, route, status)] += 1

    def count_generation(
        self, outcome: str, prompt_tokens: int, completion_tokens: int, seconds: float, first_text: float | None
    ) -> None:
        """One generation's end: `outcome` ("finished", "cancelled" or "failed"), its token counts, its seconds from
        queueing to the end, and from queueing to its first text (None when it produced none)."""
        with self.lock:
            self.generations[outcome] += 1
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.request_seconds.observe(seconds)
            if first_text is not None:
                self.first_text_seconds.observe(first_text)

    def render(self, gauges: Mapping[str, tuple[str, float]]) -> str:
        """The exposition text; `gauges` maps a name (without the prefix) to (help, current value)."""
        p = self.prefix
        out: list[str] = []

        def family(name: str, kind: str, help_text: str, samples: list[str] | float) -> None:
            if not isinstance(samples, list):  # one unlabelled sample
                samples = [f"{p}_{name} {_number(samples)}"]
            out.extend([f"# HELP {p}_{name} {help_text}", f"# TYPE {p}_{name} {kind}", *samples])

        with self.lock:
            responses = [
                f'{p}_requests_total{{method="{_label(method)}",route="{_label(route)}",code="{status}"}} {count}'
                for (method, route, status), count in sorted(self.responses.items())
            ]
            outcomes = [f'{p}_generations_total{{outcome="{o}"}} {self.generations[o]}' for o in _OUTCOMES]
            latency = self.request_seconds.lines(f"{p}_request_duration_seconds")
            first_text = self.first_text_seconds.lines(f"{p}_time_to_first_text_seconds")
            family("requests_total", "counter", "HTTP responses sent, by method, route and status code.", responses)
            family(
                "generations_total", "counter", "Generations ended, by outcome (cancelled: the client left).", outcomes
            )
            family("prompt_tokens_total", "counter", "Prompt tokens prefilled.", self.prompt_tokens)
            family("completion_tokens_total", "counter", "Tokens generated.", self.completion_tokens)
            family("request_duration_seconds", "histogram", "Seconds from queueing to the end.", latency)
            family("time_to_first_text_seconds", "histogram", "Seconds from queueing to the first text.", first_text)
        for name, (help_text, value) in gauges.items():
            family(name, "gauge", help_text, value)
        return "\n".join(out) + "\n"
