"""kiln's tokenizers (the `tokenizers` library behind `Tokenizer`) against reference tokenizers trained here: byte-level
BPE from tokenizer.json and from a GGUF vocabulary, SentencePiece BPE (also against a brute-force SentencePiece
encoder written here) and Unigram from GGUF pieces and scores, WordPiece from llama.cpp's BERT spelling."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from kiln.tensor.llm.tokenizer import _GGUF_PRE, LLAMA3_SPLIT, Tokenizer

from .conftest import GPT2_SPLIT, QWEN2_SPLIT, SPECIAL, train_tokenizer

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
SPM_CORPUS = [
    "the quick brown fox jumps over the lazy dog and the cat sat on the mat",
    "hello world, hello there; a theory of everything is what they wanted",
    "sentence pieces make words from pieces: there, then, those, these, theirs",
]
SPM_ALPHABET = "abcdehlnorstwy ,;!é日"


def random_texts(seed: int, count: int, alphabet: str = ALPHABET) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(count)]


def saved(reference: Any, tmp_path: Path) -> Path:
    reference.save(str(tmp_path / "tokenizer.json"))
    return tmp_path / "tokenizer.json"


# -- byte-level BPE ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", [LLAMA3_SPLIT, QWEN2_SPLIT, GPT2_SPLIT], ids=["llama3", "qwen2", "gpt2"])
def test_tokenizer_json_equals_the_reference(tmp_path: Path, pattern: str) -> None:
    reference = train_tokenizer(pattern)
    ours = Tokenizer.from_tokenizer_json(saved(reference, tmp_path))
    for text in SAMPLES + random_texts(seed=1, count=1500):
        ids = ours.encode(text, add_special=False)
        assert ids == reference.encode(text).ids, text
        assert ours.decode(ids) == text == reference.decode(ids, skip_special_tokens=False)


def gguf_of(reference: Any, pre: str) -> dict[str, Any]:
    """The tokenizer.ggml.* keys convert_hf_to_gguf.py writes for a byte-level BPE tokenizer."""
    data = json.loads(reference.to_str())
    vocab = reference.get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3 if t in SPECIAL else 1 for t in tokens],
        "tokenizer.ggml.merges": [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]],
        "tokenizer.ggml.bos_token_id": vocab["<|begin_of_text|>"],
        "tokenizer.ggml.eos_token_id": vocab["<|end_of_text|>"],
    }


@pytest.mark.parametrize(
    ("pattern", "pre", "ignore_merges"),
    [(LLAMA3_SPLIT, "llama-bpe", True), (QWEN2_SPLIT, "qwen2", False), (GPT2_SPLIT, "gpt-2", False)],
)
def test_gguf_byte_level_bpe_gives_the_same_ids(pattern: str, pre: str, ignore_merges: bool) -> None:
    trained = train_tokenizer(pattern)
    data = json.loads(trained.to_str())
    data["model"]["ignore_merges"] = ignore_merges  # Llama 3's tokenizer.json looks whole words up first
    reference = tokenizers.Tokenizer.from_str(json.dumps(data))
    metadata = gguf_of(reference, pre)
    ours = Tokenizer.from_gguf_metadata(metadata)
    for text in SAMPLES + random_texts(seed=2, count=1500):
        assert ours.encode(text, add_special=False) == reference.encode(text).ids, text
    vocab = reference.get_vocab()
    assert ours.stop_ids >= {vocab["<|eot_id|>"], vocab["<|end_of_text|>"]}
    assert ours.add_bos == (pre == "llama-bpe")
    assert ours.encode("hi") == [vocab["<|begin_of_text|>"]] * ours.add_bos + reference.encode("hi").ids
    no_bos = Tokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.add_bos_token": False})
    assert not no_bos.add_bos and no_bos.encode("hi") == reference.encode("hi").ids
    eos = Tokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.add_eos_token": True})
    assert eos.encode("hi")[-1] == vocab["<|end_of_text|>"]


def train_with_splits(splits: list[str]) -> Any:
    """A byte-level BPE trained like conftest's, with several regex splits applied in turn (llama.cpp's way)."""
    reference = train_tokenizer(splits[0])
    pieces = [tokenizers.pre_tokenizers.Split(tokenizers.Regex(split), behavior="isolated") for split in splits]
    reference.pre_tokenizer = tokenizers.pre_tokenizers.Sequence(
        [*pieces, tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    return reference


@pytest.mark.parametrize(
    ("splits", "pre"),
    [
        ([r"\p{N}", GPT2_SPLIT], "starcoder"),
        ([r"[\p{P}\$\+<=>\^~\|]+", GPT2_SPLIT, r"\p{N}+", r"[0-9][0-9][0-9]"], "default"),
    ],
)
def test_gguf_pre_tokenizers_of_several_splits(splits: list[str], pre: str) -> None:
    reference = train_with_splits(splits)
    ours = Tokenizer.from_gguf_metadata(gguf_of(reference, pre))
    for text in SAMPLES + random_texts(seed=6, count=1000):
        assert ours.encode(text, add_special=False) == reference.encode(text).ids, text


def test_every_known_pre_tokenizer_builds_and_splits_as_its_family() -> None:
    metadata = gguf_of(train_tokenizer(LLAMA3_SPLIT), "llama-bpe")

    def pieces(pre: str, text: str) -> list[str]:
        ours = Tokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.pre": pre})
        assert ours.decode(ours.encode(text, add_special=False)) == text
        return [piece for piece, _ in ours.backend.pre_tokenizer.pre_tokenize_str(text)]

    for pre in sorted(_GGUF_PRE):
        for text in [*SAMPLES, "Élan vital ÄÖÜ 123456 x/y\n"]:
            pieces(pre, text)
    # hand-worked splits: Mistral's tekken cuts at case changes, qwen35 keeps combining marks with their letter,
    # starcoder's family isolates every digit, llama3 groups up to three
    assert pieces("tekken", "HelloWorld FOO") == ["Hello", "World", "ĠFOO"]
    assert len(pieces("qwen35", "e\u0301x")) == 1 and len(pieces("qwen2", "e\u0301x")) == 2
    assert pieces("starcoder", "abc 123") == ["abc", "Ġ", "1", "2", "3"]
    assert pieces("llama-bpe", "abc 12345") == ["abc", "Ġ", "123", "45"]


def test_special_tokens_only_when_allowed(tmp_path: Path) -> None:
    reference = train_tokenizer(LLAMA3_SPLIT)
    ours = Tokenizer.from_tokenizer_json(saved(reference, tmp_path))
    eot = reference.get_vocab()["<|eot_id|>"]
    assert ours.encode("a<|eot_id|>", add_special=False)[-1] == eot
    literal = ours.encode("a<|eot_id|>", add_special=False, allow_special=False)
    assert eot not in literal and ours.decode(literal) == "a<|eot_id|>"
    assert ours.encode("a<|eot_id|>", add_special=False)[-1] == eot  # the literal copy left the tokenizer as it was
    assert ours.decode([eot, *literal], skip_special=True) == "a<|eot_id|>"


def test_tokenizer_config_sets_bos_and_eos(tmp_path: Path) -> None:
    path = saved(train_tokenizer(LLAMA3_SPLIT), tmp_path)
    config = {"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"}, "add_bos_token": True}
    ours = Tokenizer.from_tokenizer_json(path, config)
    bos, eot = ours.backend.token_to_id("<|begin_of_text|>"), ours.backend.token_to_id("<|eot_id|>")
    assert (ours.bos_id, ours.eos_id, ours.add_bos) == (bos, eot, True)
    assert ours.encode("hi")[0] == bos and ours.encode("hi", add_special=False)[0] != bos
    both = Tokenizer.from_tokenizer_json(path, {**config, "add_eos_token": True})
    assert both.encode("hi")[0] == bos and both.encode("hi")[-1] == eot
    assert not Tokenizer.from_tokenizer_json(path).add_bos  # the trained file has no post-processor


def test_streaming_decode_never_cuts_a_character(tmp_path: Path) -> None:
    ours = Tokenizer.from_tokenizer_json(saved(train_tokenizer(LLAMA3_SPLIT, vocab_size=300), tmp_path))
    text = "日本語 🙂 naïve ✓ \U0001f680\U0001f30d 한국어"
    ids = ours.encode(text, add_special=False)
    assert any("\ufffd" in ours.decode([i]) for i in ids)  # some tokens hold part of a character
    stream = ours.stream()
    deltas = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(deltas) == text and all("\ufffd" not in d for d in deltas)
    cut = ours.stream()
    partial = [cut.push(i) for i in ours.encode("🙂", add_special=False)[:-1]]
    assert "".join(partial) == "" and cut.flush().startswith("\ufffd")


def test_bad_input_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing\.json"):
        Tokenizer.from_tokenizer_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json"):
        Tokenizer.from_tokenizer_json(tmp_path / "bad.json")
    ours = Tokenizer.from_tokenizer_json(saved(train_tokenizer(LLAMA3_SPLIT), tmp_path))
    with pytest.raises(TypeError, match="str"):
        ours.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ours.decode([ours.vocab_size])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ours.stream().push(-1)
    with pytest.raises(TypeError, match=r"tokenizers\.Tokenizer"):
        Tokenizer("vocab")  # type: ignore[arg-type]
    metadata = gguf_of(train_tokenizer(LLAMA3_SPLIT), "llama-bpe")
    with pytest.raises(ValueError, match="unsupported GGUF pre-tokenizer 'mystery'"):
        Tokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.pre": "mystery"})
    with pytest.raises(ValueError, match="'rwkv'"):
        Tokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.model": "rwkv"})
    with pytest.raises(ValueError, match=r"no tokenizer\.ggml\.tokens"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "gpt2"})
    with pytest.raises(ValueError, match="token types"):
        Tokenizer.from_gguf_metadata({**metadata, "tokenizer.ggml.token_type": [1]})


# -- SentencePiece BPE and Unigram ------------------------------------------------------------------------------------
BYTES = [f"<0x{byte:02X}>" for byte in range(256)]
# Llama 2's tokenizer.json normalizer: a "▁" in front of each run of text, "▁" for every space
LLAMA2_NORMALIZER = tokenizers.normalizers.Sequence(
    [tokenizers.normalizers.Prepend("▁"), tokenizers.normalizers.Replace(" ", "▁")]
)


def sentencepiece_reference(kind: str) -> tuple[Any, list[str], list[float]]:
    """A SentencePiece-style tokenizer trained by the tokenizers library: pieces, scores, "▁" for spaces."""
    model = tokenizers.models.BPE(unk_token="<unk>") if kind == "bpe" else tokenizers.models.Unigram()
    tok = tokenizers.Tokenizer(model)
    tok.normalizer = tokenizers.normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(prepend_scheme="first", split=True)
    special = ["<unk>", "<s>", "</s>"]
    trainer = (
        tokenizers.trainers.BpeTrainer(vocab_size=260, special_tokens=special, show_progress=False)
        if kind == "bpe"
        else tokenizers.trainers.UnigramTrainer(
            vocab_size=200, special_tokens=special, unk_token="<unk>", show_progress=False
        )
    )
    tok.train_from_iterator(SPM_CORPUS * 10, trainer)
    data = json.loads(tok.to_str())
    if kind == "bpe":  # SentencePiece BPE scores: the earlier a piece was made, the higher; byte pieces appended
        tokens = [t for t, _ in sorted(data["model"]["vocab"].items(), key=lambda item: item[1])] + BYTES
        scores = [0.0 if t in special or t in BYTES else -float(i) for i, t in enumerate(tokens)]
    else:
        tokens, scores = [p for p, _ in data["model"]["vocab"]], [float(s) for _, s in data["model"]["vocab"]]
    return tok, tokens, scores


def spm_metadata(kind: str, tokens: list[str], scores: list[float], **extra: Any) -> dict[str, Any]:
    types = [2 if t == "<unk>" else 3 if t in ("<s>", "</s>") else 6 if t in BYTES else 1 for t in tokens]
    return {
        "tokenizer.ggml.model": "llama" if kind == "bpe" else "t5",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": tokens.index("<s>"),
        "tokenizer.ggml.eos_token_id": tokens.index("</s>"),
        "tokenizer.ggml.unknown_token_id": tokens.index("<unk>"),
        **extra,
    }


def brute_force_sentencepiece_bpe(text: str, tokens: list[str], scores: list[float], prefix: bool = True) -> list[int]:
    """SentencePiece's BPE encoding, written out: "▁" for spaces and one in front, then join the neighbouring pair
    whose joined piece (an ordinary piece) scores highest, leftmost first, until none is left; characters without a
    piece become their UTF-8 bytes' <0xAB> pieces."""
    ids = {t: i for i, t in enumerate(tokens)}
    normal = {t: s for t, s in zip(tokens, scores) if t not in BYTES and t not in ("<unk>", "<s>", "</s>")}
    symbols = list("▁" * prefix + text.replace(" ", "▁")) if text else []
    while True:
        best = max(
            (i for i in range(len(symbols) - 1) if symbols[i] + symbols[i + 1] in normal),
            key=lambda i: (normal[symbols[i] + symbols[i + 1]], -i),
            default=None,
        )
        if best is None:
            break
        symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
    out: list[int] = []
    for symbol in symbols:
        out += [ids[symbol]] if symbol in normal else [ids[f"<0x{b:02X}>"] for b in symbol.encode("utf-8")]
    return out


