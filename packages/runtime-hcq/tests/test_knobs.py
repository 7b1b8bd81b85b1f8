"""The runtime's knobs: documented in docs/knobs.md, and acting on allocators and renderer choice."""

from __future__ import annotations

import pathlib

from kiln.runtime import BufferSpec, DeviceBase, HostAllocator
from kiln.uops import Context, knobs_markdown

DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs" / "knobs.md"


def test_docs_knobs_md_has_the_current_runtime_section() -> None:
    generated = knobs_markdown(["kiln.runtime"])
    expected = generated[generated.index("## kiln.runtime") :]
    assert "| `LRU` | `LRU` | bool | `True` |" in expected
    assert expected in DOCS.read_text(), "docs/knobs.md is stale: run `uv run python -m kiln.uops.knobs_doc`"


def test_lru_off_returns_freed_blocks_to_the_device() -> None:
    allocator = HostAllocator("HOST")
    block = allocator.alloc(4096)
    with Context(LRU=False):
        allocator.free(block, 4096, BufferSpec())
    assert allocator.cached_bytes == 0 and allocator.allocated_bytes == 0
    block = allocator.alloc(4096)
    allocator.free(block, 4096, BufferSpec())
    assert allocator.cached_bytes == 4096 and allocator.allocated_bytes == 4096


class KnobRenderer:
    pass


class OtherRenderer:
    pass


class KnobDevice(DeviceBase):
    renderers = (KnobRenderer, OtherRenderer)

    def __init__(self, name: str) -> None:
        super().__init__(name, HostAllocator(name))


def test_renderer_knob_can_be_overridden_in_a_context() -> None:
    device = KnobDevice("KNOBDEV")
    assert device.renderer_class is KnobRenderer
    with Context(KNOBDEV_RENDERER="other"):
        assert device.renderer_class is OtherRenderer
    assert device.renderer_class is KnobRenderer
