"""`Tokenizer`: a model's tokenizer run by Hugging Face's `tokenizers` library (Rust).

A Hugging Face folder's tokenizer.json is loaded as it is. A GGUF file carries its vocabulary as `tokenizer.ggml.*`
keys; `from_gguf_metadata` builds the equivalent `tokenizers.Tokenizer` for each family llama.cpp writes, with the
normalizer, pre-tokenizer and decoder that family's Hugging Face conversion uses:
- "gpt2": byte-level BPE (Llama 3, Qwen2, GPT-2): the vocabulary and merges, the pre-tokenizer regex named by
  `tokenizer.ggml.pre`, bytes shown as the printable byte-level alphabet.
- "llama": SentencePiece BPE (Llama 2, Mistral, Gemma): merges rebuilt from the pieces' scores (a pair merges when
  the joined piece is in the vocabulary, higher score first), "▁" for spaces, a dummy prefix, `<0xAB>` byte fallback.
- "t5": SentencePiece Unigram (T5 family): the pieces and their log-probabilities, the precompiled normalizer map.
- "bert": WordPiece, from llama.cpp's spelling ("▁" marks a word start, where BERT writes "##" on the others).
Control tokens become special added tokens (matched whole in text, skippable when decoding), user-defined tokens
plain added tokens; BOS/EOS are added by a post-processor following `tokenizer.ggml.add_bos_token` /
`add_eos_token`.
"""

from __future__ import annotations

import json
import numbers
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

__all__ = ["StreamDecoder", "Tokenizer"]

# The pre-tokenizer regexes of the byte-level BPE families (as written in their tokenizer.json files)
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
TEKKEN_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
    r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class _PreTokenizer:
    """A GGUF `tokenizer.ggml.pre`: the regex splits applied in turn, and whether whole words are looked up first."""

    splits: tuple[str, ...]
    ignore_merges: bool = False
    add_bos: bool = False  # llama.cpp's default when the file has no tokenizer.ggml.add_bos_token


_LLAMA3 = _PreTokenizer((LLAMA3_SPLIT,), ignore_merges=True, add_bos=True)
_GPT2 = _PreTokenizer((GPT2_SPLIT,))
_DIGITS_THEN_GPT2 = _PreTokenizer((r"\p{N}", GPT2_SPLIT))
# llama.cpp's names for the pre-tokenizers (llama-vocab.cpp) -> what they split
_GGUF_PRE = {
    **dict.fromkeys(("llama3", "llama-bpe", "llama-v3"), _LLAMA3),
    **dict.fromkeys(("dbrx", "smaug-bpe", "chatglm-bpe", "glm4"), _PreTokenizer((LLAMA3_SPLIT,))),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "stablelm2"), _PreTokenizer((QWEN2_SPLIT,))),
    "qwen35": _PreTokenizer((QWEN35_SPLIT,)),
    **dict.fromkeys(("gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais"), _GPT2),
    **dict.fromkeys(
        ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva"), _DIGITS_THEN_GPT2
    ),
    "tekken": _PreTokenizer((TEKKEN_SPLIT,), ignore_merges=True, add_bos=True),
    "default": _PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", GPT2_SPLIT, r"\p{N}+", r"[0-9][0-9][0-9]")),
}
# tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
# Special tokens that end a turn in the common chat formats (Llama 3, ChatML, Gemma, Phi-3, Mistral)
_END_OF_TURN = (
    *("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>"),
    *("<end_of_turn>", "<|end|>"),
)


