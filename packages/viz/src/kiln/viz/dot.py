"""Drawing a graph: DOT text for the kept nodes, laid out and rendered to SVG by Graphviz's `dot` (a subprocess).

Nodes are coloured by the kind of their op; a node's SVG group has id "n<id>" and the class "changed" when the
current step created it, so the page can find and highlight it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

from kiln.viz.graphs import DrawnGraph, GraphStore

__all__ = ["GraphvizError", "op_colour", "render_svg", "to_dot"]

MAX_ARG_CHARS = 48

# op name -> fill colour, by the role of the op in a kernel graph
_COLOURS: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"SINK", "PROGRAM", "LINEAR", "SOURCE", "BINARY", "KERNEL"}), "#d9d2e9"),
    (frozenset({"DEFINE_GLOBAL", "DEFINE_LOCAL", "DEFINE_REG", "DEFINE_VAR", "BUFFER", "DEVICE", "BIND"}), "#f4cccc"),
    (frozenset({"LOAD", "STORE", "INDEX", "AFTER", "COPY", "ASSIGN"}), "#fce5cd"),
    (frozenset({"RANGE", "END", "SPECIAL", "BARRIER", "IF", "ENDIF"}), "#c9daf8"),
    (frozenset({"REDUCE", "REDUCE_AXIS", "WMMA", "CONTRACT", "UNROLL"}), "#b6d7a8"),
    (frozenset({"CONST", "VCONST", "VECTORIZE", "GEP", "CAST", "BITCAST"}), "#eeeeee"),
    (frozenset({"RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "FLIP", "CONTIGUOUS", "DETACH"}), "#fff2cc"),
)
_DEFAULT_COLOUR = "#ffffff"  # ALU ops


def op_colour(op: str) -> str:
    """The fill colour of an op's nodes."""
    return next((colour for ops, colour in _COLOURS if op in ops), _DEFAULT_COLOUR)


class GraphvizError(RuntimeError):
    """Graphviz is not installed or failed on a graph."""


def _label(store: GraphStore, node: int) -> str:
    parts = [store.op[node]]
    if store.dtype[node] and store.dtype[node] != "void":
        parts.append(store.dtype[node])
    arg = store.arg[node]
    if arg and arg != "None":
        parts.append(arg if len(arg) <= MAX_ARG_CHARS else arg[: MAX_ARG_CHARS - 1] + "…")
    return "\n".join(parts)


def _visible(character: str) -> str:
    # control characters and lone surrogates (which JSON allows) are neither valid XML nor UTF-8: show their code
    code = ord(character)
    if character != "\n" and (code < 0x20 or code in (0x7F, 0xFFFE, 0xFFFF) or 0xD800 <= code <= 0xDFFF):
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return character


def _quote(text: str) -> str:
    """`text` as a DOT string that Graphviz draws literally: backslashes, quotes and `&` (which would start an
    entity) escaped, so a label from a trace is always text in the SVG."""
    text = "".join(map(_visible, text))
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;").replace("\n", "\\n")
    return '"' + escaped + '"'


def to_dot(store: GraphStore, drawn: DrawnGraph, changed: frozenset[int]) -> str:
    """The DOT text of `drawn` (sources above their users), `changed` nodes outlined."""
    lines = [
        "digraph kernel {",
        "  rankdir=TB; nodesep=0.15; ranksep=0.25;",
        '  node [shape=box, style="rounded,filled", fontname="monospace", fontsize=10, margin="0.06,0.03"];',
        '  edge [arrowsize=0.5, color="#888888"];',
    ]
    for node in drawn.nodes:
        attributes = [f"id={_quote(f'n{node}')}", f"label={_quote(_label(store, node))}"]
        attributes.append(f"fillcolor={_quote(op_colour(store.op[node]))}")
        # Graphviz expands escapes (\N: the node's name) in a tooltip once more than in a label
        tooltip = f"node {node}: {store.op[node]} {store.arg[node][:200]}".replace("\\", "\\\\")
        attributes.append(f"tooltip={_quote(tooltip)}")
        if node in changed:
            attributes += ['class="changed"', 'color="#d62728"', "penwidth=3"]
        else:
            attributes.append('class="plain"')
        lines.append(f"  n{node} [{', '.join(attributes)}];")
    for node, count in drawn.hidden_sources.items():
        lines.append(
            f'  h{node} [id="h{node}", class="hidden-sources", label="+{count} hidden", shape=plaintext, '
            'style="", fontcolor="#777777"];'
        )
        lines.append(f"  h{node} -> n{node} [style=dashed];")
    lines.extend(f"  n{source} -> n{user};" for source, user in drawn.edges)
    lines.append("}")
    return "\n".join(lines) + "\n"


@functools.cache
def _dot_binary() -> str:
    found = shutil.which("dot")
    if found is None:
        raise GraphvizError("Graphviz's `dot` is not installed (Debian/Ubuntu: apt-get install graphviz)")
    return found


def render_svg(dot_text: str, timeout: float = 60.0) -> str:
    """Lay out and render DOT text with Graphviz; the SVG element (no XML prolog)."""
    try:
        completed = subprocess.run(
            [_dot_binary(), "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise GraphvizError(f"Graphviz took longer than {timeout:g} s to lay out the graph") from None
    if completed.returncode != 0:
        raise GraphvizError(f"Graphviz failed: {completed.stderr.strip()[:500]}")
    svg = completed.stdout
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg
