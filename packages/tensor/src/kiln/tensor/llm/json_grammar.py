"""Grammar-constrained decoding for JSON: a character automaton over a compiled JSON schema
(kiln.tensor.llm.json_schema: `compile_schema`, `Node`, `SchemaError`, `JSON_OBJECT`, importable from here too) and a
per-step token mask.

The automaton reads the text one character at a time; a state is an immutable tuple of frames (the innermost last),
so a state is shared, never copied, when many continuations are tried. It accepts compact JSON (no whitespace but one
optional space after `:` and `,`), object keys of a schema's `properties` at most once each, in any order, and `}`
only once every `required` key is there. `remaining(state)` is the fewest characters that complete the document from
a state; a token is allowed only when the state after it can still be completed within the tokens left, so a
generation that has a one-character token for each character it needs always ends with a document that parses and
matches the schema, before `max_tokens` runs out.

`TokenConstraint` applies this to a vocabulary (`Vocabulary`): a mask is one comparison of the state's cost array
(`remaining` after each token, the largest value where the automaton refuses it) with the tokens left. A state's
cost array is worked out at its first use by one walk of the vocabulary's prefix index (kiln.tensor.llm.grammar_index),
pruned at the first refused character; inside a string, the tokens without `"`, `\\` or control characters are taken
as one block and the others are read from their first such character on, each distinct tail once. The array is kept
by the vocabulary under the state's canonical form (a free object's keys left out; equal schemas give equal nodes),
so the many repeated states of a document (inside a string, after a colon, ...) and of later requests with the same
schema cost a lookup. The stop ids are allowed once the document is complete.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tokenizers

from kiln.tensor.llm.grammar_index import TokenIndex
from kiln.tensor.llm.json_schema import (
    ANY,
    JSON_OBJECT,
    Node,
    SchemaError,
    compile_schema,
    make_node,
    rest_cost,
)
from kiln.tensor.llm.tokenizer import Tokenizer

__all__ = ["JSON_OBJECT", "Node", "SchemaError", "TokenConstraint", "Vocabulary", "accepts", "compile_schema", "feed",
           "initial", "make_node", "remaining", "text_anchor", "token_costs", "token_text", "token_texts",
           "vocabulary_texts"]  # fmt: skip

_DIGITS = "0123456789"
_HEX = "0123456789abcdefABCDEF"


# -- the automaton ------------------------------------------------------------------------------------------------
# Frames: ("wait", node, space_ok) a value not begun; ("str", escape) escape 0, -1 after "\", 1..4 hex digits to go;
# ("num", phase, integer); ("lit", candidates, text); ("obj", node, phase, seen, key) with key the text of a key
# being read (or its name once read); ("arr", node, phase). A state is a tuple of frames, () once the value is done.
State = tuple[tuple[Any, ...], ...]
_NUMBER_DONE = frozenset({"zero", "int", "frac", "exp"})


def initial(node: Node | Sequence[Node]) -> State:
    """The state before the first character of a value of `node`, or of any of several nodes (read side by side:
    an ("alt", states) frame, alone in its state, holds the states of those still possible)."""
    if isinstance(node, Node):
        return (("wait", node, False),)
    return (("alt", tuple(initial(n) for n in node)),)


def _begin(node: Node, char: str) -> tuple[tuple[Any, ...], ...] | None:
    """The frames of a value of `node` that starts with `char`, or None."""
    kind = node.kind
    if kind == "union":
        for option in node.options:
            if (frames := _begin(option, char)) is not None:
                return frames
        return None
    if kind == "any":
        for option in (JSON_OBJECT, _ANY_ARRAY, _STRING, _NUMBER, _BOOLEAN, _NULL):
            if (frames := _begin(option, char)) is not None:
                return frames
        return None
    if kind == "string":
        return (("str", 0),) if char == '"' else None
    if kind in ("number", "integer"):
        if char == "-":
            return (("num", "sign", kind == "integer"),)
        if char in _DIGITS:
            return (("num", "zero" if char == "0" else "int", kind == "integer"),)
        return None
    if kind in ("boolean", "null", "enum"):
        literals = ("true", "false") if kind == "boolean" else ("null",) if kind == "null" else node.literals
        matching = tuple(text for text in literals if text.startswith(char))
        return (("lit", matching, char),) if matching else None
    if kind == "object":
        return (("obj", node, "open", frozenset(), ""),) if char == "{" else None
    if kind == "array":
        return (("arr", node, "open"),) if char == "[" else None
    raise AssertionError(kind)


_ANY_ARRAY = Node("array", items=ANY)
_STRING, _NUMBER, _BOOLEAN, _NULL = Node("string"), Node("number"), Node("boolean"), Node("null")


def _done(stack: State) -> State:
    """The state after the value on top of `stack` (already popped) ended."""
    if not stack:
        return ()
    top = stack[-1]
    if top[0] == "obj":
        _, node, phase, seen, key = top
        if phase == "key":  # a key of a free object
            return (*stack[:-1], ("obj", node, "colon", seen, key))
        return (*stack[:-1], ("obj", node, "after", seen | {key}, ""))
    return (*stack[:-1], ("arr", top[1], "after"))


def _names_left(node: Node, seen: frozenset[str]) -> list[str]:
    return [name for name, _ in node.properties or () if name not in seen]


def _key_start(stack: State, node: Node, seen: frozenset[str]) -> State | None:
    """A `"` that opens a key of the object on top of `stack`."""
    if node.properties is None:
        return (*stack[:-1], ("obj", node, "key", seen, ""), ("str", 0))
    if not _names_left(node, seen):
        return None
    return (*stack[:-1], ("obj", node, "key", seen, '"'))


def feed(state: State, char: str) -> State | None:
    """The state after `char`, or None when no document of the schema continues so."""
    if not state:
        return None
    top, below = state[-1], state[:-1]
    tag = top[0]
    if tag == "alt":
        alive = tuple(following for s in top[1] if (following := feed(s, char)) is not None)
        return None if not alive else alive[0] if len(alive) == 1 else (("alt", alive),)
    if tag == "wait":
        _, node, space_ok = top
        if char == " " and space_ok:
            return (*below, ("wait", node, False))
        frames = _begin(node, char)
        return None if frames is None else (*below, *frames)
    if tag == "str":
        escape = top[1]
        if escape == -1:
            if char == "u":
                return (*below, ("str", 4))
            return (*below, ("str", 0)) if char in '"\\/bfnrt' else None
        if escape > 0:
            return (*below, ("str", escape - 1)) if char in _HEX else None
        if char == '"':
            return _done(below)
        if char == "\\":
            return (*below, ("str", -1))
        return None if ord(char) < 0x20 else state
    if tag == "num":
        step = _number_step(top[1], char, top[2])
        if step is not None:
            return (*below, ("num", step, top[2]))
        return feed(_done(below), char) if top[1] in _NUMBER_DONE and below else None
    if tag == "lit":
        _, candidates, text = top
        longer = text + char
        matching = tuple(c for c in candidates if c.startswith(longer))
        if matching:
            return (*below, ("lit", matching, longer))
        return feed(_done(below), char) if text in candidates and below else None
    if tag == "obj":
        return _feed_object(state, top, char)
    return _feed_array(state, top, char)


def _number_step(phase: str, char: str, integer: bool) -> str | None:
    digit = char in _DIGITS
    if phase == "sign":
        return ("zero" if char == "0" else "int") if digit else None
    if phase in ("zero", "int"):
        if digit:
            return "int" if phase == "int" else None
        if integer:
            return None
        return "dot" if char == "." else "e" if char in "eE" else None
    if phase in ("dot", "frac"):
        if digit:
            return "frac"
        return "e" if phase == "frac" and char in "eE" and not integer else None
    if phase == "e":
        return "exp" if digit else "esign" if char in "+-" else None
    return "exp" if digit else None  # esign, exp


def _feed_object(state: State, top: tuple[Any, ...], char: str) -> State | None:
    _, node, phase, seen, key = top
    below = state[:-1]
    closable = node.required <= seen
    if phase in ("open", "comma", "comma_sp"):
        if char == '"':
            return _key_start(state, node, seen)
        if phase == "open" and char == "}":
            return _done(below) if closable else None
        if phase == "comma" and char == " ":
            return (*below, ("obj", node, "comma_sp", seen, ""))
        return None
    if phase == "key":  # a key of the listed properties (a free object's key is a "str" frame above)
        longer = key + char
        for name in _names_left(node, seen):
            if node.key_texts[name] == longer:
                return (*below, ("obj", node, "colon", seen, name))
        if any(node.key_texts[name].startswith(longer) for name in _names_left(node, seen)):
            return (*below, ("obj", node, "key", seen, longer))
        return None
    if phase == "colon":
        if char != ":":
            return None
        value = ANY if node.properties is None else node.prop(key)
        return (*below, ("obj", node, "value", seen, key), ("wait", value, True))
    if phase == "after":
        if char == ",":
            more = node.properties is None or bool(_names_left(node, seen))
            return (*below, ("obj", node, "comma", seen, "")) if more else None
        return _done(below) if char == "}" and closable else None
    return None


def _feed_array(state: State, top: tuple[Any, ...], char: str) -> State | None:
    _, node, phase = top
    below = state[:-1]
    if char == "]" and phase in ("open", "after"):
        return _done(below)
    if phase == "open":
        return feed((*below, ("arr", node, "value"), ("wait", node.items, False)), char)
    if phase == "after" and char == ",":
        return (*below, ("arr", node, "value"), ("wait", node.items, True))
    return None


def remaining(state: State) -> int:
    """The fewest characters that complete the document from `state` (0: complete)."""
    return sum(_frame_cost(frame) for frame in state)


def _frame_cost(frame: tuple[Any, ...]) -> int:
    tag = frame[0]
    if tag == "alt":
        return min(remaining(s) for s in frame[1])
    if tag == "wait":
        return int(frame[1].shortest)
    if tag == "str":
        escape = frame[1]
        return 1 + (1 if escape == -1 else max(escape, 0))
    if tag == "num":
        return 0 if frame[1] in _NUMBER_DONE else 1
    if tag == "lit":
        _, candidates, text = frame
        return min(len(c) - len(text) for c in candidates)
    if tag == "arr":
        return 1
    node: Node = frame[1]
    phase: str = frame[2]
    seen: frozenset[str] = frame[3]
    key: str = frame[4]
    missing = node.required - seen
    if node.properties is None:
        return {"open": 1, "key": 3, "colon": 3, "value": 1, "after": 1}.get(phase, 5)
    if phase == "key":
        names = [n for n in _names_left(node, seen) if node.key_texts[n].startswith(key)]
        return min(len(node.key_texts[n]) - len(key) + 1 + node.prop(n).shortest + rest_cost(node, missing - {n})
                   for n in names)  # fmt: skip
    if phase == "colon":
        return 1 + node.prop(key).shortest + rest_cost(node, missing - {key})
    if phase == "value":
        return rest_cost(node, missing - {key})
    if phase == "after":
        return rest_cost(node, missing)
    if phase == "open":
        return rest_cost(node, missing) - (1 if missing else 0)
    # after a comma: one more key must come
    if missing:
        return rest_cost(node, missing) - 1
    return 1 + min(len(node.key_texts[n]) + 1 + node.prop(n).shortest for n in _names_left(node, seen))


def accepts(node: Node, text: str) -> bool:
    """Whether `text` is a complete document of `node` for the automaton."""
    state: State | None = initial(node)
    for char in text:
        state = feed(state, char) if state is not None else None
    return state is not None and remaining(state) == 0


# -- the token mask ---------------------------------------------------------------------------------------------------
_NEVER16, _NEVER32 = 0xFFFF, 0x7FFFFFFF  # the cost of a refused token in a uint16 / int32 cost array


def _in_string(state: State) -> bool:
    """Whether `state` is inside a string's body (not in an escape), where only `is_special` characters matter."""
    return bool(state) and state[-1][0] == "str" and state[-1][1] == 0


