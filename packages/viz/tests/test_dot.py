"""Drawing a graph whose labels come from a hostile trace: the SVG that Graphviz renders, read back with the stdlib's
XML parser (not by kiln), must hold every label as literal text, with no element or attribute that could run."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ElementTree

import pytest

from kiln.viz.dot import render_svg, to_dot
from kiln.viz.graphs import GraphStore

pytestmark = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")

SVG = "{http://www.w3.org/2000/svg}"
XLINK_TITLE = "{http://www.w3.org/1999/xlink}title"
HOSTILE_ARGS = [
    '"><script>window.pwned=1</script>',
    "&lt;b&gt; &amp; &nbsp; \\N \\G \\l",
    'x" onmouseover="window.pwned=1',
    "bell\x07 nul\x00 lone \ud800 end",
]


def _draw(args: list[str]) -> ElementTree.Element:
    nodes = [{"op": "CONST", "dtype": "dtypes.int", "arg": arg, "src": []} for arg in args]
    nodes.append({"op": "SINK", "src": list(range(len(args)))})
    store = GraphStore(nodes, [])
    root = store.canonical[-1]
    drawn = store.drawn(root, frozenset(), 250)
    return ElementTree.fromstring(render_svg(to_dot(store, drawn, frozenset())))


def test_hostile_labels_are_literal_text_in_the_svg() -> None:
    svg = _draw(HOSTILE_ARGS)
    elements = list(svg.iter())
    assert not [element.tag for element in elements if element.tag.removeprefix(SVG) in ("script", "foreignObject")]
    attributes = [name for element in elements for name in element.attrib]
    assert not [name for name in attributes if name.rsplit("}", 1)[-1].lower().startswith("on")]
    # each node's label: its op, its dtype, then its arg (one <text> per line), exactly as the trace spells it
    lines = ["".join(text.itertext()) for text in svg.iter(f"{SVG}text")]
    expected = [
        arg.replace("\x07", "\\x07").replace("\x00", "\\x00").replace("\ud800", "\\ud800") for arg in HOSTILE_ARGS
    ]
    for arg in expected:
        assert arg in lines, (arg, lines)
    tooltips = [element.attrib[XLINK_TITLE] for element in elements if XLINK_TITLE in element.attrib]
    for arg in expected:
        assert any(tooltip.endswith(f"CONST {arg}") for tooltip in tooltips), (arg, tooltips)
