"""Symbolic sizes: a shape entry that is a bound Variable (or an index expression over bound Variables).

A shape entry is an `int` or a `Size` UOp: an index-typed expression whose every DEFINE_VAR sits under a BIND (the
variable and its value for this tensor, `Variable("i", 1, 10).bind(3)`). The graph carries the BINDs as built, so a
tensor knows its bound shape (`bound_int`); memory is allocated at the largest value the expression can take
(`max_int`). When a kernel is compiled, its BINDs are replaced by their bare DEFINE_VARs (`unbind`): the compiled
program is keyed on that unbound structure, so every value of a variable's range runs one program, and the values
travel to the launch as `var_vals`.

The same holds one level up: a schedule plan is kept by the tensor graph's unbound structure (`graph_unbind`: the
BINDs inside movement ops' sizes replaced), and a new value takes it with its own values (`graph_rebind`), so it
plans nothing. For that, a size's form must not depend on the values: `settle` simplifies it unbound and binds it
again (the simplifier orders a sum's terms by their nodes, and a BIND node holds its value).

Inside a jitted function a Variable argument is a Tensor (`VariableValue`) that is also the variable as a size;
int arithmetic on it (`pos + 1`) keeps the size expression (`combined_size`).

Plain int shapes never reach this module: the checks here run only for entries that are not ints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from kiln.uops import Ops, UOp, dtypes

__all__ = [
    "BoundVariable",
    "Size",
    "Variable",
    "VariableValue",
    "as_size",
    "bound_int",
    "bound_shape",
    "check_symbolic_size",
    "combined_size",
    "describe_variables",
    "format_shape",
    "format_size",
    "graph_rebind",
    "graph_unbind",
    "is_symbolic",
    "pairs_symbolic",
    "rebind",
    "shape_structure",
    "shape_values",
    "max_int",
    "max_numel",
    "provably_le",
    "sizes_equal",
    "unbind",
]

Size = int | UOp


@dataclass(frozen=True)
class Variable:
    """A named integer in [low, high]: a size in a Tensor's shape once bound (`Variable("i", 1, 10).bind(3)`), or
    an argument of a jitted function (e.g. a sequence position)."""

    name: str
    low: int
    high: int

    def __post_init__(self) -> None:
        for what, value in (("low", self.low), ("high", self.high)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"Variable {self.name!r}: {what} must be an int, got {value!r}")
        if not 0 <= self.low <= self.high:
            raise ValueError(f"Variable {self.name!r} needs 0 <= low <= high, got [{self.low}, {self.high}]")

    def bind(self, value: int) -> BoundVariable:
        """This variable with a value (ValueError outside [low, high])."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"variable {self.name!r} takes an int, got {value!r}")
        if not self.low <= value <= self.high:
            raise ValueError(f"variable {self.name!r} = {value} is outside its bounds [{self.low}, {self.high}]")
        return BoundVariable(self, value)

    @property
    def uop(self) -> UOp:
        """The unbound variable (DEFINE_VAR): a shape entry needs it bound."""
        return UOp.variable(self.name, self.low, self.high)


@dataclass(frozen=True)
class BoundVariable:
    """A `Variable` with its value: usable as a shape entry, a slice bound, or a jitted function's argument (which
    receives it as a 0-dim int32 Tensor: `Tensor(bound)` makes one)."""

    variable: Variable
    value: int

    @property
    def uop(self) -> UOp:
        """The bound variable as a size (BIND of the DEFINE_VAR to the value)."""
        return self.variable.uop.bind(self.value)

    def __add__(self, other: Size | BoundVariable) -> UOp:
        return self.uop + as_size(other, "operand")

    def __radd__(self, other: int) -> UOp:
        return as_size(other, "operand") + self.uop

    def __sub__(self, other: Size | BoundVariable) -> UOp:
        return self.uop - as_size(other, "operand")

    def __rsub__(self, other: int) -> UOp:
        return _as_uop(as_size(other, "operand")) - self.uop

    def __mul__(self, other: Size | BoundVariable) -> UOp:
        return self.uop * as_size(other, "operand")

    def __rmul__(self, other: int) -> UOp:
        return as_size(other, "operand") * self.uop