def test_gguf_sentencepiece_bpe_equals_sentencepiece_and_the_reference() -> None:
    trained, tokens, scores = sentencepiece_reference("bpe")
    ours = Tokenizer.from_gguf_metadata(spm_metadata("bpe", tokens, scores))
    data = json.loads(trained.to_str())
    # the reference: the trained merges over the same pieces, with byte fallback and SentencePiece's decoder
    reference = tokenizers.Tokenizer(
        tokenizers.models.BPE(
            {t: i for i, t in enumerate(tokens)}, [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in
            data["model"]["merges"]], unk_token="<unk>", fuse_unk=True, byte_fallback=True,
        )
    )  # fmt: skip
    reference.normalizer = LLAMA2_NORMALIZER
    reference.add_special_tokens(["<unk>", "<s>", "</s>"])
    texts = [t for t in SAMPLES if "<|" not in t] + random_texts(seed=3, count=1500, alphabet=SPM_ALPHABET)
    texts += ["the theory there", "hello 日本語 wörld 🙂"]
    for text in texts:
        ids = ours.encode(text, add_special=False)
        assert ids == brute_force_sentencepiece_bpe(text, tokens, scores), text
        assert ids == reference.encode(text).ids, text
        assert ours.decode(ids) == text
    byte_pieces = [tokens.index(b) for b in ("<0xE6>", "<0x97>", "<0xA5>")]  # byte fallback: 日 is not a piece
    assert ours.encode("日") == [tokens.index("<s>"), tokens.index("▁"), *byte_pieces]
    assert ours.add_bos and ours.encode("the")[0] == tokens.index("<s>")  # llama.cpp's default for "llama"
    assert ours.encode("<s>the</s>", add_special=False)[::2] == [tokens.index("<s>"), tokens.index("</s>")]
    no_prefix_metadata = spm_metadata("bpe", tokens, scores, **{"tokenizer.ggml.add_space_prefix": False})
    no_prefix = Tokenizer.from_gguf_metadata(no_prefix_metadata)
    for text in ["the cat", " the  cat ", "theory"]:
        ids = no_prefix.encode(text, add_special=False)
        assert ids == brute_force_sentencepiece_bpe(text, tokens, scores, prefix=False)
        assert no_prefix.decode(ids) == text
    stream = ours.stream(skip_special=True)
    ids = ours.encode("the 日本 cat")
    assert "".join([stream.push(i) for i in ids] + [stream.flush()]) == "the 日本 cat"


