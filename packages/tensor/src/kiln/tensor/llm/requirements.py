"""The llm extra's packages, checked when kiln.tensor.llm is imported (its first import): a missing one raises
ModuleNotFoundError naming it and the extra to install, instead of failing deep inside a tokenizer or template."""

from __future__ import annotations

import importlib.util

__all__ = ["LLM_EXTRA", "require_llm_extra"]

LLM_EXTRA = ("tokenizers", "jinja2")
"""What `pip install 'kiln-tensor[llm]'` brings."""


def require_llm_extra() -> None:
    """Raises ModuleNotFoundError unless every package of the llm extra can be imported."""
    for name in LLM_EXTRA:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(
                f"kiln.tensor.llm needs the {name!r} package: install kiln-tensor's llm extra "
                "(pip install 'kiln-tensor[llm]')",
                name=name,
            )


require_llm_extra()