def _ascii_only(state: State) -> bool:
    """Whether only ASCII characters can continue `state`: JSON's structure is ASCII; strings, the keys of a schema's
    properties and enum literals need not be."""
    if not state:
        return True
    top = state[-1]
    if top[0] == "alt":
        return all(_ascii_only(s) for s in top[1])
    if top[0] == "lit":
        return all(text.isascii() for text in top[1])
    return top[0] != "str" and not (top[0] == "obj" and top[2] == "key")


def _canonical(state: State) -> State:
    """`state` less what cannot change a mask: a free object's `seen` keys and key (it takes any key, any value)."""
    frames = []
    for frame in state:
        if frame[0] == "obj" and frame[1].properties is None:
            frame = ("obj", frame[1], frame[2])
        elif frame[0] == "alt":
            frame = ("alt", tuple(_canonical(s) for s in frame[1]))
        frames.append(frame)
    return tuple(frames)


def token_costs(index: TokenIndex, state: State) -> np.ndarray:
    """`remaining` of the state after each token of `index` (in its sorted order) from `state`, or _NEVER32 where the
    automaton refuses the token: one walk of the prefix tree, refusing a subtree at its first refused character; inside
    a string, the tokens that stay in it are taken as one block and the others are read from their first special
    character on, each distinct tail once (`TokenIndex.string_tails`)."""
    costs = np.full(len(index), _NEVER32, np.int32)
    _walk(index, state, costs, _in_string(state))
    return costs


