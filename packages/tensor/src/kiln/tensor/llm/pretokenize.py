"""The pre-tokenizer splits of byte-level BPE models, written as scanners (no regex engine with \\p{L} needed).

Byte-level BPE tokenizers cut text into pieces before merging; the pieces are the matches of one regular expression
applied left to right. Three expressions cover the llama family:
- GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`
- Llama 3: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|
  \\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`
- Qwen2: as Llama 3 with `\\p{N}` (one digit per piece) instead of `\\p{N}{1,3}`.
Python's `re` has no `\\p{L}`, so each alternative is matched here by hand with the Unicode categories of
`unicodedata` (a letter is a category L*, a number N*, whitespace what `str.isspace` says), keeping the
alternation order and the greedy-with-backtracking behaviour of each alternative.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

__all__ = ["SPLITS", "split_for_pattern", "split_gpt2", "split_llama3", "split_qwen2"]

_CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


def _is_letter(char: str) -> bool:
    return unicodedata.category(char)[0] == "L"


def _is_number(char: str) -> bool:
    return unicodedata.category(char)[0] == "N"


def _is_other(char: str) -> bool:
    """`[^\\s\\p{L}\\p{N}]`: neither whitespace nor a letter nor a number."""
    return not char.isspace() and unicodedata.category(char)[0] not in "LN"


def _run(text: str, start: int, accept: Callable[[str], bool], limit: int | None = None) -> int:
    """The end of the longest run of accepted characters from `start` (at most `limit` of them)."""
    end, stop = start, len(text) if limit is None else min(len(text), start + limit)
    while end < stop and accept(text[end]):
        end += 1
    return end


def _contraction(text: str, start: int, ignore_case: bool) -> int:
    if text[start] != "'":
        return start
    for suffix in _CONTRACTIONS:
        piece = text[start + 1 : start + 1 + len(suffix)]
        if (piece.lower() if ignore_case else piece) == suffix:
            return start + 1 + len(suffix)
    return start


def _whitespace_tail(text: str, start: int) -> int:
    """`\\s+(?!\\S)|\\s+`: the whitespace run, less its last character when a non-space follows it."""
    end = _run(text, start, str.isspace)
    if end < len(text) and end - 1 > start:
        return end - 1
    return end


def _split_llama_family(text: str, digits: int | None) -> list[str]:
    pieces, position, length = [], 0, len(text)
    while position < length:
        char = text[position]
        end = _contraction(text, position, ignore_case=True)
        if end == position:
            # [^\r\n\p{L}\p{N}]?\p{L}+
            if char not in "\r\n" and not _is_letter(char) and not _is_number(char):
                if position + 1 < length and _is_letter(text[position + 1]):
                    end = _run(text, position + 1, _is_letter)
            elif _is_letter(char):
                end = _run(text, position, _is_letter)
        if end == position and _is_number(char):  # \p{N}{1,3} or \p{N}
            end = _run(text, position, _is_number, digits)
        if end == position:  # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
            first = (
                position + 1 if char == " " and position + 1 < length and _is_other(text[position + 1]) else position
            )
            if _is_other(text[first]):
                end = _run(text, _run(text, first, _is_other), lambda c: c in "\r\n")
        if end == position and char.isspace():
            run_end = _run(text, position, str.isspace)
            newline = max((i for i in range(position, run_end) if text[i] in "\r\n"), default=-1)
            end = newline + 1 if newline >= 0 else _whitespace_tail(text, position)  # \s*[\r\n]+ first
        pieces.append(text[position:end])
        position = end
    return pieces


def split_llama3(text: str) -> list[str]:
    """The Llama 3 pre-tokenizer pieces of `text` (numbers in pieces of up to three digits)."""
    return _split_llama_family(text, 3)


def split_qwen2(text: str) -> list[str]:
    """The Qwen2 pre-tokenizer pieces of `text` (one digit per piece)."""
    return _split_llama_family(text, 1)


def split_gpt2(text: str) -> list[str]:
    """The GPT-2 pre-tokenizer pieces of `text`."""
    pieces, position, length = [], 0, len(text)
    while position < length:
        char = text[position]
        end = _contraction(text, position, ignore_case=False)
        if end == position:
            first = position + 1 if char == " " and position + 1 < length else position
            for accept in (_is_letter, _is_number, _is_other):  # ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
                if accept(text[first]):
                    end = _run(text, first, accept)
                    break
                if first != position and accept(char):
                    end = _run(text, position, accept)
                    break
        if end == position:
            end = _whitespace_tail(text, position)
        pieces.append(text[position:end])
        position = end
    return pieces


SPLITS: dict[str, Callable[[str], list[str]]] = {"gpt2": split_gpt2, "llama3": split_llama3, "qwen2": split_qwen2}
"""The known pre-tokenizer splits by name (GGUF `tokenizer.ggml.pre` values map onto these)."""


def split_for_pattern(pattern: str) -> str:
    """The name of the split a tokenizer.json `Split` regex is, or ValueError naming the pattern."""
    compact = pattern.replace(" ", "")
    if "\\p{N}{1,3}" in compact and "[\\r\\n]" in compact:
        return "llama3"
    if "\\p{N}|" in compact and "[\\r\\n]" in compact:
        return "qwen2"
    if "?\\p{L}+|?\\p{N}+" in compact:
        return "gpt2"
    raise ValueError(f"unsupported pre-tokenizer pattern {pattern!r}: kiln knows the GPT-2, Llama 3 and Qwen2 splits")
