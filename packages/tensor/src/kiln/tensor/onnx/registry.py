"""The operator table: ONNX op type -> the rule that translates it into kiln Tensor operations.

Each operator family module (`elementwise_ops`, `shape_ops`, ...) registers its rules with `@operator(...)`; a rule
names the attributes it understands and may check their values, so a model that needs anything else fails at
load with the node, op type, domain and the missing piece named.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.tensor.onnx.attributes import Attributes

if TYPE_CHECKING:
    from kiln.tensor.onnx.node_call import NodeCall
    from kiln.tensor.onnx.values import Value

__all__ = [
    "DEFAULT_DOMAINS",
    "MICROSOFT_DOMAIN",
    "MICROSOFT_OPERATORS",
    "OPERATORS",
    "Handler",
    "OperatorRule",
    "all_checks",
    "one_of",
    "operator",
    "rule_for",
]

# A handler returns one value or one per node output. A numpy array is a value known on the host that depends on
# the input shapes and constants only (Shape, Size, Constant): the graph folds it once per set of input shapes.
Handler = Callable[["NodeCall"], "Value | np.ndarray[Any, Any] | Sequence[Value | np.ndarray[Any, Any] | None]"]
# A check of a node's attribute values at load: returns what is unsupported, or None.
Check = Callable[[Attributes, int], "str | None"]

DEFAULT_DOMAINS = ("", "ai.onnx")
# onnxruntime's contrib operators (Attention, SkipLayerNormalization, MatMulNBits, ...), found in PyTorch and
# Hugging Face exports after onnxruntime's transformer optimizer
MICROSOFT_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class OperatorRule:
    """How one ONNX op type runs: its handler, the attributes it reads, the oldest opset it follows."""

    op_type: str
    handler: Handler
    attributes: frozenset[str]
    since: int = 1
    check: Check | None = None
    # deterministic: outputs depend only on inputs, so a node with constant inputs is folded once
    deterministic: bool = True
    graph_attributes: frozenset[str] = field(default_factory=frozenset)


OPERATORS: dict[str, OperatorRule] = {}  # module-state: the operator rule table, filled once at import by @operator
MICROSOFT_OPERATORS: dict[str, OperatorRule] = {}  # module-state: the com.microsoft rule table, filled like OPERATORS


def operator(
    *op_types: str,
    attributes: Sequence[str] = (),
    since: int = 1,
    check: Check | None = None,
    deterministic: bool = True,
    graph_attributes: Sequence[str] = (),
    domain: str = "",
) -> Callable[[Handler], Handler]:
    """Register the decorated handler for `op_types` of `domain` (the default domain, or com.microsoft)."""
    table = MICROSOFT_OPERATORS if domain == MICROSOFT_DOMAIN else OPERATORS
    assert domain in (*DEFAULT_DOMAINS, MICROSOFT_DOMAIN), f"unknown domain {domain!r}"

    def register(handler: Handler) -> Handler:
        for op_type in op_types:
            assert op_type not in table, f"{op_type} registered twice"
            table[op_type] = OperatorRule(
                op_type,
                handler,
                frozenset(attributes) | frozenset(graph_attributes),
                since,
                check,
                deterministic,
                frozenset(graph_attributes),
            )
        return handler

    return register


def rule_for(domain: str, op_type: str) -> OperatorRule | None:
    """The rule of `op_type` in `domain`, or None when kiln has none (or does not know the domain)."""
    if domain in DEFAULT_DOMAINS:
        return OPERATORS.get(op_type)
    if domain == MICROSOFT_DOMAIN:
        return MICROSOFT_OPERATORS.get(op_type)
    return None


def one_of(name: str, allowed: Sequence[str], default: str) -> Check:
    """A check that string attribute `name` is one of `allowed`."""

    def check(attributes: Attributes, opset: int) -> str | None:
        value = attributes.string(name, default)
        return None if value in allowed else f"attribute {name}={value!r} (supported: {', '.join(allowed)})"

    return check


def all_checks(*checks: Check) -> Check:
    def check(attributes: Attributes, opset: int) -> str | None:
        for each in checks:
            problem = each(attributes, opset)
            if problem is not None:
                return problem
        return None

    return check
