"""kiln's byte-level BPE tokenizer against the Hugging Face `tokenizers` library (the test-only reference)."""

from __future__ import annotations

import random

import pytest

from kiln.tensor.llm.pretokenize import split_for_pattern, split_gpt2, split_llama3, split_qwen2
from kiln.tensor.llm.tokenizer import Tokenizer, byte_alphabet

from .conftest import GPT2_SPLIT, LLAMA3_SPLIT, QWEN2_SPLIT, SPECIAL, train_tokenizer

tokenizers = pytest.importorskip("tokenizers")

SAMPLES = [
    "Hello world!",
    "It's  I'M  you'Re we'VE they'll 'd '",
    "12345678 a1b22c333 ٣٤٥ ½",
    "Héllo 日本語 🙂🙂 e\u0301",
    "  leading and trailing  ",
    "a\r\n\r\nb\n\n\n  \n x",
    "\t\tx  \n y\u00a0z\u2003w",
    "!!! ??? ... --- ,.;:'\"",
    "<|eot_id|>hi<|begin_of_text|> <|start_header_id|>",
    "",
    " ",
    "\n",
]
ALPHABET = "aZé日🙂 \t\n\r0٣½!?'-_.,;\u00a0\u2003sStTmMdDlLvVrR<|>"


def random_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 24))) for _ in range(count)]


@pytest.mark.parametrize(
    ("pattern", "split"), [(LLAMA3_SPLIT, split_llama3), (QWEN2_SPLIT, split_qwen2), (GPT2_SPLIT, split_gpt2)]
)
def test_pre_tokenizer_pieces_match_the_regex(pattern: str, split) -> None:  # type: ignore[no-untyped-def]
    reference = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="isolated")
    for text in SAMPLES + random_texts(seed=0, count=1500):
        expected = [piece for piece, _ in reference.pre_tokenize_str(text)]
        assert split(text) == expected, text


def test_split_is_recognized_from_the_pattern() -> None:
    assert [split_for_pattern(p) for p in (LLAMA3_SPLIT, QWEN2_SPLIT, GPT2_SPLIT)] == ["llama3", "qwen2", "gpt2"]
    with pytest.raises(ValueError, match="unsupported pre-tokenizer pattern"):
        split_for_pattern(r"\w+")


def test_byte_alphabet_is_a_printable_bijection() -> None:
    alphabet = byte_alphabet()
    assert sorted(alphabet) == list(range(256)) and len(set(alphabet.values())) == 256
    assert all(not c.isspace() and c.isprintable() for c in alphabet.values())
    assert alphabet[ord("A")] == "A" and alphabet[ord(" ")] == "Ġ" and alphabet[ord("\n")] == "Ċ"


@pytest.mark.parametrize("pattern", [LLAMA3_SPLIT, QWEN2_SPLIT], ids=["llama3", "qwen2"])
def test_encode_and_decode_equal_the_reference(tmp_path, pattern: str) -> None:  # type: ignore[no-untyped-def]
    reference = train_tokenizer(pattern)
    reference.save(str(tmp_path / "tokenizer.json"))
    ours = Tokenizer.from_tokenizer_json(tmp_path / "tokenizer.json")
    for text in SAMPLES + random_texts(seed=1, count=1500):
        ids = ours.encode(text, add_bos=False)
        assert ids == reference.encode(text).ids, text
        assert ours.decode(ids) == text == reference.decode(ids, skip_special_tokens=False)


def test_gguf_vocabulary_gives_the_same_ids(tmp_path) -> None:  # type: ignore[no-untyped-def]
    reference = train_tokenizer(LLAMA3_SPLIT)
    reference.save(str(tmp_path / "tokenizer.json"))
    from_json = Tokenizer.from_tokenizer_json(tmp_path / "tokenizer.json")
    vocab = reference.get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    merges = [" ".join(pair) for pair in sorted(from_json.ranks, key=from_json.ranks.__getitem__)]
    metadata = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3 if t in SPECIAL else 1 for t in tokens],
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": vocab["<|begin_of_text|>"],
        "tokenizer.ggml.eos_token_id": vocab["<|end_of_text|>"],
    }
    from_gguf = Tokenizer.from_gguf_metadata(metadata)
    assert from_gguf.add_bos and from_gguf.stop_ids >= {vocab["<|eot_id|>"], vocab["<|end_of_text|>"]}
    for text in SAMPLES + random_texts(seed=2, count=100):
        assert from_gguf.encode(text, add_bos=False) == reference.encode(text).ids
    assert from_gguf.encode("hi")[0] == vocab["<|begin_of_text|>"]
    with pytest.raises(ValueError, match="unsupported GGUF pre-tokenizer"):
        Tokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.pre": "mystery"})
    with pytest.raises(ValueError, match="byte-level BPE"):
        Tokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.model": "llama"})


def test_special_tokens_only_when_allowed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    reference = train_tokenizer(LLAMA3_SPLIT)
    reference.save(str(tmp_path / "tokenizer.json"))
    ours = Tokenizer.from_tokenizer_json(tmp_path / "tokenizer.json")
    eot = reference.get_vocab()["<|eot_id|>"]
    assert ours.encode("a<|eot_id|>", add_bos=False)[-1] == eot
    literal = ours.encode("a<|eot_id|>", add_bos=False, allow_special=False)
    assert eot not in literal and ours.decode(literal) == "a<|eot_id|>"


def test_streaming_decode_never_cuts_a_character(tmp_path) -> None:  # type: ignore[no-untyped-def]
    reference = train_tokenizer(LLAMA3_SPLIT, vocab_size=300)
    reference.save(str(tmp_path / "tokenizer.json"))
    ours = Tokenizer.from_tokenizer_json(tmp_path / "tokenizer.json")
    text = "日本語 🙂 naïve ✓ \U0001f680\U0001f30d 한국어"
    ids = ours.encode(text, add_bos=False)
    assert any(len(ours.token_bytes(i).decode("utf-8", errors="ignore")) == 0 for i in ids)  # split characters
    stream = ours.stream()
    deltas = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(deltas) == text and all("\ufffd" not in d for d in deltas)


def test_bad_input_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FileNotFoundError, match=r"missing\.json"):
        Tokenizer.from_tokenizer_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json"):
        Tokenizer.from_tokenizer_json(tmp_path / "bad.json")
    tok = Tokenizer({"a": 0}, [], "llama3")
    with pytest.raises(TypeError, match="str"):
        tok.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([5])