class Tokenizer:
    """A model's tokenizer: text to token ids and back, through a `tokenizers.Tokenizer`.

    Args:
        backend: the `tokenizers.Tokenizer` doing the work (its post-processor adds the model's BOS/EOS).
        bos_id, eos_id: the begin/end of sequence ids, when the model has them.
        stop_ids: ids that end a generation (eos, end-of-turn tokens); `eos_id` is added.

    Example:
        >>> tokenizer = Tokenizer.from_tokenizer_json("model/tokenizer.json")  # doctest: +SKIP
        >>> tokenizer.decode(tokenizer.encode("Hello", add_special=False))  # doctest: +SKIP
        'Hello'
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        bos_id: int | None = None,
        eos_id: int | None = None,
        stop_ids: Iterable[int] = (),
    ) -> None:
        if not isinstance(backend, tokenizers.Tokenizer):
            raise TypeError(f"Tokenizer wraps a tokenizers.Tokenizer, got {type(backend).__name__}")
        self.backend = backend
        self._encoding = threading.Lock()  # `encode_special_tokens` is the backend's state, set per call
        added = backend.get_added_tokens_decoder()
        self.special = {token.content: token_id for token_id, token in added.items() if token.special}
        self.special_ids = set(self.special.values())
        self._vocab_size = max(backend.get_vocab(with_added_tokens=True).values(), default=-1) + 1
        self.bos_id, self.eos_id = bos_id, eos_id
        self.stop_ids = set(stop_ids) | ({eos_id} if eos_id is not None else set())

    @property
    def vocab_size(self) -> int:
        """One more than the largest token id."""
        return self._vocab_size

    @property
    def add_bos(self) -> bool:
        """Whether `encode` puts `bos_id` first (the post-processor's doing: GGUF add_bos_token, Llama's template)."""
        return self.bos_id is not None and self.encode("")[:1] == [self.bos_id]

    def token(self, token_id: int) -> str:
        """The vocabulary entry of `token_id` (as the model spells it: byte-level characters, "▁", "##" ...)."""
        token = self.backend.id_to_token(token_id) if 0 <= token_id < self._vocab_size else None
        if token is None:
            raise ValueError(f"token id {token_id} is outside the vocabulary (size {self.vocab_size})")
        return token

    def __repr__(self) -> str:
        model = type(self.backend.model).__name__
        return f"<Tokenizer {model}, {self.vocab_size} tokens, {len(self.special)} special>"

    # -- loading -----------------------------------------------------------------------------------------------------
    @classmethod
    def from_tokenizer_json(cls, path: str | Path, config: Mapping[str, Any] | None = None) -> Tokenizer:
        """Reads a Hugging Face tokenizer.json; `config` is tokenizer_config.json when present.

        The config names the BOS/EOS tokens; its `add_bos_token` / `add_eos_token`, when given, set the
        post-processor as transformers' Llama and Gemma tokenizers do (unless the file's own post-processor is not
        a template, e.g. BERT's).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file {str(path)!r} does not exist")
        try:
            backend = tokenizers.Tokenizer.from_file(str(path))
        except Exception as error:  # the library raises plain Exception for a malformed file
            raise ValueError(f"{path}: not a valid tokenizer.json ({error})") from None
        config = dict(config or {})
        bos = _token_id(backend, config.get("bos_token"))
        eos = _token_id(backend, config.get("eos_token"))
        if "add_bos_token" in config or "add_eos_token" in config:
            post = backend.post_processor
            if post is None or type(post).__name__ == "TemplateProcessing":
                add_bos, add_eos = bool(config.get("add_bos_token", False)), bool(config.get("add_eos_token", False))
                backend.post_processor = _bos_eos_processor(backend, bos, eos, add_bos, add_eos)
        return cls(backend, bos, eos, _end_of_turn_ids(backend))

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any]) -> Tokenizer:
        """Builds the tokenizer of a GGUF file's `tokenizer.ggml.*` keys (model gpt2, llama, t5 or bert)."""
        kind = metadata.get("tokenizer.ggml.model")
        builders = {"gpt2": _byte_level_bpe, "llama": _sentencepiece, "t5": _sentencepiece, "bert": _wordpiece}
        if kind not in builders:
            raise ValueError(f"the GGUF tokenizer is {kind!r}; kiln reads {sorted(builders)}")
        if "tokenizer.ggml.tokens" not in metadata:
            raise ValueError(f"the GGUF tokenizer ({kind!r}) has no tokenizer.ggml.tokens")
        tokens = [str(token) for token in metadata["tokenizer.ggml.tokens"]]
        types = [int(t) for t in metadata.get("tokenizer.ggml.token_type", [_NORMAL] * len(tokens))]
        if len(types) != len(tokens):
            raise ValueError(f"GGUF tokenizer: {len(tokens)} tokens but {len(types)} token types")
        backend = builders[str(kind)](metadata, tokens, types)
        if kind == "bert":  # llama.cpp writes "▁word" / "piece" for BERT's "word" / "##piece"
            tokens = [_bert_spelling(token, token_type) for token, token_type in zip(tokens, types)]
        # control (and unknown) tokens are special; user-defined ones are matched whole but are ordinary text
        backend.add_tokens(
            [
                tokenizers.AddedToken(tokens[i], special=t in (_CONTROL, _UNKNOWN), normalized=False)
                for i, t in enumerate(types)
                if t in (_CONTROL, _UNKNOWN, _USER_DEFINED)
            ]
        )
        bos, eos = _metadata_id(metadata, "bos"), _metadata_id(metadata, "eos")
        add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", _adds_bos_by_default(metadata)))
        add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token", kind == "t5"))
        if kind == "bert":  # BERT's sequence: [CLS] text [SEP]
            first, last = _metadata_id(metadata, "cls", "bos"), _metadata_id(metadata, "seperator", "eos")
            add_last = bool(metadata.get("tokenizer.ggml.add_sep_token", True))
            backend.post_processor = _bos_eos_processor(backend, first, last, add_bos, add_last)
        else:
            backend.post_processor = _bos_eos_processor(backend, bos, eos, add_bos, add_eos)
        stops = _end_of_turn_ids(backend)
        for key in ("eot", "eom"):
            found = _metadata_id(metadata, key)
            stops |= set() if found is None else {found}
        return cls(backend, bos, eos, stops)

    # -- encoding ----------------------------------------------------------------------------------------------------
    def encode(self, text: str, *, add_special: bool = True, allow_special: bool = True) -> list[int]:
        """The token ids of `text`.

        Args:
            add_special: let the post-processor add the model's own tokens (BOS, and EOS for some models); a chat
                template writes them itself, so its text is encoded without.
            allow_special: recognize special tokens written in the text (else they are tokenized as plain text).
        """
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        with self._encoding:
            self.backend.encode_special_tokens = not allow_special
            return list(self.backend.encode(text, add_special_tokens=add_special).ids)

    # -- decoding ----------------------------------------------------------------------------------------------------
    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """The text of `ids` (invalid UTF-8, e.g. a cut character, becomes U+FFFD)."""
        ids = [self._check_id(token_id) for token_id in ids]
        return str(self.backend.decode(ids, skip_special_tokens=skip_special))

    def _check_id(self, token_id: int) -> int:
        if isinstance(token_id, bool) or not isinstance(token_id, numbers.Integral):
            raise TypeError(f"a token id must be an integer, got {token_id!r}")
        if not 0 <= token_id < self._vocab_size:
            raise ValueError(f"token id {token_id} is outside the vocabulary (size {self.vocab_size})")
        return int(token_id)

    def stream(self, skip_special: bool = False) -> StreamDecoder:
        """A decoder that turns tokens into text as they arrive."""
        return StreamDecoder(self, skip_special)


