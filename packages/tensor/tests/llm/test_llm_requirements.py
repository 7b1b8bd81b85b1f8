"""kiln.tensor.llm names a missing package of its extra (tokenizers, jinja2) and the extra to install."""

from __future__ import annotations

import importlib.util

import pytest

from kiln.tensor.llm import requirements


@pytest.mark.parametrize("missing", ["tokenizers", "jinja2"])
def test_a_missing_package_of_the_extra_is_named(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == missing else real(name))
    with pytest.raises(ModuleNotFoundError, match=rf"'{missing}'.*kiln-tensor\[llm\]") as raised:
        requirements.require_llm_extra()
    assert raised.value.name == missing


def test_the_extra_is_present_here() -> None:
    requirements.require_llm_extra()
    assert requirements.LLM_EXTRA == ("tokenizers", "jinja2")