class VariableValue:
    """A value that may stand for a bound variable: a Tensor made from a `BoundVariable` (what a jitted function
    receives) is the variable's value in arithmetic and the variable itself as a size (`x[:v]`, `zeros(v, 4)`).
    Adding, subtracting or multiplying it by ints (or by another such value) keeps the size expression:
    `x[: v + 1]` inside a jitted function is the first v + 1 rows for every value of v."""

    _bound_size: UOp | None = None


def carries_variable(value: object) -> bool:
    """True for a `VariableValue` that stands for a bound variable (or an expression of bound variables)."""
    return isinstance(value, VariableValue) and value._bound_size is not None


def combined_size(op: str, value: VariableValue, other: object, reverse: bool) -> UOp | None:
    """The size expression of `value <op> other` ('+', '-', '*'; `other <op> value` when `reverse`) where `value`
    stands for a size and `other` is an int or another such value; None when `other` is anything else."""
    if value._bound_size is None:
        return None
    if isinstance(other, VariableValue):
        if other._bound_size is None:
            return None
        operand: UOp | int = other._bound_size
    elif type(other) is int:
        operand = other
    else:
        return None
    left, right = (_as_uop(operand), value._bound_size) if reverse else (value._bound_size, _as_uop(operand))
    result = left + right if op == "+" else left - right if op == "-" else left * right
    return result


def as_size(value: object, what: str) -> Size:
    """`value` (an int, a `BoundVariable` or a bound index expression) as a shape entry; TypeError otherwise."""
    if isinstance(value, VariableValue) and value._bound_size is not None:
        value = value._bound_size
    if isinstance(value, BoundVariable):
        return value.uop
    if isinstance(value, Variable):
        raise ValueError(
            f"{what} uses variable {value.name!r} (range [{value.low}, {value.high}]) unbound: "
            f"bind it to a value first, e.g. {value!r}.bind(value)"
        )
    if isinstance(value, UOp):
        check_symbolic_size(value, what)
        return value
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int or a bound Variable, got {value!r} of type {type(value).__name__}")
    return int(value.__index__())


def _variables(size: UOp) -> tuple[list[UOp], list[UOp]]:
    """(BIND nodes, DEFINE_VARs not under a BIND) of a size expression."""
    binds: list[UOp] = []
    free: list[UOp] = []
    for node in size.toposort(gate=lambda node: node.op is not Ops.BIND):
        if node.op is Ops.BIND:
            binds.append(node)
        elif node.op is Ops.DEFINE_VAR:
            free.append(node)
    return binds, free


def check_symbolic_size(size: UOp, what: str) -> None:
    """Raises unless `size` is an index expression over bound variables that is never negative.

    TypeError for a UOp that is not index-typed; ValueError naming the variable and its range for an unbound
    variable, for one variable bound to two values, and for an expression that can be negative.
    """
    if size.dtype is not dtypes.index and size.dtype is not dtypes.int32 and size.dtype is not dtypes.int64:
        raise TypeError(f"{what} entry {size!r} must be an int or an integer Variable expression, got {size.dtype!r}")
    binds, free = _variables(size)
    if free:
        variable = free[0].arg
        raise ValueError(
            f"{what} uses variable {variable.name!r} (range [{variable.lo}, {variable.hi}]) unbound: "
            f"bind it to a value first, e.g. Variable({variable.name!r}, {variable.lo}, {variable.hi}).bind(value)"
        )
    seen: dict[str, int] = {}
    for bind in binds:
        name, value = bind.src[0].arg.name, bind.src[1].arg
        if seen.setdefault(name, value) != value:
            raise ValueError(f"{what} binds variable {name!r} to both {seen[name]} and {value}")
    if int(size.simplify().vmin) < 0:
        raise ValueError(f"{what} entry {size!r} can be negative (its smallest value is {size.vmin})")


def describe_variables(*sizes: Size) -> str:
    """The variables of `sizes` with their ranges and bound values, for messages: "'n' in [1, 10] (bound to 3)"."""
    found: dict[str, str] = {}
    for size in sizes:
        if isinstance(size, int):
            continue
        for node in size.toposort():
            if node.op is Ops.BIND:
                variable = node.src[0].arg
                found[variable.name] = (
                    f"{variable.name!r} in [{variable.lo}, {variable.hi}] (bound to {node.src[1].arg})"
                )
            elif node.op is Ops.DEFINE_VAR and node.arg.name not in found:
                found[node.arg.name] = f"{node.arg.name!r} in [{node.arg.lo}, {node.arg.hi}]"
    return ", ".join(found.values()) or "no variables"


