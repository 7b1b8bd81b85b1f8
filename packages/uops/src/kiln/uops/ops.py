"""The operations of the IR (`Ops`) and the named groups of them (`GroupOp`)."""

from __future__ import annotations

import enum
from typing import Final

from kiln.uops.ir_enum import IREnum


class Ops(IREnum):
    """Every operation a UOp can perform, from the tensor graph down to a rendered program."""

    # tensor graph
    BUFFER = enum.auto()
    DEVICE = enum.auto()
    COPY = enum.auto()
    CONTIGUOUS = enum.auto()
    DETACH = enum.auto()
    ASSIGN = enum.auto()
    AFTER = enum.auto()
    MULTI = enum.auto()  # one tensor over several devices: one source per device, arg the split axis or None
    # movement
    RESHAPE = enum.auto()
    PERMUTE = enum.auto()
    EXPAND = enum.auto()
    PAD = enum.auto()
    SHRINK = enum.auto()
    FLIP = enum.auto()
    REDUCE_AXIS = enum.auto()

    # kernel structure
    SINK = enum.auto()
    GROUP = enum.auto()
    DEFINE_GLOBAL = enum.auto()
    DEFINE_LOCAL = enum.auto()
    DEFINE_REG = enum.auto()
    DEFINE_VAR = enum.auto()
    BIND = enum.auto()
    SPECIAL = enum.auto()
    RANGE = enum.auto()
    END = enum.auto()
    REDUCE = enum.auto()
    INDEX = enum.auto()
    LOAD = enum.auto()
    STORE = enum.auto()
    BARRIER = enum.auto()
    IF = enum.auto()
    ENDIF = enum.auto()
    VECTORIZE = enum.auto()
    GEP = enum.auto()
    CAT = enum.auto()
    VCONST = enum.auto()
    CONST = enum.auto()
    CAST = enum.auto()
    BITCAST = enum.auto()
    WMMA = enum.auto()
    CONTRACT = enum.auto()
    UNROLL = enum.auto()

    # unary ALU
    EXP2 = enum.auto()
    LOG2 = enum.auto()
    SIN = enum.auto()
    SQRT = enum.auto()
    RECIPROCAL = enum.auto()
    NEG = enum.auto()
    TRUNC = enum.auto()

    # binary ALU; IDIV and MOD have C semantics (truncate toward zero, MOD takes the dividend's sign)
    ADD = enum.auto()
    SUB = enum.auto()
    MUL = enum.auto()
    FDIV = enum.auto()
    IDIV = enum.auto()
    MOD = enum.auto()
    MAX = enum.auto()
    CMPLT = enum.auto()
    CMPNE = enum.auto()
    CMPEQ = enum.auto()
    AND = enum.auto()
    OR = enum.auto()
    XOR = enum.auto()
    SHL = enum.auto()
    SHR = enum.auto()
    POW = enum.auto()
    THREEFRY = enum.auto()

    # ternary ALU
    WHERE = enum.auto()
    MULACC = enum.auto()

    # program stages (built and read only by codegen)
    PROGRAM = enum.auto()
    LINEAR = enum.auto()
    SOURCE = enum.auto()
    BINARY = enum.auto()

    def __lt__(self, other: Ops) -> bool:
        # a total order on ops lets canonical orderings sort by op
        return self.value < other.value


class GroupOp:
    """Named sets of ops that passes test membership against."""

    Unary: Final = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
    Binary: Final = frozenset(
        {
            Ops.ADD,
            Ops.SUB,
            Ops.MUL,
            Ops.FDIV,
            Ops.IDIV,
            Ops.MOD,
            Ops.MAX,
            Ops.CMPLT,
            Ops.CMPNE,
            Ops.CMPEQ,
            Ops.AND,
            Ops.OR,
            Ops.XOR,
            Ops.SHL,
            Ops.SHR,
            Ops.POW,
            Ops.THREEFRY,
        }
    )
    Ternary: Final = frozenset({Ops.WHERE, Ops.MULACC})
    ALU: Final = Unary | Binary | Ternary
    Elementwise: Final = ALU | {Ops.CAST, Ops.BITCAST}
    Commutative: Final = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    Associative: Final = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX})
    Comparison: Final = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    Movement: Final = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Idempotent: Final = frozenset({Ops.OR, Ops.AND, Ops.MAX})
    Irreducible: Final = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE})
    Program: Final = frozenset({Ops.PROGRAM, Ops.LINEAR, Ops.SOURCE, Ops.BINARY})
    Defines: Final = frozenset({Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG})
    Bitwise: Final = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
    # ops where f(0) != 0 (or is undefined): padding their input with zeros does not pad their output with zeros
    UnsafePad: Final = frozenset({Ops.RECIPROCAL, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.POW})
