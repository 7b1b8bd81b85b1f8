"""A model of the PTX subset the PTX renderer emits, executed in Python, to check what its kernels compute.

Each instruction follows NVIDIA's PTX ISA reference as read for the renderer (integer ops wrap at the register
width, shifts clamp their count, `cvt` to a narrower integer keeps the low bits and `cvt.sN.sM` sign-extends the low
M bits, `selp d, a, b, p` is p ? a : b, `max.f32` ignores a NaN, `setp.neu` is true for NaN, `cvt.rzi` truncates,
`cvt.rn.f16x2.f32 d, a, b` puts a in the upper half). Threads run one after another, so kernels with barriers are
not modelled, except that a kernel with `mma.sync` runs each warp's lanes up to their next mma together: the warp
then executes it (`ptx_mma.py`) and its lanes go on. Integer registers hold unsigned bit patterns, float registers
Python floats (float32 values rounded).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Iterator
from fractions import Fraction

import numpy as np
from ptx_mma import WARP, f16_bits_to_float, mma_m16n8k16, pack_pair

_WIDTH = {"%r": 32, "%rd": 64, "%h": 16}
_FLOAT_TYPES = {"f32", "f64"}


def _bits(type_name: str) -> int:
    return int(re.sub(r"\D", "", type_name) or 1)


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _f32(value: float) -> float:
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def _float_bits(value: float, bits: int) -> int:
    return int.from_bytes(struct.pack("<d" if bits == 64 else "<f", value), "little")


def _bits_float(value: int, bits: int) -> float:
    return float(
        struct.unpack("<d" if bits == 64 else "<f", (value & ((1 << bits) - 1)).to_bytes(bits // 8, "little"))[0]
    )


class PTXModel:
    """One parsed kernel: run it over a grid with numpy buffers and integer variables."""

    def __init__(self, source: str) -> None:
        self.parameters = re.findall(r"\.param \.\w+ (\w+)", source)
        self.arrays = {
            name: int(size) for _, name, size in re.findall(r"\.(shared|local) \.align 16 \.b8 (\w+)\[(\d+)\]", source)
        }
        body = source[source.index("{", source.index(".entry")) + 1 : source.rindex("}")]
        self.instructions: list[str] = []
        self.labels: dict[str, int] = {}
        for raw in body.splitlines():
            line = raw.strip()
            if not line or line.startswith((".reg", ".shared", ".local", "//")):
                continue
            if line.endswith(":"):
                self.labels[line[:-1]] = len(self.instructions)
                continue
            self.instructions.append(line.rstrip(";"))

    def run(
        self,
        buffers: list[np.ndarray],
        var_vals: dict[str, int],
        global_size: tuple[int, int, int],
        local_size: tuple[int, int, int],
    ) -> None:
        """Run every thread of the grid; buffers (by slot) are modified in place."""
        memory: dict[int, bytearray] = {}
        views = [array.view(np.uint8).reshape(-1) for array in buffers]
        params: dict[str, int] = {}
        for name in self.parameters:
            params[name] = (int(name[4:]) + 1) << 40 if name.startswith("data") else var_vals[name[4:]]
        warps = any(line.startswith("mma.") for line in self.instructions)
        for gz in range(global_size[2]):
            for gy in range(global_size[1]):
                for gx in range(global_size[0]):
                    shared = {name: bytearray(size) for name, size in self.arrays.items()}
                    threads = [
                        Thread(self, views, params, shared, memory, (gx, gy, gz), (tx, ty, tz))
                        for tz in range(local_size[2])
                        for ty in range(local_size[1])
                        for tx in range(local_size[0])
                    ]  # in linear thread id order: lane = id % 32
                    if not warps:
                        for thread in threads:
                            thread.run()
                    for first in range(0, len(threads) if warps else 0, WARP):
                        _run_warp(threads[first : first + WARP])


class Thread:
    """The registers and program counter of one thread."""

    def __init__(
        self,
        model: PTXModel,
        views: list[np.ndarray],
        params: dict[str, int],
        shared: dict[str, bytearray],
        memory: dict[int, bytearray],
        block: tuple[int, int, int],
        thread: tuple[int, int, int],
    ) -> None:
        self.model, self.views, self.params, self.shared = model, views, params, shared
        self.symbols = {name: (number + 1) << 32 for number, name in enumerate(sorted(shared))}
        self.special = {"%ctaid": block, "%tid": thread}
        self.registers: dict[str, object] = {}

    # ---- operands ----

    def value(self, operand: str, type_name: str) -> object:
        operand = operand.strip()
        if operand.startswith("%"):
            if operand.split(".")[0] in self.special:
                base, axis = operand.split(".")
                return self.special[base]["xyz".index(axis)]
            return self.registers[operand]
        if operand.startswith("0f"):
            return _bits_float(int(operand[2:], 16), 32)
        if operand.startswith("0d"):
            return _bits_float(int(operand[2:], 16), 64)
        if operand in self.symbols:
            return self.symbols[operand]
        number = int(operand)
        return float(number) if type_name in _FLOAT_TYPES else number & ((1 << max(8, _bits(type_name))) - 1)

    def set(self, register: str, value: object) -> None:
        prefix = re.match(r"%[a-z]+", register)
        assert prefix is not None
        kind = prefix.group(0)
        if kind == "%f":
            value = _f32(float(value)) if isinstance(value, float) else _bits_float(int(value), 32)  # type: ignore[call-overload]
        elif kind == "%fd":
            value = float(value) if isinstance(value, float) else _bits_float(int(value), 64)  # type: ignore[call-overload]
        elif kind in _WIDTH:
            bits = _WIDTH[kind]
            value = _float_bits(value, bits) if isinstance(value, float) else int(value) & ((1 << bits) - 1)  # type: ignore[call-overload]
        else:
            value = bool(value)
        self.registers[register] = value

    def int_of(self, operand: str, type_name: str) -> int:
        raw = self.value(operand, type_name)
        bits = _bits(type_name)
        if isinstance(raw, float):
            raw = _float_bits(raw, bits)
        raw = int(raw) & ((1 << bits) - 1)  # type: ignore[call-overload]
        return _signed(raw, bits) if type_name.startswith("s") else raw

    # ---- memory ----

    def locate(self, address: int) -> tuple[bytearray | np.ndarray, int]:
        if address >= 1 << 40:
            return self.views[(address >> 40) - 1], address & ((1 << 40) - 1)
        for name, base in self.symbols.items():
            if base <= address < base + (1 << 32):
                return self.shared[name], address - base
        raise AssertionError(f"address {address:#x} is in no buffer")

    def load(self, address: int, type_name: str) -> object:
        memory, offset = self.locate(address)
        size = max(1, _bits(type_name) // 8)
        data = bytes(memory[offset : offset + size])
        assert len(data) == size, f"load past the end at {offset}"
        if type_name in _FLOAT_TYPES:
            return _bits_float(int.from_bytes(data, "little"), _bits(type_name))
        value = int.from_bytes(data, "little")
        return _signed(value, size * 8) if type_name.startswith("s") else value

    def store(self, address: int, type_name: str, value: object) -> None:
        memory, offset = self.locate(address)
        size = max(1, _bits(type_name) // 8)
        if type_name in _FLOAT_TYPES:
            bits = _float_bits(float(value), size * 8)  # type: ignore[arg-type]
        else:
            bits = int(value) & ((1 << (size * 8)) - 1)  # type: ignore[call-overload]
        assert offset + size <= len(memory), f"store past the end at {offset}"
        memory[offset : offset + size] = list(bits.to_bytes(size, "little"))

    def address(self, operand: str) -> int:
        inside = operand.strip()[1:-1]
        base, _, offset = inside.partition("+")
        if base in self.params:
            raise AssertionError("ld.param is handled separately")
        return int(self.value(base, "u64")) + (int(offset) if offset else 0)  # type: ignore[call-overload]

    # ---- execution ----

    def run(self) -> None:
        """Run the thread alone to its end (a warp instruction raises: see `_run_warp`)."""
        for pc, _, _ in self.steps():
            raise AssertionError(f"instruction {pc} needs its whole warp: {self.model.instructions[pc]}")

    def steps(self) -> Iterator[tuple[int, str, list[str]]]:
        """Run the thread, stopping before each warp instruction (mma) to yield (pc, opcode, operands); the warp
        executes it and sets the destination registers before the thread resumes."""
        program, labels = self.model.instructions, self.model.labels
        pc, steps = 0, 0
        while pc < len(program):
            steps += 1
            assert steps < 2_000_000, "runaway kernel"
            line = program[pc]
            pc += 1
            if line.startswith("@"):
                guard, line = line.split(" ", 1)
                negate = guard.startswith("@!")
                if bool(self.registers[guard[2:] if negate else guard[1:]]) == negate:
                    continue
            opcode, _, rest = line.partition(" ")
            operands = _split(rest)
            if opcode == "ret":
                return
            if opcode.startswith("bra"):
                pc = labels[operands[0]]
                continue
            if opcode.startswith("mma."):
                yield pc - 1, opcode, operands
                continue
            self.execute(opcode, operands)

    def execute(self, opcode: str, operands: list[str]) -> None:
        parts = opcode.split(".")
        name, type_name = parts[0], parts[-1]
        if name == "ld" and parts[1] == "param":
            self.set(operands[0], self.params[operands[1][1:-1]])
        elif name in ("ld", "st"):
            self._memory(name, parts, operands)
        elif name == "cvta" or name == "bar":
            if name == "cvta":
                self.set(operands[0], self.value(operands[1], "u64"))
        elif name == "mov":
            self._mov(type_name, operands)
        elif name == "setp":
            self.set(
                operands[0],
                _compare(parts[1], self._typed(operands[1], type_name), self._typed(operands[2], type_name)),
            )
        elif name == "selp":
            chosen = operands[1] if self.registers[operands[3]] else operands[2]
            self.set(operands[0], self._typed(chosen, type_name))
        elif name == "testp":
            self.set(operands[0], math.isfinite(float(self.value(operands[1], "f64"))))  # type: ignore[arg-type]
        elif name == "cvt":
            self._cvt(parts, operands)
        else:
            self._arithmetic(name, parts, type_name, operands)

    def _typed(self, operand: str, type_name: str) -> object:
        if type_name in _FLOAT_TYPES:
            return float(self.value(operand, type_name))  # type: ignore[arg-type]
        if type_name == "pred":
            return bool(self.value(operand, type_name))
        return self.int_of(operand, type_name)

    def _memory(self, name: str, parts: list[str], operands: list[str]) -> None:
        type_name = parts[-1]
        lanes = int(parts[2][1:]) if parts[2].startswith("v") else 1
        size = max(1, _bits(type_name) // 8)
        registers_text, address_text = (operands[0], operands[1]) if name == "ld" else (operands[1], operands[0])
        registers = _split(registers_text.strip("{}")) if lanes > 1 else [registers_text]
        address = self.address(address_text)
        for lane, register in enumerate(registers):
            if name == "ld":
                self.set(register, self.load(address + lane * size, type_name))
            else:
                self.store(address + lane * size, type_name, self._typed(register, type_name))

    def _mov(self, type_name: str, operands: list[str]) -> None:
        destination, source = operands
        if destination.startswith("{"):  # unpack low half first
            pieces = _split(destination.strip("{}"))
            bits = _bits(type_name) // len(pieces)
            raw = int(self.int_of(source, "b" + str(_bits(type_name))))
            for number, piece in enumerate(pieces):
                self.set(piece, (raw >> (bits * number)) & ((1 << bits) - 1))
        elif source.startswith("{"):
            pieces = _split(source.strip("{}"))
            bits = _bits(type_name) // len(pieces)
            self.set(destination, sum(self.int_of(p, f"b{bits}") << (bits * n) for n, p in enumerate(pieces)))
        elif type_name == "pred":
            self.set(destination, self.value(source, "pred"))
        elif type_name in _FLOAT_TYPES:
            self.set(destination, float(self.value(source, type_name)))  # type: ignore[arg-type]
        else:
            raw = self.value(source, type_name)
            self.set(destination, raw if isinstance(raw, float) else int(raw))  # type: ignore[call-overload]

    def _cvt(self, parts: list[str], operands: list[str]) -> None:
        modifiers = parts[1:-2]
        target, source = parts[-2], parts[-1]
        if target in ("f16x2", "bf16x2") and modifiers == ["rn"] and source == "f32":
            high, low = (float(self.value(operand, "f32")) for operand in operands[1:3])  # type: ignore[arg-type]
            self.set(operands[0], pack_pair(target, high, low))
            return
        if (target, source) == ("f32", "f16") and not modifiers:
            self.set(operands[0], f16_bits_to_float(self.int_of(operands[1], "b16")))
            return
        if "f16" in (target, source) or "bf16" in (target, source) or target.endswith("x2"):
            raise AssertionError(f"cvt.{'.'.join(parts[1:])} is not modelled")
        value = self._typed(operands[1], source)
        if target in _FLOAT_TYPES:
            if "rzi" in modifiers:
                result: object = math.copysign(math.trunc(value), value) if math.isfinite(value) else value  # type: ignore[arg-type]
            elif isinstance(value, int) and target == "f32":  # one correct rounding, not int -> double -> float
                result = float(np.float32(np.int64(value) if source.startswith("s") else np.uint64(value)))
            else:
                result = float(value)  # type: ignore[arg-type]
            self.set(operands[0], _f32(result) if target == "f32" else result)  # type: ignore[arg-type]
        elif source in _FLOAT_TYPES:
            number = float(value)  # type: ignore[arg-type]
            bits = _bits(target)
            low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if target.startswith("s") else (0, (1 << bits) - 1)
            if math.isnan(number):
                truncated = 0
            elif math.isinf(number):
                truncated = high if number > 0 else low
            else:
                truncated = max(low, min(high, math.trunc(number)))
            self.set(operands[0], truncated)
        else:
            bits = _bits(target)
            raw = int(value) & ((1 << bits) - 1)  # type: ignore[call-overload]
            self.set(operands[0], _signed(raw, bits) if target.startswith("s") else raw)

    def _arithmetic(self, name: str, parts: list[str], type_name: str, operands: list[str]) -> None:
        destination, sources = operands[0], operands[1:]
        if type_name == "pred":
            values = [bool(self.value(s, "pred")) for s in sources]
            results = {
                "and": lambda: values[0] and values[1],
                "or": lambda: values[0] or values[1],
                "xor": lambda: values[0] != values[1],
                "not": lambda: not values[0],
            }
            self.set(destination, results[name]())
            return
        if type_name in _FLOAT_TYPES:
            floats = [float(self.value(s, type_name)) for s in sources]  # type: ignore[arg-type]
            self.set(destination, _float_op(name, floats, type_name))
            return
        bits = _bits(type_name)
        if name == "mul" and parts[1] == "wide":
            a, b = self.int_of(sources[0], type_name), self.int_of(sources[1], type_name)
            self.set(destination, (a * b) & ((1 << (2 * bits)) - 1))
            return
        if name in ("shl", "shr"):
            count = min(self.int_of(sources[1], "u32"), bits)
            a = self.int_of(sources[0], type_name if name == "shr" else f"u{bits}")
            self.set(destination, (a << count) if name == "shl" else (a >> count))
            return
        values_int = [self.int_of(s, type_name) for s in sources]
        operations: dict[str, Callable[[], int]] = {
            "add": lambda: values_int[0] + values_int[1],
            "sub": lambda: values_int[0] - values_int[1],
            "mul": lambda: values_int[0] * values_int[1],
            "max": lambda: max(values_int),
            "min": lambda: min(values_int),
            "neg": lambda: -values_int[0],
            "and": lambda: values_int[0] & values_int[1],
            "or": lambda: values_int[0] | values_int[1],
            "xor": lambda: values_int[0] ^ values_int[1],
            "not": lambda: ~values_int[0],
            "div": lambda: _truncating_division(values_int[0], values_int[1])[0],
            "rem": lambda: _truncating_division(values_int[0], values_int[1])[1],
        }
        self.set(destination, operations[name]())


def _run_warp(threads: list[Thread]) -> None:
    """Run the lanes of one warp: each up to its next mma (or its end); all lanes must meet at the same mma, which
    the warp then executes, writing each lane's D registers."""
    runs = [thread.steps() for thread in threads]
    while True:
        stops = [next(run, None) for run in runs]
        if all(stop is None for stop in stops):
            return
        places = {stop[0] if stop is not None else None for stop in stops}
        assert len(places) == 1 and len(threads) == WARP, f"the lanes of a warp diverge at an mma: {places}"
        _, opcode, operands = next(stop for stop in stops if stop is not None)
        c_type = opcode.split(".")[-1]
        lanes = []
        for thread in threads:
            a, b, c = (_split(operand.strip("{}")) for operand in operands[1:4])
            lanes.append(
                (
                    [thread.int_of(r, "b32") for r in a],
                    [thread.int_of(r, "b32") for r in b],
                    [thread.value(r, "f32") if c_type == "f32" else thread.int_of(r, "b32") for r in c],
                )
            )
        for thread, values in zip(threads, mma_m16n8k16(opcode, lanes)):  # type: ignore[arg-type]
            for register, value in zip(_split(operands[0].strip("{}")), values):
                thread.set(register, value)


