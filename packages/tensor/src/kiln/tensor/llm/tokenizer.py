"""`Tokenizer`: byte-level BPE (the Llama 3 / Qwen2 / GPT-2 kind) read from a GGUF vocabulary or a tokenizer.json.

Encoding: special tokens are cut out first (when allowed), the rest is split into pre-tokenizer pieces
(`pretokenize`), each piece's UTF-8 bytes become the printable characters of the byte-level alphabet, and the BPE
merges join neighbouring symbols, lowest merge rank first, until no listed pair is left. Decoding maps the tokens'
characters back to bytes; `StreamDecoder` hands out text as tokens arrive without ever cutting a UTF-8 character.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kiln.tensor.llm.pretokenize import SPLITS, split_for_pattern

__all__ = ["StreamDecoder", "Tokenizer", "byte_alphabet"]


def byte_alphabet() -> dict[int, str]:
    """The byte-level BPE alphabet: each byte as one printable character.

    Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes (controls,
    space, soft hyphen ...) take the characters from U+0100 on, in byte order, so every byte has a visible,
    non-space character and the mapping is reversible.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


_BYTE_TO_CHAR = byte_alphabet()
_CHAR_TO_BYTE = {char: byte for byte, char in _BYTE_TO_CHAR.items()}

# GGUF tokenizer.ggml.pre values -> the split they use (llama.cpp's names for the pre-tokenizers)
_GGUF_PRE = {
    "llama3": "llama3",
    "llama-bpe": "llama3",
    "llama-v3": "llama3",
    "smaug-bpe": "llama3",
    "qwen2": "qwen2",
    "qwen35": "qwen2",
    "deepseek-r1-qwen": "qwen2",
    "gpt-2": "gpt2",
    "gpt2": "gpt2",
    "default": "gpt2",
}
_GGUF_CONTROL, _GGUF_USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values (llama.cpp's llama_token_type)


class Tokenizer:
    """A byte-level BPE tokenizer.

    Args:
        vocab: token string (in the byte-level alphabet, or the literal text of an added token) -> id.
        merges: the BPE merges as (left, right) pairs, best (lowest rank) first.
        split: the pre-tokenizer: "llama3", "qwen2" or "gpt2".
        special: added tokens recognized as a whole in text (content -> id), e.g. "<|eot_id|>".
        bos_id, eos_id: the begin/end of sequence ids, when the model has them.
        add_bos: whether `encode` puts `bos_id` first by default (GGUF add_bos_token, Llama 3's post-processor).
        stop_ids: ids that end a generation (eos, end-of-turn tokens).
    """

    def __init__(
        self,
        vocab: Mapping[str, int],
        merges: Sequence[tuple[str, str]],
        split: str = "llama3",
        special: Mapping[str, int] | None = None,
        bos_id: int | None = None,
        eos_id: int | None = None,
        add_bos: bool = False,
        stop_ids: Iterable[int] = (),
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"unknown pre-tokenizer split {split!r}; expected one of {sorted(SPLITS)}")
        self.vocab = dict(vocab)
        self.split_name, self._split = split, SPLITS[split]
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.special = dict(special or {})
        self.id_to_token = {token_id: token for token, token_id in self.vocab.items()}
        self.id_to_token.update({token_id: token for token, token_id in self.special.items()})
        self.special_ids = set(self.special.values())
        self.bos_id, self.eos_id, self.add_bos = bos_id, eos_id, add_bos
        self.stop_ids = set(stop_ids) | ({eos_id} if eos_id is not None else set())
        self._pieces: dict[str, list[int]] = {}  # this tokenizer's memo of encoded pre-tokenizer pieces
        # longest first, so "<|eot_id|>" is not cut by a shorter special token that is its prefix
        self._special_order = sorted(self.special, key=len, reverse=True)

    @property
    def vocab_size(self) -> int:
        """One more than the largest token id."""
        return max(self.id_to_token, default=-1) + 1

    def __repr__(self) -> str:
        return f"<Tokenizer {self.split_name} BPE, {len(self.id_to_token)} tokens, {len(self.ranks)} merges>"

    # -- loading -----------------------------------------------------------------------------------------------------
    @classmethod
    def from_tokenizer_json(cls, path: str | Path, config: Mapping[str, Any] | None = None) -> Tokenizer:
        """Reads a Hugging Face tokenizer.json (byte-level BPE); `config` is tokenizer_config.json when present."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"tokenizer file {str(path)!r} does not exist") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: not a valid tokenizer.json ({error})") from None
        model = data.get("model") or {}
        if model.get("type") != "BPE":
            raise ValueError(f"{path}: kiln reads byte-level BPE tokenizers, this one is {model.get('type')!r}")
        merges = [_pair(m) for m in model.get("merges", [])]
        special = {t["content"]: int(t["id"]) for t in data.get("added_tokens", [])}
        split = _split_of(data.get("pre_tokenizer"), path)
        config = dict(config or {})
        bos, eos = _token_id(config.get("bos_token"), special), _token_id(config.get("eos_token"), special)
        add_bos = bool(config.get("add_bos_token", False)) or _post_processor_adds(data.get("post_processor"), bos)
        return cls(model["vocab"], merges, split, special, bos, eos, add_bos, _end_of_turn_ids(special))

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any]) -> Tokenizer:
        """Reads the tokenizer.ggml.* keys of a GGUF file (model "gpt2": byte-level BPE)."""
        kind = metadata.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"the GGUF tokenizer is {kind!r}; kiln reads byte-level BPE ('gpt2') tokenizers")
        tokens = list(metadata["tokenizer.ggml.tokens"])
        types = list(metadata.get("tokenizer.ggml.token_type", [1] * len(tokens)))
        merges = [_pair(str(m)) for m in metadata.get("tokenizer.ggml.merges", [])]
        vocab: dict[str, int] = {}
        special: dict[str, int] = {}
        for token_id, (token, token_type) in enumerate(zip(tokens, types)):
            (special if int(token_type) in (_GGUF_CONTROL, _GGUF_USER_DEFINED) else vocab)[str(token)] = token_id
        pre = str(metadata.get("tokenizer.ggml.pre", "default"))
        if pre not in _GGUF_PRE:
            raise ValueError(f"unsupported GGUF pre-tokenizer {pre!r}; kiln knows {sorted(_GGUF_PRE)}")
        bos, eos = metadata.get("tokenizer.ggml.bos_token_id"), metadata.get("tokenizer.ggml.eos_token_id")
        eot = metadata.get("tokenizer.ggml.eot_token_id")
        stops = _end_of_turn_ids(special) | ({int(eot)} if eot is not None else set())
        add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", pre in ("llama3", "llama-bpe")))
        return cls(
            vocab,
            merges,
            _GGUF_PRE[pre],
            special,
            None if bos is None else int(bos),
            None if eos is None else int(eos),
            add_bos,
            stops,
        )

    # -- encoding ----------------------------------------------------------------------------------------------------
    def encode(self, text: str, *, add_bos: bool | None = None, allow_special: bool = True) -> list[int]:
        """The token ids of `text`; special tokens written in the text are recognized when `allow_special`."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        ids: list[int] = []
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids.append(self.bos_id)
        for chunk, special_id in self._cut_special(text, allow_special):
            if special_id is not None:
                ids.append(special_id)
                continue
            for piece in self._split(chunk):
                ids.extend(self._encode_piece(piece))
        return ids

    def _cut_special(self, text: str, allow: bool) -> list[tuple[str, int | None]]:
        if not allow or not self.special:
            return [(text, None)]
        parts: list[tuple[str, int | None]] = []
        start = position = 0
        while position < len(text):
            match = next((s for s in self._special_order if text.startswith(s, position)), None)
            if match is None:
                position += 1
                continue
            if position > start:
                parts.append((text[start:position], None))
            parts.append((match, self.special[match]))
            position = start = position + len(match)
        if start < len(text):
            parts.append((text[start:], None))
        return parts

    def _encode_piece(self, piece: str) -> list[int]:
        cached = self._pieces.get(piece)
        if cached is not None:
            return cached
        symbols = [_BYTE_TO_CHAR[byte] for byte in piece.encode("utf-8")]
        ranks = self.ranks
        while len(symbols) > 1:
            best, best_rank = -1, len(ranks)
            for i in range(len(symbols) - 1):
                rank = ranks.get((symbols[i], symbols[i + 1]))
                if rank is not None and rank < best_rank:
                    best, best_rank = i, rank
            if best < 0:
                break
            pair = (symbols[best], symbols[best + 1])
            merged: list[str] = []
            i = 0
            while i < len(symbols):  # every occurrence of the best pair, left to right
                if i < len(symbols) - 1 and (symbols[i], symbols[i + 1]) == pair:
                    merged.append(pair[0] + pair[1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        try:
            ids = [self.vocab[symbol] for symbol in symbols]
        except KeyError as error:
            raise ValueError(f"the vocabulary has no token {error.args[0]!r} (piece {piece!r})") from None
        if len(self._pieces) < 65536:
            self._pieces[piece] = ids
        return ids

    # -- decoding ----------------------------------------------------------------------------------------------------
    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token `token_id` stands for (a special token: its text)."""
        token = self.id_to_token.get(token_id)
        if token is None:
            raise ValueError(f"token id {token_id} is outside the vocabulary (size {self.vocab_size})")
        if token_id in self.special_ids:
            return token.encode("utf-8")
        try:
            return bytes(_CHAR_TO_BYTE[char] for char in token)
        except KeyError:  # a vocabulary entry outside the byte alphabet (added plain-text token)
            return token.encode("utf-8")

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """The text of `ids` (invalid UTF-8, e.g. a cut character, becomes U+FFFD)."""
        data = b"".join(self.token_bytes(i) for i in ids if not (skip_special and i in self.special_ids))
        return data.decode("utf-8", errors="replace")

    def stream(self, skip_special: bool = False) -> StreamDecoder:
        """A decoder that turns tokens into text as they arrive."""
        return StreamDecoder(self, skip_special)


class StreamDecoder:
    """Incremental decoding: `push(token)` returns the text that became complete (never half a UTF-8 character)."""

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self.tokenizer, self.skip_special = tokenizer, skip_special
        self._pending = b""

    def push(self, token_id: int) -> str:
        """The newly complete text after token `token_id`."""
        if self.skip_special and token_id in self.tokenizer.special_ids:
            return ""
        self._pending += self.tokenizer.token_bytes(token_id)
        cut = _complete_prefix(self._pending)
        text, self._pending = self._pending[:cut].decode("utf-8", errors="replace"), self._pending[cut:]
        return text

    def flush(self) -> str:
        """Whatever is left (an incomplete character becomes U+FFFD)."""
        text, self._pending = self._pending.decode("utf-8", errors="replace"), b""
        return text


def _complete_prefix(data: bytes) -> int:
    """The length of `data` without a trailing, possibly incomplete UTF-8 sequence (at most 3 bytes held back)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:  # ASCII: everything up to here is complete
            return len(data)
        if byte >= 0xC0:  # a lead byte: complete when its sequence length fits
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= needed else len(data) - back
    return len(data)  # continuation bytes without a lead: invalid anyway, let the decoder replace them


def _pair(merge: object) -> tuple[str, str]:
    """A merge as (left, right): tokenizer.json writes "a b" or ["a", "b"], GGUF "a b"."""
    parts = merge.split(" ", 1) if isinstance(merge, str) else list(merge) if isinstance(merge, list) else []
    if len(parts) != 2:
        raise ValueError(f"a BPE merge must be two symbols, got {merge!r}")
    return str(parts[0]), str(parts[1])


def _split_of(pre_tokenizer: Mapping[str, Any] | None, path: Path) -> str:
    if not pre_tokenizer:
        raise ValueError(f"{path}: no pre_tokenizer; kiln reads byte-level BPE tokenizers")
    parts = pre_tokenizer.get("pretokenizers", [pre_tokenizer])
    for part in parts:
        if part.get("type") == "Split":
            return split_for_pattern(part["pattern"].get("Regex", part["pattern"].get("String", "")))
    if any(part.get("type") == "ByteLevel" and part.get("use_regex", True) for part in parts):
        return "gpt2"
    raise ValueError(f"{path}: unsupported pre_tokenizer {pre_tokenizer!r}")


def _token_id(token: Any, special: Mapping[str, int]) -> int | None:
    if isinstance(token, dict):
        token = token.get("content")
    return special.get(token) if isinstance(token, str) else None


def _post_processor_adds(post: Mapping[str, Any] | None, bos: int | None) -> bool:
    """Whether a TemplateProcessing post-processor puts a special token first (Llama 3's <|begin_of_text|>)."""
    if not post:
        return False
    processors = post.get("processors", [post])
    for processor in processors:
        single = processor.get("single") or []
        if processor.get("type") == "TemplateProcessing" and single and "SpecialToken" in single[0]:
            return True
    return False


def _end_of_turn_ids(special: Mapping[str, int]) -> set[int]:
    """Special tokens that end a turn in the common chat formats (Llama 3's, ChatML's)."""
    names = ("<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>", "<|eom_id|>")
    return {special[name] for name in names if name in special}
