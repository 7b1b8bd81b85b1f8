"""Grammar-constrained decoding (kiln.tensor.llm.json_grammar): the per-token mask time and the first request's
vocabulary index time, for JSON mode and a JSON schema with nested objects, arrays and enums, over synthetic 32k and
128k byte-level vocabularies built here.

The vocabulary imitates a byte-level BPE's decoded token texts: the printable ASCII bytes, "\\ufffd" for the bytes
that are parts of UTF-8 characters (skipped by the mask, as the real ones are), digits groups, JSON punctuation runs,
whitespace runs, and random words with and without a leading space, capitalised or not, some with accented or CJK
letters, until the size is reached; the last id is the stop token (no text). A "generation" draws each token
uniformly among the allowed ones (numpy, seeded) with a budget of `--tokens` tokens, so the grammar states visited are
the ones a model's sampling would reach, nested values included; the budget forces the document closed at the end.

Figures per vocabulary: `Vocabulary.of` on a byte-level `tokenizers` tokenizer of those texts (decoding every token,
then indexing: what the server's first constrained request waits for). Per vocabulary and grammar: the index time
(building `Vocabulary` from the texts plus the first mask), then the median and p95 of `TokenConstraint.mask` over
every token of `--runs` generations (the first of which is the first request). The reference in the same run is
numpy's boolean comparison over the vocabulary (`cost <= budget` on a uint16 array), the floor of any mask built over
a dense array.
`--compare FILE` measures another version of json_grammar.py too (e.g. `git show <commit>:packages/tensor/src/kiln/
tensor/llm/json_grammar.py > /tmp/before.py`), its generations interleaved with this one's, and prints the ratios.

    uv run python benchmarks/grammar_bench.py [--vocab 32000,128000] [--tokens 150] [--runs 4] [--compare FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from types import ModuleType
from typing import Any

import numpy as np

from kiln.tensor.llm import json_grammar

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "kind": {"enum": ["person", "company", "other", 3, None]},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "zip": {"type": ["string", "null"]},
                "geo": {"type": "array", "items": {"type": "number"}},
            },
            "required": ["street"],
            "additionalProperties": False,
        },
        "friends": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}},
                "required": ["id", "ok"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["name", "kind", "address"],
    "additionalProperties": False,
}


def synthetic_vocabulary(size: int, seed: int = 0) -> dict[int, str]:
    """Token texts of a byte-level-BPE-like vocabulary of `size` ids (the last one, the stop token, has none)."""
    rng = np.random.default_rng(seed)
    texts: dict[str, None] = {}
    for byte in range(256):  # the byte tokens: ASCII texts, or a part of a character
        texts[chr(byte) if byte < 0x80 else f"\ufffd{byte}"] = None
    for number in range(1000):
        texts[str(number)] = None
    punctuation = ['"', ":", ",", "{", "}", "[", "]", " ", "\n", "\\"]
    for _ in range(3000):
        length = int(rng.integers(2, 5))
        texts["".join(punctuation[int(i)] for i in rng.integers(len(punctuation), size=length))] = None
    for width in range(2, 33):
        texts[" " * width] = None
        texts["\n" + " " * width] = None
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    weights = np.linspace(2.0, 0.2, len(letters))
    weights /= weights.sum()
    extra = ["é", "ü", "ñ", "ß", "中", "文", "ы", "λ"]
    while len(texts) < size - 1:
        length = int(rng.integers(2, 11))
        word = "".join(rng.choice(letters, size=length, p=weights))
        if rng.random() < 0.05:
            word = word[: length // 2] + extra[int(rng.integers(len(extra)))] + word[length // 2 :]
        if rng.random() < 0.3:
            word = word.capitalize()
        if rng.random() < 0.5:
            word = " " + word
        if rng.random() < 0.03:
            word = word + punctuation[int(rng.integers(len(punctuation)))]
        texts[word] = None
    ordered = list(texts)[: size - 1]
    return {index: ("\ufffd" if text.startswith("\ufffd") else text) for index, text in enumerate(ordered)}


def byte_level_tokenizer(texts: dict[int, str], size: int) -> Any:
    """A kiln Tokenizer (byte-level BPE, no merges) whose token `i` decodes to `texts[i]` (the "\ufffd" ones to the
    byte `i`, a part of a character), with the stop token `<|end|>` last: what `Vocabulary.of` reads."""
    import tokenizers

    from kiln.tensor.llm.tokenizer import Tokenizer

    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]  # bytes spelled as themselves
    others = [byte for byte in range(256) if byte not in printable]
    spelling = {byte: chr(byte) for byte in printable} | {byte: chr(256 + k) for k, byte in enumerate(others)}
    names = {}
    for token_id, text in texts.items():
        data = bytes([token_id]) if text == "\ufffd" else text.encode()
        names["".join(spelling[byte] for byte in data)] = token_id
    names["<|end|>"] = size - 1
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=names, merges=[]))
    backend.add_special_tokens(["<|end|>"])
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    return Tokenizer(backend, eos_id=size - 1)


def generate(grammar: ModuleType, node: Any, vocabulary: Any, tokens: int, seed: int) -> tuple[list[float], str]:
    """Seconds of each mask of one generation (tokens drawn uniformly among the allowed ones), and its text."""
    rng = np.random.default_rng(seed)
    constraint = grammar.TokenConstraint(node, vocabulary)
    times = []
    for step in range(tokens):
        start = time.perf_counter()
        allowed = constraint.mask(tokens - step)
        times.append(time.perf_counter() - start)
        choices = np.flatnonzero(allowed)
        token = int(choices[int(rng.integers(len(choices)))])
        if token in vocabulary.stop_ids:
            break
        constraint.advance(token)
        if constraint.closed:
            break
    return times, constraint.text


def load(path: str) -> ModuleType:
    """A json_grammar.py file as a module of its own."""
    spec = importlib.util.spec_from_file_location("json_grammar_compared", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def prepare(grammar: ModuleType, texts: dict[int, str], size: int, name: str, tokens: int) -> Any:
    """(seconds, vocabulary, node) of a grammar module: the seconds of what a first request waits for (building the
    vocabulary's index and the first mask)."""
    node = grammar.JSON_OBJECT if name == "json_object" else grammar.compile_schema(SCHEMA)
    start = time.perf_counter()
    vocabulary = grammar.Vocabulary(texts, size, [size - 1])
    grammar.TokenConstraint(node, vocabulary).mask(tokens)
    return time.perf_counter() - start, vocabulary, node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", default="32000,128000", help="vocabulary sizes, comma-separated")
    parser.add_argument("--tokens", type=int, default=150, help="the token budget of one generation")
    parser.add_argument("--runs", type=int, default=4, help="generations per vocabulary and grammar")
    parser.add_argument("--compare", help="another json_grammar.py to measure in the same run")
    args = parser.parse_args()
    versions = {"kiln": json_grammar} | ({"compared": load(args.compare)} if args.compare else {})
    print(f"{'vocab':>7} {'grammar':<12} {'version':<9} {'index s':>8} {'masks':>6} {'median ms':>10} {'p95 ms':>8} "
          f"{'numpy floor ms':>15}")  # fmt: skip
    for size in (int(part) for part in args.vocab.split(",")):
        texts = synthetic_vocabulary(size)
        tokenizer = byte_level_tokenizer(texts, size)
        seconds = {}
        for version, module in versions.items():
            start = time.perf_counter()
            module.Vocabulary.of(tokenizer, size)
            seconds[version] = time.perf_counter() - start
        print(f"{size:>7} Vocabulary.of(tokenizer) s: " + ", ".join(f"{v} {t:.3f}" for v, t in seconds.items()))
        floor = np.zeros(size, np.uint16)
        for name in ("json_object", "json_schema"):
            prepared = {version: prepare(module, texts, size, name, args.tokens)
                        for version, module in versions.items()}  # fmt: skip
            times: dict[str, list[float]] = {version: [] for version in versions}
            for run in range(args.runs):  # the versions take turns, so the machine's load falls on both alike
                for version, module in versions.items():
                    _, vocabulary, node = prepared[version]
                    times[version].extend(generate(module, node, vocabulary, args.tokens, run)[0])
            floors = []
            for _ in range(50):
                start = time.perf_counter()
                (floor <= 7).any()
                floors.append(time.perf_counter() - start)
            medians = {}
            for version in versions:
                values = times[version]
                medians[version] = statistics.median(values)
                print(f"{size:>7} {name:<12} {version:<9} {prepared[version][0]:>8.3f} {len(values):>6} "
                      f"{medians[version] * 1e3:>10.3f} {float(np.percentile(values, 95)) * 1e3:>8.3f} "
                      f"{statistics.median(floors) * 1e3:>15.3f}", flush=True)  # fmt: skip
            if args.compare:
                print(f"{'':>7} {name:<12} compared/kiln: median {medians['compared'] / medians['kiln']:.1f}x, "
                      f"index {prepared['compared'][0] / prepared['kiln'][0]:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
