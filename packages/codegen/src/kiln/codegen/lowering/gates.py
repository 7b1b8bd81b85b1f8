"""Gated (masked) loads into the linear program form: LOAD(INDEX(buf, offset, gate)) -> LOAD(INDEX(buf, offset),
alt, gate), which reads `alt` (zero) where the gate is false and never touches memory there. Gates that are proven
constant disappear. Gated stores keep their gated INDEX; the linearizer wraps them in IF / ENDIF.
"""

from __future__ import annotations

from kiln.uops import Ops, PatternMatcher, UOp, UPat


def _gated_load(load: UOp, index: UOp) -> UOp | None:
    buffer, offset, gate = index.src
    ungated = index.replace(src=(buffer, offset))
    if gate.op is Ops.CONST:
        return load.replace(src=(ungated,)) if gate.arg else UOp.const(load.dtype, 0)
    return load.replace(src=(ungated, UOp.const(load.dtype, 0), gate))


def _gated_store(store: UOp, index: UOp) -> UOp | None:
    gate = index.src[2]
    if gate.op is not Ops.CONST:
        return None
    if not gate.arg:
        return UOp(Ops.GROUP)  # a store that never happens
    return store.replace(src=(index.replace(src=index.src[:2]), *store.src[1:]))


pm_gated_loads = PatternMatcher(
    [
        (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, src=(UPat(), UPat(), UPat()), name="index"),), name="load"), _gated_load),
        (
            UPat(Ops.STORE, src=(UPat(Ops.INDEX, src=(UPat(), UPat(), UPat()), name="index"), UPat()), name="store"),
            _gated_store,
        ),
    ]
)
"""Gated loads -> LOAD(index, alt, gate); constant gates folded away."""


def _masked_store(store: UOp, index: UOp, gate: UOp, value: UOp, old: UOp) -> UOp | None:
    # STORE(idx, WHERE(gate, value, LOAD(idx))): where the gate is false the store writes back what is there, so
    # it is a store of `value` gated by `gate` (a masked assign, e.g. one row of a KV cache, writes only that row)
    if old.src[0] is not index or len(old.src) != 1:
        return None
    if len(index.src) == 3:
        gate = index.src[2] & gate
    return store.replace(src=(index.replace(src=(*index.src[:2], gate)), value, *store.src[2:]))


pm_masked_stores = PatternMatcher(
    [
        (
            UPat(
                Ops.STORE,
                src=(
                    UPat(Ops.INDEX, name="index"),
                    UPat(Ops.WHERE, src=(UPat.var("gate"), UPat.var("value"), UPat(Ops.LOAD, name="old"))),
                ),
                allow_any_len=True,
                name="store",
            ),
            _masked_store,
        )
    ]
)
"""STORE(idx, WHERE(gate, value, LOAD(idx))) -> STORE(INDEX(buf, off, gate), value): a masked write of its own
contents touches only the positions the gate selects."""
