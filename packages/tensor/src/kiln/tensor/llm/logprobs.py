"""Log-probabilities of generated tokens, and their records in OpenAI's chat and completions shapes.

A token's log-probability is the log-softmax of the model's logits at its step (float64, the logits as the model
gives them: no temperature, top-k/top-p cut or grammar mask), and `top` the `count` most likely tokens of that step,
most likely first (ties by token id).

A token is spelled by its bytes (`spell` gives them): the text is their UTF-8 reading, a token that holds part of a
character spelled with `\\xNN` escapes for its bytes (as OpenAI's API does), and `bytes` lists them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MAX_TOP_LOGPROBS", "TokenLogprob", "chat_logprobs", "completion_logprobs", "log_softmax", "raw_bytes",
           "token_logprob"]  # fmt: skip

MAX_TOP_LOGPROBS = 20
"""The most alternatives a request may ask for (OpenAI's limit)."""


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its id, its log-probability and the step's most likely tokens [(id, logprob)]."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log(softmax(logits)) of a row, in float64."""
    row = np.asarray(logits, np.float64)
    shifted = row - row.max()
    result: np.ndarray = shifted - np.log(np.exp(shifted).sum())
    return result


def token_logprob(logits: np.ndarray, token: int, count: int) -> TokenLogprob:
    """`token`'s log-probability under `logits` and the `count` most likely tokens."""
    values = log_softmax(logits)
    order = np.argsort(-values, kind="stable")[:count]
    return TokenLogprob(token, float(values[token]), tuple((int(i), float(values[i])) for i in order))


def _byte_level_table() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's): the character standing for each byte in a vocabulary entry."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1), *range(ord("\u00ae"), 256)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in kept:
            table[chr(byte)] = byte
        else:
            table[chr(256 + extra)] = byte
            extra += 1
    return table


_BYTE_LEVEL = _byte_level_table()
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def raw_bytes(entry: str) -> bytes | None:
    """The bytes a vocabulary entry stands for when it spells them: a byte token `<0xNN>` (SentencePiece byte
    fallback) or an entry of byte-level characters; None otherwise."""
    match = _BYTE_TOKEN.match(entry)
    if match:
        return bytes([int(match.group(1), 16)])
    if entry and all(char in _BYTE_LEVEL for char in entry):
        return bytes(_BYTE_LEVEL[char] for char in entry)
    return None


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")


def chat_logprobs(entries: Sequence[TokenLogprob], spell: Callable[[int], bytes]) -> dict[str, Any]:
    """A chat choice's `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}]}; `spell` gives a token's
    bytes."""

    def item(token: int, logprob: float) -> dict[str, Any]:
        data = spell(token)
        return {"token": _text(data), "logprob": logprob, "bytes": list(data)}

    return {"content": [{**item(e.token, e.logprob), "top_logprobs": [item(i, lp) for i, lp in e.top]}
                        for e in entries], "refusal": None}  # fmt: skip


def completion_logprobs(
    entries: Sequence[TokenLogprob], spell: Callable[[int], bytes], before: bytes
) -> dict[str, Any]:
    """A completion choice's `logprobs`: {tokens, token_logprobs, top_logprobs, text_offset}; a token's offset is
    the characters of the text before it (`before`: the bytes of the completion's earlier tokens, a character cut
    short not counted)."""
    tokens, offsets = [], []
    for entry in entries:
        data = spell(entry.token)
        offsets.append(len(before.decode("utf-8", errors="ignore")))
        tokens.append(_text(data))
        before += data
    top = [{_text(spell(i)): lp for i, lp in e.top} for e in entries]
    return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries], "top_logprobs": top,
            "text_offset": offsets}  # fmt: skip