def _walk(index: TokenIndex, state: State, costs: np.ndarray, in_body: bool) -> None:
    """Fills `costs` for the tokens of `index` read from `state`. `in_body`: `state` is a string's body where the
    index's texts begin (else the root's children are read one by one, as a string's tails must be)."""
    pending: list[tuple[int, int, int, State]] = [(0, len(index), 0, state)]
    while pending:
        lo, hi, depth, current = pending.pop()
        if _in_string(current) and (depth or in_body):
            _string_body(index, lo, hi, depth, current, costs)
            continue
        if depth >= index.width:
            _tail(index, lo, hi, depth, current, costs)
            continue
        children = index.children(lo, hi, depth)
        if children.ended:
            costs[lo : lo + children.ended] = remaining(current)
        ascii_only = _ascii_only(current)
        for k, char in enumerate(children.chars):
            if ascii_only and ord(char) >= 0x80:
                break  # the children are in code point order
            following = feed(current, char)
            if following is not None:
                pending.append((children.starts[k], children.stops[k], depth + 1, following))


def _string_body(index: TokenIndex, lo: int, hi: int, depth: int, state: State, costs: np.ndarray) -> None:
    """The tokens of sorted range [lo, hi) whose text from `depth` on is read in the string body `state`: those
    without a special character from there on stay in it; the others go as their tails do from `state`."""
    block = index.last_special[lo:hi] < depth
    costs[lo:hi][block] = remaining(state)
    tails = index.string_tails(lo, hi, depth)
    if tails is not None:
        tail_costs = np.full(len(tails.index), _NEVER32, np.int32)
        _walk(tails.index, state, tail_costs, False)
        costs[tails.positions] = tail_costs[tails.tails]