def test_gguf_unigram_equals_the_reference() -> None:
    trained, tokens, scores = sentencepiece_reference("unigram")
    trained.normalizer, trained.pre_tokenizer = LLAMA2_NORMALIZER, None
    ours = Tokenizer.from_gguf_metadata(spm_metadata("unigram", tokens, scores))
    texts = [t for t in SAMPLES if "<|" not in t] + random_texts(seed=4, count=1500, alphabet=SPM_ALPHABET)
    for text in texts:
        assert ours.encode(text, add_special=False) == trained.encode(text).ids, text
    eos = tokens.index("</s>")
    assert not ours.add_bos and ours.encode("the cat")[-1] == eos  # T5: EOS after, no BOS
    assert ours.decode(ours.encode("the cat"), skip_special=True) == "the cat"
    with_bytes = Tokenizer.from_gguf_metadata(spm_metadata("unigram", tokens + BYTES, scores + [0.0] * 256))
    ids = with_bytes.encode("a日", add_special=False)  # 日 has no piece: its UTF-8 bytes' pieces stand for it
    assert ids[-3:] == [len(tokens) + byte for byte in "日".encode()] and with_bytes.decode(ids) == "a日"


# -- WordPiece ---------------------------------------------------------------------------------------------------------
def test_gguf_wordpiece_from_llama_cpp_spelling() -> None:
    implementations = pytest.importorskip("tokenizers.implementations")
    reference = implementations.BertWordPieceTokenizer(lowercase=True)
    reference.train_from_iterator(SPM_CORPUS * 10, vocab_size=150, show_progress=False)
    vocab = reference.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]

    def llama_cpp(token: str) -> str:  # convert_hf_to_gguf.py's BERT spelling
        if token.startswith("[") and token.endswith("]"):
            return token
        return token[2:] if token.startswith("##") else "▁" + token

    specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    metadata = {
        "tokenizer.ggml.model": "bert",
        "tokenizer.ggml.tokens": [llama_cpp(t) for t in tokens],
        "tokenizer.ggml.token_type": [2 if t == "[UNK]" else 3 if t in specials else 1 for t in tokens],
        "tokenizer.ggml.cls_token_id": vocab["[CLS]"],
        "tokenizer.ggml.seperator_token_id": vocab["[SEP]"],
        "tokenizer.ggml.unknown_token_id": vocab["[UNK]"],
    }
    reference.post_processor = tokenizers.processors.BertProcessing(
        ("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"])
    )
    ours = Tokenizer.from_gguf_metadata(metadata)
    texts = SAMPLES + random_texts(seed=5, count=1000, alphabet=SPM_ALPHABET + "ABC.")
    for text in texts:
        assert ours.encode(text) == reference.encode(text).ids, text  # [CLS] ... [SEP] around each
    ids = ours.encode("The Theory, there; Ünknown!", add_special=False)
    # lowercased, accents stripped (BERT uncased), "!" unknown; the decoder joins "##" pieces and spaces words
    assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=False) == "the theory, there ; unknown [UNK]"
    assert ours.decode(ids, skip_special=True) == reference.decode(ids) == "the theory, there ; unknown"