def is_symbolic(shape: Iterable[Size]) -> bool:
    """True when some entry of `shape` is not an int (a loop: this runs on the int path of every movement op)."""
    for size in shape:
        if type(size) is not int:
            break
    else:
        return False
    return True


def pairs_symbolic(pairs: Iterable[tuple[Size, Size]]) -> bool:
    """True when an entry of some (start, end) / (before, after) pair is not an int."""
    for first, second in pairs:
        if type(first) is not int or type(second) is not int:
            break
    else:
        return False
    return True


def bound_int(size: Size) -> int:
    """The value of `size` with each variable at its bound value."""
    if isinstance(size, int):
        return size
    binds, _ = _variables(size)
    return _evaluate(size, {bind.src[0]: bind.src[1].arg for bind in binds})


def bound_shape(shape: Iterable[Size]) -> tuple[int, ...]:
    """`shape` with every entry at its bound value."""
    return tuple(bound_int(size) for size in shape)


def format_size(size: Size) -> str:
    """`size` as text: an int as itself, a symbolic size as its expression and bound value, e.g. `(n+1)=4`."""
    return str(size) if isinstance(size, int) else f"{size.render()}={bound_int(size)}"


def format_shape(shape: tuple[Size, ...]) -> str:
    """`shape` as text: an int shape as Python prints it, a symbolic entry as its expression and bound value, e.g.
    `(n=3, 4)` or `((n+1)=4, 4)`."""
    if not is_symbolic(shape):
        return str(shape)
    entries = [format_size(size) for size in shape]
    return f"({entries[0]},)" if len(entries) == 1 else f"({', '.join(entries)})"


def max_int(size: Size) -> int:
    """The largest value `size` takes over its variables' ranges (what memory is allocated for)."""
    return size if isinstance(size, int) else int(size.vmax)


def max_numel(shape: Iterable[Size]) -> int:
    """The largest element count of `shape` over its variables' ranges (its product for an int shape)."""
    count = math.prod(shape)
    return count if isinstance(count, int) else int(count.vmax)


def settle(size: Size) -> Size:
    """`size` in its simplest form: a symbolic expression simplified, and an int when it is a constant.

    The expression is simplified unbound and bound again, so its form does not depend on the values: the simplifier
    orders a sum's terms by their nodes, and a BIND node holds its value (start + length and length + start would
    otherwise be two structures, two plans and two kernels, depending on the values)."""
    if isinstance(size, int):
        return size
    if size.op is Ops.BIND:  # a bound variable itself (x[:v]): already in its simplest form
        return size
    try:
        unbound, values = unbind(size)
    except ValueError:  # one variable at two values: check_symbolic_size names it
        unbound, values = size, {}
    simple = unbound.simplify()
    if simple.op is Ops.CONST:
        return int(simple.arg)
    if not values:
        return simple
    return simple.substitute(
        {
            node: node.bind(values[node.arg.name])
            for node in simple.toposort()
            if node.op is Ops.DEFINE_VAR and node.arg.name in values
        }
    )


def _as_uop(size: Size) -> UOp:
    return size if isinstance(size, UOp) else UOp.const(dtypes.index, size)


def sizes_equal(first: Size, second: Size) -> bool:
    """True when two sizes are equal for every value of their variables (provably, by the simplifier)."""
    if isinstance(first, int) and isinstance(second, int):
        return first == second
    difference = (_as_uop(first) - _as_uop(second)).simplify()
    return difference.op is Ops.CONST and difference.arg == 0


def provably_le(first: Size, second: Size) -> bool:
    """True when `first <= second` for every value of their variables."""
    if isinstance(first, int) and isinstance(second, int):
        return first <= second
    return int((_as_uop(second) - _as_uop(first)).simplify().vmin) >= 0


