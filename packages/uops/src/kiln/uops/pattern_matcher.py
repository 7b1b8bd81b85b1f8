"""PatternMatcher: an ordered table of (UPat, callback) rules, dispatched by op."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kiln.uops.ops import Ops
from kiln.uops.uop import UOp
from kiln.uops.upat import Matcher, UPat

RewriteCallback = Callable[..., Any]


@dataclass(frozen=True)
class Rule:
    """One compiled rule: a matcher variant of `pattern`, the `callback` it feeds, and where the callback lives."""

    pattern: UPat
    ops: frozenset[Ops] | None
    matcher: Matcher
    callback: RewriteCallback
    wants_ctx: bool
    location: str


RulesByOp = dict[Ops, tuple[tuple[Matcher, RewriteCallback, bool, Rule], ...]]
"""A PatternMatcher's dispatch table: for each op, (matcher, callback, wants_ctx, rule) of its candidate rules."""


def _location(callback: RewriteCallback) -> str:
    code = getattr(callback, "__code__", None)
    if code is None:
        return repr(callback)
    return f"{code.co_filename}:{code.co_firstlineno}"


def _check_signature(pattern: UPat, callback: RewriteCallback) -> bool:
    """Whether `callback` wants `ctx`; raises if it cannot accept the names the pattern binds."""
    try:
        parameters = inspect.signature(callback).parameters
    except (TypeError, ValueError):
        return False
    names = pattern.bound_names()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    missing = [name for name in names if name not in parameters and not takes_any]
    if missing:
        raise TypeError(
            f"rewrite callback at {_location(callback)} does not accept the names {sorted(missing)} "
            f"bound by {pattern!r}"
        )
    required = [
        name
        for name, p in parameters.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and name != "ctx"
        and name not in names
    ]
    if required:
        raise TypeError(
            f"rewrite callback at {_location(callback)} requires {sorted(required)}, which {pattern!r} never binds"
        )
    return "ctx" in parameters


class PatternMatcher:
    """An ordered list of (UPat, callback) rules.

    `rewrite(uop, ctx)` tries the rules whose pattern can match `uop.op`, in table order, and returns the first
    callback result that is not None and not `uop` itself. A callback receives the bound names as keyword
    arguments, plus `ctx` if it has a `ctx` parameter.
    """

    def __init__(self, patterns: Sequence[tuple[UPat, RewriteCallback]]) -> None:
        self.patterns: list[tuple[UPat, RewriteCallback]] = list(patterns)
        self.rules: list[Rule] = []
        for pattern, callback in self.patterns:
            if not isinstance(pattern, UPat) or not callable(callback):
                raise TypeError(f"PatternMatcher entries must be (UPat, callable), got ({pattern!r}, {callback!r})")
            wants_ctx = _check_signature(pattern, callback)
            location = _location(callback)
            for ops, matcher in pattern.matchers():
                self.rules.append(Rule(pattern, ops, matcher, callback, wants_ctx, location))
        # dispatch table: op -> its candidate rules in table order, as plain tuples for a fast inner loop
        self.by_op: RulesByOp = {}
        for op in Ops:
            self.by_op[op] = tuple(
                (rule.matcher, rule.callback, rule.wants_ctx, rule)
                for rule in self.rules
                if rule.ops is None or op in rule.ops
            )

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def __repr__(self) -> str:
        return f"PatternMatcher(<{len(self.patterns)} patterns>)"

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """The replacement of `uop` from the first rule that fires, or None."""
        for matcher, callback, wants_ctx, _ in self.by_op[uop.op]:
            store: dict[str, UOp] = {}
            if matcher(uop, store):
                result = callback(ctx=ctx, **store) if wants_ctx else callback(**store)
                if result is not None and result is not uop:
                    return result  # type: ignore[no-any-return]
        return None

    def rewrite_with_rule(self, uop: UOp, ctx: Any = None) -> tuple[Any, Rule | None]:
        """Like `rewrite` but also returns the rule that fired (for tracing) and any non-None callback result."""
        for matcher, callback, wants_ctx, rule in self.by_op[uop.op]:
            store: dict[str, UOp] = {}
            if matcher(uop, store):
                result = callback(ctx=ctx, **store) if wants_ctx else callback(**store)
                if result is not None and result is not uop:
                    return result, rule
        return None, None
