"""The fast token mask (the prefix index walk and the per-state cost cache of kiln.tensor.llm.json_grammar) against a
slow reference written here: every token's text fed to the automaton one character at a time from the state, taken
when the state after it can still be completed within the budget. Random vocabularies (rich in JSON's special
characters, with tokens longer than the index width so the one-by-one tail is used), random schemas and the random
states reached by drawing allowed tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kiln.tensor.llm import json_grammar
from kiln.tensor.llm.grammar_index import TokenIndex
from kiln.tensor.llm.json_grammar import (
    JSON_OBJECT,
    Node,
    TokenConstraint,
    Vocabulary,
    compile_schema,
    feed,
    remaining,
    text_anchor,
    token_texts,
    vocabulary_texts,
)
from kiln.tensor.llm.session import load_chat_model
from kiln.tensor.llm.tokenizer import Tokenizer

ALPHABET = [*'{}[]":, \\"tfrueanl0123456789-.eE+uabcdefxyzé中\n\t', "é", '"', '"']
PIECES = ['{"', '":', '",', '"}', "}}", "]}", ', "', ": ", "true", "null", "false", '"a"', '"key"', '"b":', "\\n"]
PIECES += ["\\u00"]


def random_vocabulary(rng: np.random.Generator, size: int) -> dict[int, str]:
    texts: dict[int, str] = {}
    for token_id in range(size):
        if rng.random() < 0.15:
            text = PIECES[int(rng.integers(len(PIECES)))] + "".join(rng.choice(ALPHABET, size=int(rng.integers(0, 3))))
        else:
            text = "".join(rng.choice(ALPHABET, size=int(rng.integers(1, 9))))
        texts[token_id] = text
    for token_id, char in enumerate('{}[]":,0123456789truefalsn ', start=size):  # every character one token
        texts[token_id] = char
    texts[len(texts)] = ""  # no text: never allowed
    texts[len(texts)] = "a\ufffd"  # part of a character: never allowed
    return texts


def random_schema(rng: np.random.Generator, depth: int) -> dict[str, Any]:
    kinds = ["string", "number", "integer", "boolean", "null", "enum", "union"]
    kinds += ["object", "array", "free"] * (depth > 0)
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "enum":
        pool = ["a", "bc", 1, 2.5, True, None, "é"]
        return {"enum": [pool[i] for i in rng.choice(len(pool), size=int(rng.integers(1, 4)), replace=False)]}
    if kind == "union":
        return {"type": ["string", "null"] if rng.random() < 0.5 else ["integer", "boolean"]}
    if kind == "array":
        return {"type": "array", "items": random_schema(rng, depth - 1)}
    if kind == "free":
        return {"type": "object"}
    if kind == "object":
        names = ["a", "b", "key", "é"][: int(rng.integers(1, 5))]
        required = [name for name in names if rng.random() < 0.5]
        properties = {name: random_schema(rng, depth - 1) for name in names}
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"type": kind}


def reference_mask(
    state: json_grammar.State, texts: dict[int, str], size: int, stops: list[int], tokens_left: int
) -> np.ndarray:
    """The mask by trying each token (json_grammar's rule: the budget, then any token the grammar allows)."""
    after: dict[int, int] = {}
    for token_id, text in texts.items():
        if not text or "\ufffd" in text:
            continue
        current: json_grammar.State | None = state
        for char in text:
            current = feed(current, char) if current is not None else None
        if current is not None:
            after[token_id] = remaining(current)
    complete = remaining(state) == 0
    for budget in (tokens_left - 1, 1 << 62):
        allowed = np.zeros(size, bool)
        allowed[[i for i, cost in after.items() if cost <= budget]] = True
        if complete:
            allowed[stops] = True
        if allowed.any():
            return allowed
    return allowed


def check_generation(node: Node | list[Node], vocabulary: Vocabulary, texts: dict[int, str], rng: np.random.Generator,
                     tokens: int) -> int:  # fmt: skip
    """Draws a generation among the allowed tokens, checking every mask against the reference; the masks checked."""
    constraint = TokenConstraint(node, vocabulary)
    for step in range(tokens):
        left = tokens - step
        expected = reference_mask(constraint.state, texts, vocabulary.size, vocabulary.stop_ids, left)
        if not expected.any():
            with pytest.raises(ValueError, match="no token"):
                constraint.mask(left)
            return step
        got = constraint.mask(left)
        assert got.dtype == np.bool_ and got.shape == (vocabulary.size,)
        wrong = np.flatnonzero(got != expected)
        assert not wrong.size, (constraint.text, [(int(i), texts.get(int(i)), bool(got[i])) for i in wrong[:5]])
        choices = np.flatnonzero(expected)
        token = int(choices[int(rng.integers(len(choices)))])
        if token in vocabulary.stop_ids:
            return step + 1
        constraint.advance(token)
        if constraint.closed:
            return step + 1
    return tokens


@pytest.mark.parametrize("width", [3, 32])
def test_fast_masks_equal_the_reference_on_random_schemas_and_vocabularies(width: int) -> None:
    rng = np.random.default_rng(width)
    checked = 0
    for case in range(6):
        texts = random_vocabulary(rng, 300)
        size = len(texts) + 3  # logits past the tokenizer's texts
        stop = len(texts) + 1
        vocabulary = Vocabulary(texts, size, [stop], width=width, cache_bytes=[0, 1 << 20][case % 2])
        nodes: list[Node | list[Node]] = [JSON_OBJECT, compile_schema(random_schema(rng, 3))]
        nodes.append([compile_schema(random_schema(rng, 2)), compile_schema(random_schema(rng, 2))])
        for node in nodes:
            for tokens in (4, 12, 40):  # tight budgets take the fallback path too
                checked += check_generation(node, vocabulary, texts, rng, tokens)
    assert checked > 300


def test_the_cache_serves_repeated_states_with_the_same_masks() -> None:
    rng = np.random.default_rng(3)
    texts = random_vocabulary(rng, 200)
    vocabulary = Vocabulary(texts, len(texts), [len(texts) - 2])
    for _ in range(3):  # the second and third generations meet cached states
        check_generation(JSON_OBJECT, vocabulary, texts, rng, 30)
    assert len(vocabulary._costs) > 1


def test_index_ranges_are_the_tokens_sharing_a_prefix() -> None:
    texts = {0: "ab", 1: "a", 2: "abc", 3: "b\x00", 4: "b", 5: 'a"b', 6: "a", 7: "", 8: "x\ufffd"}
    index = TokenIndex(texts, width=2)
    assert index.texts == ["a", "a", 'a"b', "ab", "abc", "b", "b\x00"]
    assert index.ids.tolist() == [1, 6, 5, 0, 2, 4, 3]
    assert index.last_special.tolist() == [-1, -1, 1, -1, -1, -1, 1]
    root = index.children(0, len(index), 0)
    assert (root.ended, root.chars, root.starts, root.stops) == (0, ["a", "b"], [0, 5], [5, 7])
    under_a = index.children(0, 5, 1)
    assert (under_a.ended, under_a.chars, under_a.starts, under_a.stops) == (2, ['"', "b"], [2, 3], [3, 5])
    tails = index.string_tails(0, 5, 1)  # the texts under "a" with a special character from position 1 on
    assert tails is not None and tails.index.texts == ['"b'] and tails.positions.tolist() == [2]
    assert tails.tails.tolist() == [0] and index.string_tails(3, 5, 2) is None
    under_b = index.children(5, 7, 1)  # "b" ends here; NUL is a character, not the padding
    assert (under_b.ended, under_b.chars) == (1, ["\x00"])
    with pytest.raises(ValueError, match="width"):
        TokenIndex(texts, width=0)


def test_a_tokenizers_vocabulary_holds_each_token_decoded_after_the_anchor(chat_model_dir: Path) -> None:
    """`Vocabulary.of` decodes the whole vocabulary in one batch; the reference decodes one token at a time."""
    model = load_chat_model(chat_model_dir)
    tokenizer = model.tokenizer
    vocabulary = Vocabulary.of(tokenizer, model.loaded.config.vocab_size)
    special = tokenizer.special_ids | tokenizer.stop_ids
    expected = token_texts(tokenizer.decode, tokenizer.vocab_size, special, text_anchor(tokenizer))
    assert vocabulary.texts == expected
    assert special and not special & set(vocabulary.texts)
    assert vocabulary.stop_ids == sorted(tokenizer.stop_ids)


def test_vocabulary_texts_equal_one_by_one_decoding_for_other_and_odd_vocabularies() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    # a SentencePiece-like vocabulary (decoded by the backend in one batch)
    pieces = {"<unk>": 0, "\u2581a": 1, "a": 2, "\u2581hello": 3, "lo": 4, "\u2581": 5, "\u2581\u00e9t\u00e9": 6}
    metaspace = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=pieces, merges=[], unk_token="<unk>"))
    metaspace.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    metaspace.decoder = tokenizers.decoders.Metaspace()
    # byte-level entries, with odd ones: a raw space, a raw CJK character (not GPT-2's spelling), half of a
    # two-byte character, an added token that is not special, a special one
    names = {"a": 0, "\u0120b": 1, "\u00c3\u00a9": 2, " x": 3, "\u4e2d": 4, "\u00c3": 5, "\u010a\u0109": 6}
    names["\u00a0y"] = 7  # a raw no-break space: UTF-8's two bytes, not the byte 0xA0
    byte_level = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=names, merges=[]))
    byte_level.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    byte_level.decoder = tokenizers.decoders.ByteLevel()
    byte_level.add_tokens(["<tool>"])
    byte_level.add_special_tokens(["<|end|>"])
    for tokenizer in (Tokenizer(metaspace), Tokenizer(byte_level, eos_id=9)):
        special = tokenizer.special_ids | tokenizer.stop_ids
        expected = token_texts(tokenizer.decode, tokenizer.vocab_size, special, text_anchor(tokenizer))
        assert vocabulary_texts(tokenizer) == expected
    assert vocabulary_texts(Tokenizer(byte_level, eos_id=9))[2] == "\u00e9"


def test_requests_with_equal_schemas_share_their_cached_states() -> None:
    rng = np.random.default_rng(8)
    texts = random_vocabulary(rng, 200)
    vocabulary = Vocabulary(texts, len(texts), [len(texts) - 2])
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"enum": ["x", 1]}},
                                               "b": {"type": "string"}}, "required": ["a", "b"]}  # fmt: skip
    first, again = compile_schema(schema), compile_schema(schema)
    assert first is not again and first == again and hash(first) == hash(again)
    assert compile_schema({**schema, "required": ["a"]}) != first
    check_generation(first, vocabulary, texts, np.random.default_rng(1), 40)
    states = len(vocabulary._costs)
    check_generation(again, vocabulary, texts, np.random.default_rng(1), 40)  # the same draws: every state cached
    assert len(vocabulary._costs) == states > 3
