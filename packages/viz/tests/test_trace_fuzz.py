"""A mutation fuzzer over the trace loader: valid trace and profile files truncated, flipped, spliced, inflated,
nested deep and retyped field by field. Every mutant must either load or raise TraceFileError naming the file, and a
mutant that loads must answer every endpoint (groups, steps drawn by Graphviz, timeline) with JSON a browser parses.

CI runs a bounded form with pinned seeds; the long form sets the number of mutants:
    KILN_VIZ_TRACE_FUZZ=20000 uv run pytest packages/viz/tests/test_trace_fuzz.py -q -n 0
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kiln.viz.data import NotFound, VizData
from kiln.viz.trace_file import TraceFileError, load_files

MUTANTS = int(os.environ.get("KILN_VIZ_TRACE_FUZZ", "240"))
SEEDS = (0, 1, 2)
HOSTILE_VALUES: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1.5,
    2**64,
    -(2**70),
    "",
    'x" onmouseover="window.pwned=1',
    "<img src=x onerror=window.pwned=1>",
    "\ud800\x00\x07 & &amp; \\N",
    [],
    {},
    [1, "a", None],
    {"a": [{}]},
)


# -- text mutations ----------------------------------------------------------------------------------------------------
def truncate(text: str, rng: random.Random) -> str:
    return text[: rng.randrange(len(text))]


def flip(text: str, rng: random.Random) -> str:
    at = rng.randrange(len(text))
    return text[:at] + rng.choice('{}[]",:-0123456789.eaEn\\') + text[at + 1 :]


def splice(text: str, rng: random.Random) -> str:
    start = rng.randrange(len(text))
    piece = text[start : start + rng.randrange(1, 200)]
    at = rng.randrange(len(text))
    return text[:at] + piece + text[at:]


def _number_spans(text: str) -> list[tuple[int, int]]:
    spans, at = [], 0
    while at < len(text):
        if text[at].isdigit() and text[at - 1] in ":[, ":
            end = at
            while end < len(text) and text[end] in "0123456789.eE+-":
                end += 1
            spans.append((at, end))
            at = end
        at += 1
    return spans


def inflate(text: str, rng: random.Random) -> str:
    spans = _number_spans(text)
    start, end = rng.choice(spans)
    big = rng.choice(["9" * 20, "9" * 400, "9" * 5000, "1e999", "-1e999", "NaN", "Infinity", "1e308", "-0", "true"])
    return text[:start] + big + text[end:]


def nest(text: str, rng: random.Random) -> str:
    start, end = rng.choice(_number_spans(text))
    depth = rng.choice([20, 40, 900, 5000, 100_000])  # within MAX_DEPTH, past it, past json's recursion limit
    opener = rng.choice(["[", '{"a":'])
    closer = "]" if opener == "[" else "}"
    return text[:start] + opener * depth + "1" + closer * depth + text[end:]


# -- structure mutations -----------------------------------------------------------------------------------------------
def _pick_container(document: Any, rng: random.Random) -> tuple[Any, Any]:
    # a random (container, key) on a random walk from the root: deep fields are reached as often as shallow ones
    container, key = document, None
    while True:
        keys = list(container) if isinstance(container, dict) else list(range(len(container)))
        if not keys:
            return container, None
        key = rng.choice(keys)
        child = container[key]
        if not isinstance(child, dict | list) or not child or rng.random() < 0.25:
            return container, key
        container = child


def retype(document: Any, rng: random.Random) -> Any:
    container, key = _pick_container(document, rng)
    if key is not None:
        container[key] = rng.choice(HOSTILE_VALUES)
    return document


def delete(document: Any, rng: random.Random) -> Any:
    container, key = _pick_container(document, rng)
    if key is not None:
        del container[key]
    return document


def wrap(document: Any, rng: random.Random) -> Any:
    container, key = _pick_container(document, rng)
    if key is not None:
        container[key] = rng.choice([[container[key]], {"value": container[key]}])
    return document


def out_of_range(document: Any, rng: random.Random) -> Any:
    # an id past the end, or negative, where an id is expected (every int in the file may be one)
    container, key = _pick_container(document, rng)
    if key is not None and isinstance(container[key], int):
        container[key] = rng.choice([container[key] + 10**6, -1 - container[key], container[key] + 1])
    elif isinstance(container, list):
        container.append(rng.choice([10**6, -1]))
    return document


TEXT_MUTATIONS: tuple[Callable[[str, random.Random], str], ...] = (truncate, flip, splice, inflate, nest)
STRUCTURE_MUTATIONS: tuple[Callable[[Any, random.Random], Any], ...] = (retype, delete, wrap, out_of_range)


def answer_everything(data: VizData, rng: random.Random) -> list[Any]:
    """Every endpoint's answer for `data` (one rewrite's steps drawn, the first and the last)."""
    answers: list[Any] = [data.kernels(), data.timeline(), data.schedules(), data.chrome_trace()]
    answers += [data.group(str(number)) for number in range(len(data.groups))]
    if data.loose:
        answers.append(data.group("loose"))
    if data.rewrites:
        rewrite = rng.randrange(len(data.rewrites))
        count = data.store.step_count(rewrite)
        answers += [data.step(rewrite, 0), data.step(rewrite, count)]
        with pytest.raises(NotFound):
            data.step(rewrite, count + 1)
    return answers


def mutate(base: str, rng: random.Random) -> tuple[str, str]:
    """(the mutation's name, the mutant text)."""
    if rng.random() < 0.5:
        text_mutation = rng.choice(TEXT_MUTATIONS)
        return text_mutation.__name__, text_mutation(base, rng)
    structure_mutation = rng.choice(STRUCTURE_MUTATIONS)
    document = json.loads(base)
    for _ in range(rng.choice([1, 1, 2, 3])):
        document = structure_mutation(document, rng)
    return structure_mutation.__name__, json.dumps(document)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mutant_loads_or_raises_trace_file_error(small_files: Path, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    bases = {name: (small_files / name).read_text() for name in ("trace.json", "profile.json")}
    outcomes: Counter[str] = Counter()
    for number in range(MUTANTS // len(SEEDS)):
        name = rng.choice(sorted(bases))
        mutation, text = mutate(bases[name], rng)
        path = tmp_path / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        where = f"seed {seed} mutant {number} ({mutation} of {name}); kept at {path}"
        try:
            files = load_files([path])
        except TraceFileError as error:
            assert str(path) in str(error), where
            outcomes["rejected"] += 1
            outcomes[f"rejected {mutation}"] += 1
            continue
        except Exception as error:
            raise AssertionError(f"{where}: {type(error).__name__} instead of TraceFileError: {error}") from error
        try:
            answers = answer_everything(VizData(files, max_drawn=16), rng)
            # what the page gets must be JSON a browser's JSON.parse reads (no NaN or Infinity)
            json.dumps(answers, allow_nan=False)
        except Exception as error:
            raise AssertionError(f"{where}: it loaded, then {type(error).__name__}: {error}") from error
        outcomes["accepted"] += 1
    # the fuzzer reaches both sides: mutants the checks refuse and mutants the endpoints must answer
    total = MUTANTS // len(SEEDS)
    assert outcomes["rejected"] >= total // 10 and outcomes["accepted"] >= total // 10, outcomes
    for mutation in ("truncate", "inflate", "nest", "retype"):
        assert outcomes[f"rejected {mutation}"] > 0, (mutation, outcomes)
