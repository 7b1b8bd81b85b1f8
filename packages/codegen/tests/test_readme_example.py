"""The README's toolkit example runs as written and computes what numpy computes.

The first ```python block under a heading containing "Toolkit example" in packages/codegen/README.md is executed
on its own (uops + codegen + numpy only). It must leave two arrays in its namespace: `result`, what the kernel it
built, lowered and interpreted produced, and `expected`, numpy's answer for the same inputs.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def toolkit_example(text: str) -> str:
    """The code of the first python block in the section whose heading contains "Toolkit example"."""
    heading = re.search(r"^#+ .*Toolkit example.*$", text, re.MULTILINE | re.IGNORECASE)
    if heading is None:
        raise AssertionError(f"{README} has no heading containing 'Toolkit example'")
    section = text[heading.end() :]
    following = re.search(r"^#+ ", section, re.MULTILINE)
    section = section[: following.start()] if following else section
    block = re.search(r"^```python\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    if block is None:
        raise AssertionError("the 'Toolkit example' section has no ```python block")
    return block.group(1)


def test_extraction_finds_the_block_under_the_heading() -> None:
    text = (
        "# A\n```python\nwrong = 1\n```\n## Toolkit example\nprose\n```python\nright = 2\n```\n"
        "## Next\n```python\nx = 3\n```\n"
    )
    assert toolkit_example(text) == "right = 2\n"


def test_readme_toolkit_example_matches_numpy() -> None:
    code = toolkit_example(README.read_text(encoding="utf-8"))
    assert "get_program" in code and "run_program" in code, "the example should lower a kernel and interpret it"
    namespace: dict[str, object] = {"__name__": "readme_example"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), namespace)
    result, expected = namespace.get("result"), namespace.get("expected")
    assert isinstance(result, np.ndarray) and isinstance(expected, np.ndarray), "set `result` and `expected` arrays"
    assert result.size > 0 and np.any(expected != 0), "the example should compute something non-trivial"
    np.testing.assert_allclose(result, expected, rtol=1e-6)
