"""NodeSlot: typed per-node facts stored on UOps, freed with the node, outside the node's identity."""

from __future__ import annotations

import gc
import weakref

import pytest

from kiln.uops import NodeSlot, Ops, UOp, dtypes

SIZES: NodeSlot[tuple[int, ...]] = NodeSlot("test_sizes", __name__, "a shape for the tests")
NOTES: NodeSlot[object] = NodeSlot("test_notes", __name__, "any object, for the lifetime test")


def _node(value: int) -> UOp:
    return UOp(Ops.CONST, dtypes.int32, (), value)


def test_set_get_has_discard() -> None:
    node = _node(1234567)
    assert SIZES.get(node) is None and not SIZES.has(node) and SIZES.missing(node)
    SIZES.set(node, (2, 3))
    assert SIZES.get(node) == (2, 3) and SIZES[node] == (2, 3) and SIZES.has(node) and not SIZES.missing(node)
    assert SIZES.setdefault(node, (9,)) == (2, 3)
    SIZES.discard(node)
    assert SIZES.get(node) is None
    SIZES.discard(node)  # discarding twice is fine
    assert SIZES.setdefault(node, (9,)) == (9,)


def test_copy_missing_copies_only_into_a_node_without_a_value() -> None:
    source, target, empty = _node(7654321), _node(7654322), _node(7654323)
    SIZES.copy_missing(empty, target)  # nothing on the source: nothing copied
    assert SIZES.missing(target)
    SIZES.set(source, (4,))
    SIZES.copy_missing(source, target)
    assert SIZES[target] == (4,)
    SIZES.set(source, (5,))
    SIZES.copy_missing(source, target)  # the target's own value stays
    assert SIZES[target] == (4,)


def test_the_value_belongs_to_the_hash_consed_node() -> None:
    first = _node(7654321)
    SIZES.set(first, (5,))
    again = _node(7654321)  # the same content is the same object
    assert again is first and SIZES[again] == (5,)
    assert SIZES.get(_node(7654322)) is None
    assert hash(first) == hash(again)


def test_missing_value_raises_a_key_error_naming_the_slot() -> None:
    with pytest.raises(KeyError, match=r"CONST node has no 'test_sizes' \(a shape for the tests\)"):
        SIZES[_node(13579)]


def test_none_is_not_a_value() -> None:
    with pytest.raises(ValueError, match="cannot hold None"):
        SIZES.set(_node(1), None)  # type: ignore[arg-type]


def test_a_name_belongs_to_one_owner() -> None:
    with pytest.raises(ValueError, match=f"declared by {__name__} already"):
        NodeSlot("test_sizes", "some.other.module", "clash")
    assert NodeSlot.declared()["test_sizes"] is not None
    for bad in ("", "_private", "two words"):
        with pytest.raises(ValueError, match="public identifier"):
            NodeSlot(bad, __name__, "bad name")


def test_the_value_is_freed_with_the_node() -> None:
    class Payload:
        pass

    node = _node(24681357)
    payload = Payload()
    NOTES.set(node, payload)
    watch = weakref.ref(payload)
    del payload
    assert watch() is not None
    del node
    gc.collect()
    assert watch() is None