class StreamDecoder:
    """Incremental decoding: `push(token)` returns the text that became complete (never half a UTF-8 character)."""

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self.tokenizer, self.skip_special = tokenizer, skip_special
        self._stream = decoders.DecodeStream(skip_special_tokens=skip_special)
        self._pending: list[int] = []  # tokens pushed since the last text came out

    def push(self, token_id: int) -> str:
        """The newly complete text after token `token_id`."""
        token_id = self.tokenizer._check_id(token_id)
        text = self._stream.step(self.tokenizer.backend, token_id)
        if text is None:
            self._pending.append(token_id)
            return ""
        self._pending = []
        return str(text)

    def flush(self) -> str:
        """Whatever is left (an incomplete character becomes U+FFFD)."""
        pending, self._pending = self._pending, []
        self._stream = decoders.DecodeStream(skip_special_tokens=self.skip_special)
        return self.tokenizer.decode(pending, skip_special=self.skip_special) if pending else ""


# -- building from GGUF ------------------------------------------------------------------------------------------------
def _byte_level_bpe(metadata: Mapping[str, Any], tokens: list[str], types: list[int]) -> tokenizers.Tokenizer:
    pre = str(metadata.get("tokenizer.ggml.pre", "default"))
    if pre not in _GGUF_PRE:
        raise ValueError(f"unsupported GGUF pre-tokenizer {pre!r}; kiln knows {sorted(_GGUF_PRE)}")
    chosen = _GGUF_PRE[pre]
    merges = [_pair(m) for m in metadata.get("tokenizer.ggml.merges", [])]
    vocab = {token: token_id for token_id, token in enumerate(tokens)}
    backend = tokenizers.Tokenizer(models.BPE(vocab, merges, ignore_merges=chosen.ignore_merges))
    splits = [pre_tokenizers.Split(tokenizers.Regex(split), behavior="isolated") for split in chosen.splits]
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    backend.decoder = decoders.ByteLevel()
    return backend


