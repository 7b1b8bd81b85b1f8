"""Estimates of a program's work: floating/integer operations and bytes moved, symbolic where shapes are."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kiln.uops import GroupOp, Ops, PtrDType, UOp, dtypes, sym_infer

Size = int | UOp
"""A count that is an int, or a symbolic index expression over the kernel's variables."""


def _as_index(expression: UOp) -> UOp:
    # the linear program computes sizes in a machine int; estimates are exact integers (dtypes.index)
    rebuilt: dict[UOp, UOp] = {}
    for node in expression.toposort():
        if _exact_integer_cast(node):
            rebuilt[node] = rebuilt[node.src[0]]  # a hardware index's size, narrowed to int32: the same integer
            continue
        src = tuple(rebuilt[s] for s in node.src)
        dtype = dtypes.index if dtypes.is_int(node.dtype) else node.dtype
        rebuilt[node] = UOp(node.op, dtype, src, node.arg) if node.op is not Ops.CONST else UOp.const(dtype, node.arg)
    return rebuilt[expression]


def _exact_integer_cast(node: UOp) -> bool:
    if node.op is not Ops.CAST or not (dtypes.is_int(node.dtype) and dtypes.is_int(node.src[0].dtype)):
        return False
    source = node.src[0]
    return bool(dtypes.min(node.dtype) <= source.vmin and source.vmax <= dtypes.max(node.dtype))


def size_value(size: UOp) -> Size:
    """A RANGE or SPECIAL size as an int, or as an exact symbolic index expression."""
    return size.arg if size.op is Ops.CONST else _as_index(size)


def _multiply(a: Size, b: Size) -> Size:
    if isinstance(a, UOp):
        return (a * b).simplify()
    if isinstance(b, UOp):
        return (b * a).simplify()
    return a * b


def _add(a: Size, b: Size) -> Size:
    if isinstance(a, UOp):
        return (a + b).simplify()
    if isinstance(b, UOp):
        return (b + a).simplify()
    return a + b


def _memory_scope_of(index: UOp) -> str | None:
    pointer = index.src[0]
    while pointer.op is Ops.AFTER:
        pointer = pointer.src[0]
    return {Ops.DEFINE_GLOBAL: "global", Ops.DEFINE_LOCAL: "local"}.get(pointer.op)


@dataclass(frozen=True)
class Estimates:
    """Work of one program run: `flops` (ALU ops on data, per lane), `global_memory_bytes` and
    `local_memory_bytes` (bytes loaded plus stored, counting every access). Index arithmetic is not counted."""

    flops: Size = 0
    global_memory_bytes: Size = 0
    local_memory_bytes: Size = 0

    def __add__(self, other: Estimates) -> Estimates:
        return Estimates(
            _add(self.flops, other.flops),
            _add(self.global_memory_bytes, other.global_memory_bytes),
            _add(self.local_memory_bytes, other.local_memory_bytes),
        )

    def evaluate(self, var_vals: Mapping[str, int]) -> tuple[int, int, int]:
        """(flops, global bytes, local bytes) for concrete variable values."""
        return (
            sym_infer(self.flops, var_vals),
            sym_infer(self.global_memory_bytes, var_vals),
            sym_infer(self.local_memory_bytes, var_vals),
        )

    @classmethod
    def from_uops(cls, uops: list[UOp]) -> Estimates:
        """Count the work of a linear program: each op times the trip counts of its loops and the thread count."""
        data = _data_nodes(uops)
        threads: Size = 1
        seen_specials: set[str] = set()
        for uop in uops:
            if uop.op is Ops.SPECIAL and uop.arg.name not in seen_specials:
                seen_specials.add(uop.arg.name)
                threads = _multiply(threads, size_value(uop.src[0]))
        trips: list[Size] = [threads]
        flops: Size = 0
        memory: dict[str, Size] = {"global": 0, "local": 0}
        for uop in uops:
            if uop.op is Ops.RANGE:
                trips.append(_multiply(trips[-1], size_value(uop.src[0])))
            elif uop.op is Ops.END:
                trips.pop()
            elif uop.op in GroupOp.ALU and uop in data:
                flops = _add(flops, _multiply(trips[-1], uop.dtype.count))
            elif uop.op is Ops.WMMA:
                # a multiply and an add per term of the tile product, shared by the lanes of the warp
                m, n, k = uop.arg.dims
                flops = _add(flops, _multiply(trips[-1], 2 * m * n * k // uop.arg.threads))
            elif uop.op in (Ops.LOAD, Ops.STORE):
                scope = _memory_scope_of(uop.src[0])
                if scope is not None:
                    pointer = uop.src[0].dtype
                    assert isinstance(pointer, PtrDType)
                    memory[scope] = _add(memory[scope], _multiply(trips[-1], pointer.base.nbytes))
        return cls(flops, memory["global"], memory["local"])


def _data_nodes(uops: list[UOp]) -> set[UOp]:
    # the ops computing values that are stored: walk back from stored values, not into addresses
    found: set[UOp] = set()
    stack = [uop.src[1] for uop in uops if uop.op is Ops.STORE]
    while stack:
        node = stack.pop()
        if node in found or node.op in (Ops.INDEX, Ops.LOAD):
            continue
        found.add(node)
        stack.extend(node.src)
    return found
