"""Tests of kiln.uops.knobs: environment parsing, precedence, Context, registration and docs/knobs.md."""

from __future__ import annotations

import os
import pathlib

import pytest

from kiln.uops import Context, Knob, knobs, knobs_markdown, register_knob
from kiln.uops.knobs import MARKDOWN_HEADER, knobs_section_markdown

DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs" / "knobs.md"


def test_values_come_from_the_environment_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEBUG", raising=False)
    assert knobs.DEBUG == 0
    monkeypatch.setenv("DEBUG", "3")
    assert knobs.DEBUG == 3
    monkeypatch.setenv("DEBUG", "5")
    assert knobs.DEBUG == 5
    monkeypatch.setenv("NOOPT", "yes")
    assert knobs.NOOPT is True
    monkeypatch.setenv("NOOPT", "0")
    assert knobs.NOOPT is False
    monkeypatch.setenv("DEV", "PYTHON")
    assert knobs.DEVICE == "PYTHON"
    monkeypatch.setenv("CACHEDIR", "~/kiln-test-cache")
    assert os.path.expanduser("~/kiln-test-cache") == knobs.CACHEDIR


def test_bad_environment_values_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEAM", "wide")
    with pytest.raises(ValueError, match="BEAM='wide'"):
        _ = knobs.BEAM
    monkeypatch.setenv("VIZ", "maybe")
    with pytest.raises(ValueError, match="VIZ"):
        _ = knobs.VIZ


def test_context_overrides_nest_and_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG", "1")
    with Context(DEBUG=3, NOOPT=1):
        assert (knobs.DEBUG, knobs.NOOPT) == (3, True)
        with Context(DEBUG=4):
            assert (knobs.DEBUG, knobs.NOOPT) == (4, True)
        assert knobs.DEBUG == 3
    assert (knobs.DEBUG, knobs.NOOPT) == (1, False)
    with pytest.raises(RuntimeError), Context(DEBUG=7):
        raise RuntimeError("restored even on error")
    assert knobs.DEBUG == 1


def test_context_as_a_decorator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BEAM", raising=False)

    @Context(BEAM=4)
    def searched() -> int:
        return knobs.BEAM

    assert searched() == 4 and searched() == 4
    assert knobs.BEAM == 0


def test_context_and_assignment_check_names_and_types() -> None:
    with pytest.raises(ValueError, match="unknown knob 'DEBUGG'"):
        Context(DEBUGG=1)
    with pytest.raises(TypeError, match="DEBUG expects a int"):
        Context(DEBUG="high")
    with pytest.raises(TypeError, match="NOOPT"):
        Context(NOOPT=2)
    with pytest.raises(AttributeError, match="unknown knob"):
        _ = knobs.NOT_A_KNOB


def test_assignment_sits_between_context_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEC", "0")
    knobs.SPEC = 2
    try:
        assert knobs.SPEC == 2
        with Context(SPEC=1):
            assert knobs.SPEC == 1
    finally:
        knobs.get_knob("SPEC").reset()
    assert knobs.SPEC == 0


def test_registering_a_knob_of_another_package() -> None:
    knob = register_knob("KILN_TEST_ONLY_KNOB", int, 7, "A knob registered by a test.", owner="kiln.test")
    assert knobs.KILN_TEST_ONLY_KNOB == 7
    with Context(KILN_TEST_ONLY_KNOB=9):
        assert knobs.KILN_TEST_ONLY_KNOB == 9
    assert register_knob("KILN_TEST_ONLY_KNOB", int, 7, "again", owner="kiln.test") is knob
    with pytest.raises(ValueError, match="already registered"):
        register_knob("KILN_TEST_ONLY_KNOB", int, 8, "different default", owner="kiln.test")
    with pytest.raises(ValueError, match="upper-case"):
        register_knob("lower", int, 0, "bad name")
    section = knobs_section_markdown("kiln.test")
    assert "| `KILN_TEST_ONLY_KNOB` | `KILN_TEST_ONLY_KNOB` | int | `7` | A knob registered by a test. |" in section


def test_docs_knobs_md_is_current() -> None:
    # other packages' sections are checked by their own tests; this one owns the header and the kiln.uops table
    text = DOCS.read_text()
    assert text.startswith(MARKDOWN_HEADER)
    expected = knobs_section_markdown("kiln.uops")
    assert expected in text, "docs/knobs.md is stale: run `uv run python -m kiln.uops.knobs_doc > docs/knobs.md`"
    assert knobs_markdown(["kiln.uops"]) == MARKDOWN_HEADER + "\n" + expected


def test_every_write_through_os_environ_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    # knob reads take a shortcut through os.environ's own storage and remember the last value they parsed
    knob = Knob("TEST_ENV_SHORTCUT", int, 7, "a test knob", env="KILN_TEST_ENV_SHORTCUT")
    monkeypatch.delenv("KILN_TEST_ENV_SHORTCUT", raising=False)
    seen = [knob.value()]
    for text in ("2", "3", "2", " 4 ", "2"):
        os.environ["KILN_TEST_ENV_SHORTCUT"] = text
        seen.append(knob.value())
        seen.append(knob.value())  # the remembered value
    del os.environ["KILN_TEST_ENV_SHORTCUT"]
    seen.append(knob.value())
    assert seen == [7, 2, 2, 3, 3, 2, 2, 4, 4, 2, 2, 7]
    monkeypatch.setenv("KILN_TEST_ENV_SHORTCUT", "oops")
    with pytest.raises(ValueError, match="KILN_TEST_ENV_SHORTCUT='oops' is not a valid int"):
        knob.value()