def _sentencepiece(metadata: Mapping[str, Any], tokens: list[str], types: list[int]) -> tokenizers.Tokenizer:
    """SentencePiece's pipeline as transformers converts it: BPE ("llama") or Unigram ("t5") over "▁" pieces."""
    scores = [float(s) for s in metadata.get("tokenizer.ggml.scores", [0.0] * len(tokens))]
    if len(scores) != len(tokens):
        raise ValueError(f"GGUF tokenizer: {len(tokens)} tokens but {len(scores)} scores")
    unknown = _metadata_id(metadata, "unknown")
    if unknown is None:
        unknown = next((i for i, t in enumerate(types) if t == _UNKNOWN), None)
    byte_fallback = _BYTE in types
    if metadata.get("tokenizer.ggml.model") == "t5":
        model: models.Model = models.Unigram(list(zip(tokens, scores)), unknown, byte_fallback)
    else:
        vocab = {token: token_id for token_id, token in enumerate(tokens)}
        mergeable = {tokens[i]: scores[i] for i, t in enumerate(types) if t == _NORMAL}
        unk_token = None if unknown is None else tokens[unknown]
        model = models.BPE(vocab, _merges_from_scores(vocab, mergeable), unk_token=unk_token, fuse_unk=True,
                           byte_fallback=byte_fallback)  # fmt: skip
    backend = tokenizers.Tokenizer(model)
    dummy_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    steps: list[normalizers.Normalizer] = []
    charsmap = metadata.get("tokenizer.ggml.precompiled_charsmap")
    if charsmap is not None and len(charsmap):
        steps.append(normalizers.Precompiled(bytes(int(b) & 0xFF for b in charsmap)))
    if metadata.get("tokenizer.ggml.remove_extra_whitespaces", False):
        steps += [normalizers.Replace(tokenizers.Regex(r"\A +| +\z"), ""),
                  normalizers.Replace(tokenizers.Regex(" {2,}"), " ")]  # fmt: skip
    if dummy_prefix:  # before each run of text, after a special token too, as llama.cpp (and legacy Llama 2) do
        steps.append(normalizers.Prepend("▁"))
    steps.append(normalizers.Replace(" ", "▁"))
    backend.normalizer = normalizers.Sequence(steps)
    steps_back: list[decoders.Decoder] = [decoders.Replace("▁", " ")]
    if byte_fallback:
        steps_back.append(decoders.ByteFallback())
    if dummy_prefix:  # fuse first, so only the start of the whole text loses its space
        steps_back += [decoders.Fuse(), decoders.Strip(content=" ", left=1, right=0)]
    backend.decoder = decoders.Sequence(steps_back)
    return backend


