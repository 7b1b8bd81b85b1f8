"""What each DEBUG level prints matches docs/knobs.md (the knob's help): 1 summary, 2 a line per kernel, 3 applied
opts, 4 source, 5 kernel sink, 6 linear uops. Each level adds to the ones below."""

from __future__ import annotations

import itertools

import pytest

from kiln.tensor import Tensor
from kiln.uops import Context, knobs

_sizes = itertools.count(1001)  # a new shape per run: the kernel is compiled (and printed) afresh


def _output_at(level: int, capsys: pytest.CaptureFixture[str]) -> str:
    size = next(_sizes)
    with Context(DEBUG=level, DISABLE_COMPILER_CACHE=True):
        (Tensor.ones(size, device="CPU").contiguous() * 3).realize()
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("level", "present", "absent"),
    [
        (0, [], ["scheduled", "***", "applied opts", "define", "SINK"]),
        (1, ["scheduled"], ["***", "applied opts", "define"]),
        (2, ["scheduled", "*** CPU"], ["applied opts", "define"]),
        (3, ["*** CPU", "applied opts"], ["define"]),
        (4, ["applied opts", "define"], ["SINK"]),
        (5, ["define", "SINK"], []),
    ],
)
def test_each_debug_level_prints_what_the_docs_say(
    level: int, present: list[str], absent: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    output = _output_at(level, capsys)
    assert all(word in output for word in present), f"DEBUG={level} printed {output!r}"
    assert not any(word in output for word in absent), f"DEBUG={level} printed {output!r}"


def test_knob_help_lists_the_same_levels() -> None:
    help_text = type(knobs).DEBUG.help
    for text in ("1 one summary line", "2 one line per kernel", "3 the applied", "4 the kernel source", "5 the"):
        assert text in help_text
