"""Command-line arguments shared by the chat CLI (`python -m kiln.tensor.llm`) and its `serve` subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["context_argument", "int_at_least"]


def int_at_least(least: int, expected: str) -> Callable[[str], int]:
    """An argparse `type`: the int the text spells, at least `least` (else an error saying `expected`)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
        return value

    parse.__name__ = "int"  # argparse names the type in "invalid int value: 'x'"
    return parse


def context_argument(parser: argparse.ArgumentParser) -> None:
    """`--max-context N`: the KV cache's positions (prompt plus completion); shared with `serve`."""
    parser.add_argument(
        "--max-context", type=int_at_least(1, "a positive number of positions"), default=None,
        help="positions the KV cache holds, prompt plus completion (default: min(the trained context, 4096))",
    )  # fmt: skip