def _tail(index: TokenIndex, lo: int, hi: int, depth: int, state: State, costs: np.ndarray) -> None:
    """The tokens of sorted range [lo, hi) past the index's width, one character at a time."""
    for position in range(lo, hi):
        current: State | None = state
        for char in index.texts[position][depth:]:
            current = feed(current, char) if current is not None else None
        if current is not None:
            costs[position] = remaining(current)


class Vocabulary:
    """A tokenizer's token texts prepared for masks: the prefix index (kiln.tensor.llm.grammar_index), the stop ids,
    and the cost arrays of the grammar states met so far (least recently used dropped beyond `cache_bytes`): the
    JSON states repeat (inside a string, after a colon, ...), so most masks are one comparison over an array.

    Args:
        texts: token id -> the token's text as it reads after other text (`vocabulary_texts`); empty texts and ones
            holding U+FFFD (a part of a character) are never allowed.
        size: the model's logits (ids from `texts` at or past it are left out).
        stop_ids: the ids allowed once the document is complete.
        cache_bytes: the most bytes of cost arrays kept (one array is 2 bytes per logit).
        width: the characters of each text the prefix index holds in its numpy matrix (longer texts are read on one
            by one past it).
    """

    def __init__(self, texts: Mapping[int, str], size: int, stop_ids: Iterable[int], cache_bytes: int = 64 << 20,
                 width: int = 32) -> None:  # fmt: skip
        self.size = size
        self.stop_ids = sorted(i for i in stop_ids if 0 <= i < size)
        self.texts = dict(texts)
        inside = min(texts, default=0) >= 0 and max(texts, default=0) < size
        self.index = TokenIndex(texts if inside else {i: text for i, text in texts.items() if 0 <= i < size}, width)
        self.cache_bytes = cache_bytes
        self._costs: OrderedDict[State, np.ndarray] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def of(cls, tokenizer: Tokenizer, size: int) -> Vocabulary:
        """The vocabulary of `tokenizer` for a model of `size` logits (special tokens never allowed but to stop)."""
        return cls(vocabulary_texts(tokenizer), size, tokenizer.stop_ids)

    def costs(self, state: State) -> np.ndarray:
        """`remaining` after each token id from `state` (uint16, or int32 when a cost does not fit; read-only), the
        array's largest value where the token is refused."""
        key = _canonical(state)
        with self._lock:
            found = self._costs.get(key)
            if found is not None:
                self._costs.move_to_end(key)
                return found
        walked = token_costs(self.index, state)
        small = int(walked.max(initial=0, where=walked != _NEVER32)) < _NEVER16
        by_id = np.full(self.size, _NEVER16 if small else _NEVER32, np.uint16 if small else np.int32)
        by_id[self.index.ids] = np.minimum(walked, _NEVER16).astype(np.uint16) if small else walked
        by_id.flags.writeable = False  # shared by every constraint meeting the state
        with self._lock:
            if key not in self._costs:  # (another thread may have walked the same state meanwhile)
                self._costs[key] = by_id
                self._cached_bytes += by_id.nbytes
            while self._cached_bytes > self.cache_bytes and len(self._costs) > 1:
                self._cached_bytes -= self._costs.popitem(last=False)[1].nbytes
        return by_id


