"""Command-line arguments shared by the chat CLI (`python -m kiln.tensor.llm`) and its `serve` subcommand."""

from __future__ import annotations

import argparse

__all__ = ["context_argument"]


def _context_size(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of positions, got {text}")
    return value


def context_argument(parser: argparse.ArgumentParser) -> None:
    """`--max-context N`: the KV cache's positions (prompt plus completion); shared with `serve`."""
    parser.add_argument(
        "--max-context", type=_context_size, default=None,
        help="positions the KV cache holds, prompt plus completion (default: min(the trained context, 4096))",
    )  # fmt: skip