def unbind(ast: UOp) -> tuple[UOp, dict[str, int]]:
    """`ast` with each BIND replaced by its DEFINE_VAR, and the bound values by variable name.

    ValueError when one variable is bound to two values in `ast`.
    """
    mapping: dict[UOp, UOp] = {}
    values: dict[str, int] = {}
    for node in ast.toposort():
        if node.op is Ops.BIND:
            variable, value = node.src[0], node.src[1].arg
            if values.setdefault(variable.arg.name, value) != value:
                raise ValueError(
                    f"variable {variable.arg.name!r} is bound to both {values[variable.arg.name]} and {value} "
                    "in one kernel"
                )
            mapping[node] = variable
    return ast.substitute(mapping), values


def shape_values(shape: Iterable[Size]) -> dict[str, int]:
    """The bound value of each variable in `shape`, by name."""
    values: dict[str, int] = {}
    for size in shape:
        if not isinstance(size, int):
            values.update(unbind(size)[1])
    return values


def shape_structure(shape: Iterable[Size]) -> tuple[Size, ...]:
    """`shape` with its variables unbound: equal for two shapes that differ only in their variables' values."""
    return tuple(size if isinstance(size, int) else unbind(size)[0] for size in shape)


def rebind(size: Size, values: Mapping[str, int]) -> Size:
    """`size` with each variable named in `values` bound to that value instead (the others keep theirs)."""
    if isinstance(size, int):
        return size
    mapping = {
        node: node.src[0].bind(values[node.src[0].arg.name])
        for node in size.toposort()
        if node.op is Ops.BIND and node.src[0].arg.name in values
    }
    return size.substitute(mapping) if mapping else size


def _map_sizes(arg: object, convert: Callable[[UOp], UOp]) -> object:
    """A movement op's `arg` (sizes, or (start, end) pairs) with `convert` applied to each symbolic entry."""
    if isinstance(arg, UOp):
        return convert(arg)
    if type(arg) is tuple:
        return tuple([_map_sizes(entry, convert) for entry in arg])
    return arg


def _holds_size(arg: object) -> bool:
    # a tensor-graph arg holds symbolic sizes only as UOps inside (nested) tuples: (n, 4), ((0, n), (0, 4))
    if type(arg) is not tuple:
        return False
    return any(isinstance(entry, UOp) or (type(entry) is tuple and _holds_size(entry)) for entry in arg)


def _map_graph(roots: tuple[UOp, ...], convert: Callable[[UOp], UOp]) -> tuple[UOp, ...]:
    """`roots` rebuilt with `convert` applied to every symbolic size in their nodes' args (unchanged nodes kept)."""
    mapped: dict[UOp, UOp] = {}
    for node in UOp(Ops.SINK, src=roots).toposort():
        sources = tuple([mapped[source] for source in node.src])
        arg = _map_sizes(node.arg, convert) if _holds_size(node.arg) else node.arg
        changed = arg is not node.arg or any(new is not old for new, old in zip(sources, node.src))
        mapped[node] = UOp(node.op, node.dtype, sources, arg, node.tag) if changed else node
    return tuple(mapped[root] for root in roots)


def graph_unbind(roots: tuple[UOp, ...]) -> tuple[tuple[UOp, ...], dict[str, int]] | None:
    """A tensor graph's structure without its variables' values: `roots` with every BIND in a size (a movement op's
    arg) replaced by its DEFINE_VAR, and the values by name. Two graphs that differ only in the values give the same
    roots (the key of a plan that serves every value). None when no size holds a variable, or when one variable is
    bound to two values (then the graph is only what it is for these values)."""
    values: dict[str, int] = {}
    conflict = False

    def convert(size: UOp) -> UOp:
        nonlocal conflict
        try:
            unbound, found = unbind(size)
        except ValueError:
            conflict = True
            return size
        for name, value in found.items():
            conflict = conflict or values.setdefault(name, value) != value
        return unbound

    unbound_roots = _map_graph(roots, convert)
    return None if conflict or not values else (unbound_roots, values)


def graph_rebind(roots: tuple[UOp, ...], values: Mapping[str, int]) -> tuple[UOp, ...]:
    """`roots` with each variable named in `values` bound to that value in every size of their nodes' args."""
    return _map_graph(roots, lambda size: cast(UOp, rebind(size, values)))


def _evaluate(size: UOp, values: Mapping[UOp, int]) -> int:
    from kiln.uops import sym_infer

    return sym_infer(size, {variable.arg.name: value for variable, value in values.items()})