def _truncating_division(a: int, b: int) -> tuple[int, int]:
    assert b != 0, "the renderer never divides by zero"
    quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return quotient, a - quotient * b


def _float_op(name: str, values: list[float], type_name: str) -> float:
    with np.errstate(all="ignore"):  # NaN and infinities are expected results here
        return _float_op_quietly(name, values, type_name)


def _float_op_quietly(name: str, values: list[float], type_name: str) -> float:
    a = values[0]
    b = values[1] if len(values) > 1 else 0.0
    if name == "add":
        result = a + b
    elif name == "sub":
        result = a - b
    elif name == "mul":
        result = a * b
    elif name == "div":
        wide = type_name == "f64"
        result = float(np.float64(a) / np.float64(b)) if wide else float(np.float32(a) / np.float32(b))
    elif name == "max":
        # a tie (+0 / -0 included) gives the first operand: the renderer must not rely on max's order of zeros
        result = b if math.isnan(a) else a if math.isnan(b) else max(a, b)
    elif name == "neg":
        result = -a
    elif name == "abs":
        result = abs(a)
    elif name == "sqrt":
        result = float(np.sqrt(np.float64(a))) if type_name == "f64" else float(np.sqrt(np.float32(a)))
    elif name == "rcp":
        wide = type_name == "f64"
        result = float(np.float64(1.0) / np.float64(a)) if wide else float(np.float32(1.0) / np.float32(a))
    elif name == "fma":
        result = _fused_multiply_add(a, b, values[2], type_name)
    else:
        raise AssertionError(f"float op {name} is not modelled")
    if type_name == "f32":
        return float(np.float32(result)) if math.isfinite(result) or math.isnan(result) else result
    return result