class TokenConstraint:
    """One generation constrained to a JSON document of `node` (or of one of several nodes): `mask(tokens_left)`
    before each token, `advance` with the chosen token. `complete` once the text is a whole document; `closed` when
    no character may follow."""

    def __init__(self, node: Node | Sequence[Node], vocabulary: Vocabulary) -> None:
        self.node, self.vocabulary = node, vocabulary
        self.state: State = initial(node)
        self.text = ""

    @property
    def complete(self) -> bool:
        return remaining(self.state) == 0

    @property
    def closed(self) -> bool:
        return self.state == ()

    def mask(self, tokens_left: int) -> np.ndarray:
        """The tokens allowed now (a bool array over the vocabulary) when at most `tokens_left` tokens (this one
        included) may follow. When no token keeps the shortest completion within that budget (counted at one
        character per token, so it may be too strict), every token the grammar allows is (the text may then end cut
        short by the length limit). ValueError when the grammar allows none (the vocabulary lacks the characters)."""
        costs = self.vocabulary.costs(self.state)
        never = int(np.iinfo(costs.dtype).max)
        complete = self.complete
        allowed = self._allowed(costs, min(tokens_left - 1, never - 1), complete)
        if not allowed.any():
            allowed = self._allowed(costs, never - 1, complete)
        if not allowed.any():
            raise ValueError(f"no token of the vocabulary continues the JSON document {self.text[-60:]!r}")
        return allowed

    def _allowed(self, costs: np.ndarray, budget: int, complete: bool) -> np.ndarray:
        allowed = costs <= budget if budget >= 0 else np.zeros(costs.shape, bool)
        if complete:
            allowed[self.vocabulary.stop_ids] = True
        return allowed

    def advance(self, token: int) -> None:
        """Moves past `token` (a stop id leaves the state as it is)."""
        if token in self.vocabulary.stop_ids:
            return
        text = self.vocabulary.texts.get(token, "")
        for char in text:
            following = feed(self.state, char)
            if following is None:
                raise ValueError(f"the token {token} ({text!r}) does not continue the JSON document {self.text!r}")
            self.state = following
        self.text += text