def _merges_from_scores(vocab: Mapping[str, int], scores: Mapping[str, float]) -> list[tuple[str, str]]:
    """BPE merges of a SentencePiece vocabulary: every split of a piece into two pieces, higher score first.

    SentencePiece's BPE joins the neighbouring pair whose joined piece scores highest; as ranked merges that is
    one merge per split of each mergeable piece, ordered by the piece's score, ties by longer left then longer right
    part, then in vocabulary order and by the parts' ids (the order transformers' conversion uses).
    """
    found: list[tuple[str, str, float]] = []
    for piece, score in scores.items():
        splits = [(piece[:cut], piece[cut:]) for cut in range(1, len(piece))]
        local = [(left, right) for left, right in splits if left in vocab and right in vocab]
        local.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        found += [(left, right, score) for left, right in local]
    found.sort(key=lambda merge: (-merge[2], -len(merge[0]), -len(merge[1])))  # stable: ties keep their order
    return [(left, right) for left, right, _ in found]


def _wordpiece(metadata: Mapping[str, Any], tokens: list[str], types: list[int]) -> tokenizers.Tokenizer:
    spelled = [_bert_spelling(token, token_type) for token, token_type in zip(tokens, types)]
    vocab = {token: token_id for token_id, token in enumerate(spelled)}
    unknown = _metadata_id(metadata, "unknown")
    unk_token = spelled[unknown] if unknown is not None else "[UNK]"
    backend = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token=unk_token, max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    return backend


def _bert_spelling(token: str, token_type: int) -> str:
    """A BERT vocabulary entry from llama.cpp's spelling: "▁word" -> "word", "piece" -> "##piece"."""
    if token_type in (_CONTROL, _UNKNOWN, _USER_DEFINED, _UNUSED) or (token.startswith("[") and token.endswith("]")):
        return token
    return token[1:] if token.startswith("▁") else "##" + token


def _adds_bos_by_default(metadata: Mapping[str, Any]) -> bool:
    """llama.cpp's default when add_bos_token is absent: SentencePiece BPE and BERT ([CLS]) add one, byte-level BPE
    as its pre-tokenizer says (Llama 3's does)."""
    kind, pre = metadata.get("tokenizer.ggml.model"), str(metadata.get("tokenizer.ggml.pre", "default"))
    return kind in ("llama", "bert") or (kind == "gpt2" and pre in _GGUF_PRE and _GGUF_PRE[pre].add_bos)


def _bos_eos_processor(
    backend: tokenizers.Tokenizer, bos: int | None, eos: int | None, add_bos: bool, add_eos: bool
) -> processors.PostProcessor:
    """A TemplateProcessing that writes BOS before and/or EOS after each sequence."""
    first = [str(backend.id_to_token(bos))] if add_bos and bos is not None else []
    last = [str(backend.id_to_token(eos))] if add_eos and eos is not None else []
    special = [(name, backend.token_to_id(name)) for name in dict.fromkeys(first + last)]
    single = [*first, "$A", *last]
    pair = [*first, "$A", *last, *first, "$B:1", *last]
    return processors.TemplateProcessing(single=" ".join(single), pair=" ".join(pair), special_tokens=special)


def _metadata_id(metadata: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = metadata.get(f"tokenizer.ggml.{name}_token_id")
        if value is not None:
            return int(value)
    return None


def _pair(merge: object) -> tuple[str, str]:
    """A merge as (left, right): GGUF writes "a b"."""
    parts = merge.split(" ", 1) if isinstance(merge, str) else list(merge) if isinstance(merge, Sequence) else []
    if len(parts) != 2:
        raise ValueError(f"a BPE merge must be two symbols, got {merge!r}")
    return str(parts[0]), str(parts[1])


def _token_id(backend: tokenizers.Tokenizer, token: Any) -> int | None:
    """The id of a tokenizer_config.json token entry (a string, or an object with "content")."""
    if isinstance(token, dict):
        token = token.get("content")
    found = backend.token_to_id(token) if isinstance(token, str) else None
    return None if found is None else int(found)


def _end_of_turn_ids(backend: tokenizers.Tokenizer) -> set[int]:
    """The special tokens among the common formats' end-of-turn markers."""
    added = backend.get_added_tokens_decoder()
    return {token_id for token_id, token in added.items() if token.content in _END_OF_TURN}


def read_tokenizer_config(folder: Path) -> dict[str, Any]:
    """A folder's tokenizer_config.json as a dict ({} when there is none)."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(config).__name__}")
    return config