def _fused_multiply_add(a: float, b: float, c: float, type_name: str) -> float:
    """fma.rn: a*b+c computed exactly (fractions), then rounded once to nearest-even in the register's format."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c  # infinities and NaN: the unfused rules agree
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:  # IEEE 754: -0 only when both addends are zeros of negative sign
        negative_product = math.copysign(1.0, a) * math.copysign(1.0, b) < 0
        return -0.0 if a * b == 0 and c == 0 and negative_product and math.copysign(1.0, c) < 0 else 0.0
    try:
        nearest = float(exact)  # Fraction -> float rounds correctly to float64
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
    if type_name == "f64":
        return nearest
    guess = np.float32(nearest)  # may be one step off (double rounding): the nearest of three candidates wins
    if not np.isfinite(guess):
        return float(guess)
    candidates = [guess, np.nextafter(guess, np.float32(np.inf)), np.nextafter(guess, np.float32(-np.inf))]
    finite = [value for value in candidates if np.isfinite(value)]
    best = min(finite, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.float32(v).view(np.uint32)) & 1))
    return float(best)


def _compare(comparison: str, a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        x, y = float(a), float(b)  # type: ignore[arg-type]
        unordered = math.isnan(x) or math.isnan(y)
        if comparison == "neu":
            return unordered or x != y
        if unordered:
            return False
    else:
        x, y = a, b  # type: ignore[assignment]
    return {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y, "ne": x != y}[comparison]


def _split(text: str) -> list[str]:
    """Operands separated by commas outside braces."""
    pieces, depth, current = [], 0, ""
    for character in text:
        if character == "{":
            depth += 1
        elif character == "}":
            depth -= 1
        if character == "," and depth == 0:
            pieces.append(current.strip())
            current = ""
        else:
            current += character
    if current.strip():
        pieces.append(current.strip())
    return pieces