# -- a GGUF file -------------------------------------------------------------------------------------------------------
def test_tokenizer_and_template_read_from_a_gguf_file(tmp_path: Path) -> None:
    """A vocabulary written by gguf-py (as convert_hf_to_gguf.py does), read back by kiln's GGUF reader."""
    gguf = pytest.importorskip("gguf")
    numpy = pytest.importorskip("numpy")
    from kiln.tensor.llm.session import find_chat_template
    from kiln.tensor.llm.weights import LoadedModel, gguf_load_raw

    _, tokens, scores = sentencepiece_reference("bpe")
    metadata = spm_metadata("bpe", tokens, scores)
    template = "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"
    writer = gguf.GGUFWriter(str(tmp_path / "model.gguf"), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(metadata["tokenizer.ggml.token_type"])
    writer.add_bos_token_id(metadata["tokenizer.ggml.bos_token_id"])
    writer.add_eos_token_id(metadata["tokenizer.ggml.eos_token_id"])
    writer.add_unk_token_id(metadata["tokenizer.ggml.unknown_token_id"])
    writer.add_add_bos_token(True)
    writer.add_chat_template(template)
    writer.add_tensor("x", numpy.zeros(4, dtype=numpy.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    read, _ = gguf_load_raw(str(tmp_path / "model.gguf"))
    from_file, from_dict = Tokenizer.from_gguf_metadata(read), Tokenizer.from_gguf_metadata(metadata)
    for text in random_texts(seed=7, count=200, alphabet=SPM_ALPHABET):
        expected = [tokens.index("<s>"), *brute_force_sentencepiece_bpe(text, tokens, scores)]
        assert from_file.encode(text) == from_dict.encode(text) == expected
    found = find_chat_template(LoadedModel(None, None, read, "m"))  # type: ignore[arg-type]
    assert found == (template, "GGUF tokenizer.chat_template")
