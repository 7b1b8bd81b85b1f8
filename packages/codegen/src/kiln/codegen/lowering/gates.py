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
