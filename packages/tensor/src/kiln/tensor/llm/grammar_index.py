"""A vocabulary's token texts as a prefix tree over one sorted numpy array, for grammar masks
(kiln.tensor.llm.json_grammar).

The texts are sorted, so the tokens that share a prefix are one contiguous range of the sorted order: a tree node is
that range and the prefix length (`depth`), and its children are the runs of equal characters at position `depth`
within the range, found with numpy on a matrix of the texts' first `width` code points (children are worked out
when first asked for, then kept). A mask walk can then take or refuse a whole range (a subtree) in one slice.
Tokens longer than `width` are followed one by one past that depth (`tail`).

`last_special[i]` is the position of the last `"`, `\\` or control character in the i-th sorted text (-1: none):
inside a JSON string only those characters change the automaton's state, so every token of a range whose
`last_special` is before the depth where the string began leaves the state as it is, and is taken as a block. The
others are read from their first special character on, which `string_tails` groups: the distinct tails, in an index
of their own, each walked once for all the tokens that end with it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Children", "Tails", "TokenIndex", "is_special"]

_SPECIAL = re.compile(r'["\\\x00-\x1f]')  # the characters `is_special` takes


def is_special(char: str) -> bool:
    """Whether `char` changes the state of a JSON string's body: a quote, a backslash or a control character."""
    return char in '"\\' or ord(char) < 0x20


@dataclass(frozen=True)
class Children:
    """The subtrees of one node: `ended` tokens (sorted positions [lo, lo + ended)) have the node's prefix as their
    whole text; child k holds the sorted range [starts[k], stops[k]) of the texts with `chars[k]` at position depth
    (in code point order)."""

    ended: int
    chars: list[str]
    starts: list[int]
    stops: list[int]


@dataclass(frozen=True)
class Tails:
    """Tokens of a range grouped by their tail (the text from the first special character at or after a depth on):
    `index` holds the distinct tails, and the token at sorted position `positions[k]` has the tail at `index`'s sorted
    position `tails[k]`."""

    index: TokenIndex
    positions: np.ndarray
    tails: np.ndarray


class TokenIndex:
    """The texts of `texts` (token id -> text; empty texts and ones holding "\\ufffd" are left out) sorted, with the
    lazily built prefix tree described in the module docstring. `ids[i]` is the token id of the i-th sorted text."""

    def __init__(self, texts: Mapping[int, str], width: int = 32) -> None:
        if width < 1:
            raise ValueError(f"TokenIndex width must be a positive number of characters, got {width}")
        ids = [token_id for token_id, text in texts.items() if text and "\ufffd" not in text]
        unsorted = [texts[token_id] for token_id in ids]
        order = sorted(range(len(unsorted)), key=unsorted.__getitem__)
        self.texts = [unsorted[k] for k in order]
        self.ids = np.array(ids, np.int64)[np.array(order, np.int64)] if ids else np.zeros(0, np.int64)
        self.lengths = np.fromiter(map(len, self.texts), np.int64, len(self.texts))
        longest = int(self.lengths.max(initial=0))
        self.width = max(1, min(width, longest))
        # The first `width` code points of each text (0 past its end: `lengths` tells a NUL from the padding).
        codes = np.array(self.texts, dtype=f"<U{self.width}").view(np.uint32).reshape(len(self.texts), self.width)
        self.codes = codes
        positions = np.arange(self.width)
        special = ((codes == ord('"')) | (codes == ord("\\")) | (codes < 0x20)) & (positions < self.lengths[:, None])
        last = np.where(special.any(axis=1), self.width - 1 - np.argmax(special[:, ::-1], axis=1), -1)
        for position in np.flatnonzero(self.lengths > self.width).tolist():  # the few longer texts
            text = self.texts[position]
            last[position] = max((i for i, char in enumerate(text) if is_special(char)), default=-1)
        self.last_special = last.astype(np.int64)
        self._children: dict[tuple[int, int], Children] = {}
        self._tails: dict[tuple[int, int, int], Tails | None] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.texts)

    def children(self, lo: int, hi: int, depth: int) -> Children:
        """The subtrees of the node of sorted range [lo, hi) at prefix length `depth` (< width)."""
        key = (depth, lo)
        found = self._children.get(key)
        if found is not None:
            return found
        ended = int(np.count_nonzero(self.lengths[lo:hi] == depth))  # the prefix itself sorts first
        first = lo + ended
        column = self.codes[first:hi, depth]
        offsets = np.flatnonzero(np.concatenate([[hi > first], column[1:] != column[:-1]])).astype(np.int64)
        starts = (offsets + first).tolist()
        made = Children(ended, [chr(code) for code in column[offsets].tolist()], starts, [*starts[1:], hi])
        with self._lock:
            self._children[key] = made
        return made

    def string_tails(self, lo: int, hi: int, start: int) -> Tails | None:
        """The tokens of sorted range [lo, hi) with a special character at or after position `start`, grouped by
        their text from the first such character on (None: there are none)."""
        key = (lo, hi, start)
        if key in self._tails:
            return self._tails[key]
        positions = lo + np.flatnonzero(self.last_special[lo:hi] >= start)
        numbers: dict[str, int] = {}
        which = []
        for position in positions.tolist():
            text = self.texts[position]
            found = _SPECIAL.search(text, start)
            assert found is not None  # last_special >= start
            which.append(numbers.setdefault(text[found.start() :], len(numbers)))
        made = None
        if numbers:
            index = TokenIndex({number: tail for tail, number in numbers.items()}, self.width)
            rank = np.empty(len(numbers), np.int64)
            rank[index.ids] = np.arange(len(index))
            made = Tails(index, positions, rank[np.array(which, np.int64)])
        with self._lock:
            self._tails[key] = made
        return made
