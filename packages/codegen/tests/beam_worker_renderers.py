"""A renderer for the BEAM worker tests, importable by name in the spawned build workers (this folder is on pytest's
`pythonpath`, and a spawned worker starts with its parent's sys.path)."""

from __future__ import annotations

import time

from renderers_for_tests import ScalarRenderer

from kiln.codegen import KernelSignature
from kiln.uops import UOp


class HangingRenderer(ScalarRenderer):
    """ScalarRenderer's text, except that rendering the one program whose text is `hang_on` never finishes (a
    compiler stuck on a kernel)."""

    def __init__(self, hang_on: str) -> None:
        super().__init__()
        self.hang_on = hang_on

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        text = super().render(uops, name, signature)
        if text == self.hang_on:
            time.sleep(3600)
        return text