def token_text(decode: Callable[[list[int]], str], token_id: int, anchor: int | None) -> str:
    """A token's text as it reads after other text: decode([anchor, id]) less decode([anchor]) (SentencePiece drops
    the leading space of a text's first token); "\ufffd" when that is not a clean cut."""
    if anchor is None:
        return decode([token_id])
    prefix, both = decode([anchor]), decode([anchor, token_id])
    return both[len(prefix) :] if both.startswith(prefix) else "\ufffd"


def token_texts(decode: Callable[[list[int]], str], size: int, special: set[int], anchor: int | None) -> dict[int, str]:
    """`token_text` of every token id below `size` but the `special` ones."""
    return {token_id: token_text(decode, token_id, anchor) for token_id in range(size) if token_id not in special}


def text_anchor(tokenizer: Tokenizer) -> int | None:
    """The token of "a" when it is one token (the anchor of `token_text`), else None."""
    ids = tokenizer.encode("a", add_special=False)
    return ids[0] if len(ids) == 1 else None


def vocabulary_texts(tokenizer: Tokenizer) -> dict[int, str]:
    """`token_texts` of every token but the special ones and the stop ids, at once: a byte-level vocabulary's texts
    are its entries' bytes (GPT-2's spelling undone, then UTF-8 with U+FFFD for what is not a whole character, as the
    backend's decoder does); any other vocabulary is decoded in one batch by the backend."""
    special = tokenizer.special_ids | tokenizer.stop_ids
    ids = [token_id for token_id in range(tokenizer.vocab_size) if token_id not in special]
    backend = tokenizer.backend
    added = backend.get_added_tokens_decoder()
    texts: dict[int, str] = {}
    if isinstance(backend.decoder, tokenizers.decoders.ByteLevel):
        for token_id in ids:
            name = backend.id_to_token(token_id)
            if name is None or token_id in added:
                continue
            try:
                texts[token_id] = name.translate(_BYTE_OF_SPELLING).encode("latin-1").decode("utf-8", "replace")
            except UnicodeEncodeError:  # not GPT-2's spelling: decoded below
                continue
    anchor = text_anchor(tokenizer)
    rest = [token_id for token_id in ids if token_id not in texts]
    prefix = "" if anchor is None else tokenizer.decode([anchor])
    batch = [[token_id] if anchor is None else [anchor, token_id] for token_id in rest]
    for token_id, both in zip(rest, backend.decode_batch(batch, skip_special_tokens=False), strict=True):
        texts[token_id] = both[len(prefix) :] if both.startswith(prefix) else "\ufffd"  # as `token_text` cuts
    return texts


def _byte_spellings() -> dict[int, int]:
    """GPT-2's byte-level spelling undone, as a `str.translate` table: the printable bytes are spelled as themselves,
    the others as 256, 257, ... in byte order; each maps to the character whose code is the byte. The other bytes as
    themselves are no spelling: they map past latin-1, so that encoding refuses them."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [byte for byte in range(256) if byte not in printable]
    spelled = {byte: byte for byte in printable} | {256 + k: byte for k, byte in enumerate(others)}
    return spelled | {byte: 0xFFFF for byte in others}


_BYTE_OF_SPELLING = _byte_spellings()
