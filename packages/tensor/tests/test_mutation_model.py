"""Random programs of writes and reads, run on kiln and on numpy (the model: arrays mutated eagerly in program order).

Each program (float32, or int32 with integer and bitwise operators) keeps a few realized base tensors, views of
them (row, column window, transpose, reshape: numpy views too, so they see writes into their base), lazy
expressions (numpy: a copy of the value when the expression was built, so later writes must not change it) and
runs random steps: whole-tensor assigns whose values read the target and other tensors, setitem with int and slice
indices, in-place operators and methods, realizes of random subsets in random order, and checks of random entries.
Every value kiln shows must equal the model's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.uops import dtypes

DEVICE = "PYTHON"  # the interpreter device: no compiler, so the many small kernels build quickly
SHAPE = (2, 3)
PROGRAMS = 260
STEPS = 14


@dataclass
class Entry:
    """One value of the program: the kiln tensor and its model array; `kind` is base, view or lazy."""

    tensor: Tensor
    array: np.ndarray
    kind: str


_VIEWS: list[tuple[str, Callable[[Any], Any]]] = [
    ("row", lambda x: x[1]),
    ("columns", lambda x: x[:, 1:]),
    ("transpose", lambda x: x.T if isinstance(x, np.ndarray) else x.permute(1, 0)),
    ("reshape", lambda x: x.reshape(3, 2)),
    ("flat", lambda x: x.reshape(6)),
]


class Program:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.entries: list[Entry] = []
        self.log: list[str] = []
        for _ in range(self.rng.randint(1, 3)):
            values = np.array([self.rng.randint(-5, 5) for _ in range(6)], np.float32).reshape(SHAPE)
            self.entries.append(Entry(Tensor(values.copy(), device=DEVICE), values, "base"))

    # -- expressions ------------------------------------------------------------------------------------------------
    def _leaf(self, shape: tuple[int, ...]) -> tuple[Tensor | float, np.ndarray | float]:
        size = int(np.prod(shape))
        fitting = [entry for entry in self.entries if entry.array.size == size]
        if not fitting or self.rng.random() < 0.2:
            constant = float(self.rng.choice([-2, -1, 0.5, 1, 3]))
            return constant, constant
        entry = self.rng.choice(fitting)
        return entry.tensor.reshape(*shape) if shape else entry.tensor.reshape(()), entry.array.reshape(shape)

    def expression(self, shape: tuple[int, ...], depth: int = 2) -> tuple[Tensor, np.ndarray]:
        """A computed value of `shape` (never a bare view: at least one arithmetic op at the top)."""
        left, left_array = self._leaf(shape) if depth <= 1 or self.rng.random() < 0.5 else self.expression(shape, 1)
        if not isinstance(left, Tensor):
            left = Tensor.full(shape, left, dtype=dtypes.float32, device=DEVICE)
            left_array = np.full(shape, left_array, np.float32)
        right, right_array = self._leaf(shape)
        operation = self.rng.choice(["add", "sub", "mul", "maximum", "minimum"])
        self.log.append(f"expression {operation}")
        if operation == "add":
            return left + right, np.asarray(left_array + right_array, np.float32)
        if operation == "sub":
            return left - right, np.asarray(left_array - right_array, np.float32)
        if operation == "mul":
            return left * right, np.asarray(left_array * right_array, np.float32)
        if operation == "maximum":
            return left.maximum(right), np.maximum(left_array, right_array).astype(np.float32)
        return left.minimum(right), np.minimum(left_array, right_array).astype(np.float32)

    def bounded(self, shape: tuple[int, ...]) -> tuple[Tensor, np.ndarray]:
        value, array = self.expression(shape)
        return value.clamp(-1000.0, 1000.0), np.clip(array, -1000.0, 1000.0)

    # -- steps ------------------------------------------------------------------------------------------------------
    def step(self) -> None:
        action = self.rng.choice(["assign", "setitem", "inplace", "lazy", "lazy", "view", "realize", "check"])
        getattr(self, action)()

    def assign(self) -> None:
        entry = self.rng.choice(self.entries)
        value, array = self.bounded(entry.array.shape)
        self.log.append(f"assign to {entry.kind}")
        entry.tensor.assign(value)
        entry.array[...] = array

    def setitem(self) -> None:
        entry = self.rng.choice(self.entries)
        size = entry.array.shape[0]
        if self.rng.random() < 0.5:
            index: Any = self.rng.randrange(size)
        else:
            start = self.rng.randrange(size)
            index = slice(start, self.rng.randint(start + 1, size))
        selected = entry.array[index].shape
        self.log.append(f"setitem {entry.kind} {index}")
        if not selected or self.rng.random() < 0.3:
            constant = float(self.rng.randint(-9, 9))
            entry.tensor[index] = constant
            entry.array[index] = constant
        else:
            value, array = self.bounded(selected)
            entry.tensor[index] = value
            entry.array[index] = array

    def inplace(self) -> None:
        entry = self.rng.choice(self.entries)
        shape = entry.array.shape
        operation = self.rng.choice(["+=", "-=", "*=", "add_", "mul_", "clamp_", "fill_", "zero_", "copy_"])
        self.log.append(f"inplace {operation} on {entry.kind}")
        operand, array = self.bounded(shape)
        tensor, model = entry.tensor, entry.array
        if operation == "+=":
            tensor += operand
            model += array
        elif operation == "-=":
            tensor -= operand
            model -= array
        elif operation == "*=":
            tensor *= 0.5
            model *= np.float32(0.5)
        elif operation == "add_":
            tensor.add_(operand)
            model += array
        elif operation == "mul_":
            tensor.mul_(-1.0)
            model *= np.float32(-1.0)
        elif operation == "clamp_":
            tensor.clamp_(-3.0, 4.0)
            np.clip(model, -3.0, 4.0, out=model)
        elif operation == "fill_":
            tensor.fill_(7.0)
            model[...] = 7.0
        elif operation == "zero_":
            tensor.zero_()
            model[...] = 0.0
        else:
            tensor.copy_(operand)
            model[...] = array
        assert entry.tensor is tensor  # an in-place operator returns the tensor itself

    def lazy(self) -> None:
        shape = self.rng.choice([SHAPE, (3,), (6,), (3, 2)])
        value, array = self.expression(shape)
        self.log.append(f"lazy {shape}")
        self.entries.append(Entry(value, array.copy(), "lazy"))

    def view(self) -> None:
        bases = [entry for entry in self.entries if entry.kind == "base"]
        name, make = self.rng.choice(_VIEWS)
        base = self.rng.choice(bases)
        self.log.append(f"view {name}")
        self.entries.append(Entry(make(base.tensor), make(base.array), "view"))

    def realize(self) -> None:
        chosen = self.rng.sample(self.entries, self.rng.randint(1, len(self.entries)))
        self.log.append(f"realize {len(chosen)}")
        Tensor.realize_all(*[entry.tensor for entry in chosen])

    def check(self, entry: Entry | None = None) -> None:
        entry = entry or self.rng.choice(self.entries)
        self.log.append(f"check {entry.kind}")
        np.testing.assert_allclose(
            entry.tensor.numpy(), entry.array, rtol=1e-5, atol=1e-3, err_msg="\n".join(self.log[-12:])
        )


class IntegerProgram(Program):
    """The same programs over int32 tensors, with integer and bitwise operators (values kept small by masks)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        for entry in self.entries:
            entry.array = entry.array.astype(np.int32)
            entry.tensor = Tensor(entry.array.copy(), device=DEVICE)

    def _leaf(self, shape: tuple[int, ...]) -> tuple[Tensor | float, np.ndarray | float]:
        leaf, array = super()._leaf(shape)
        if isinstance(leaf, float):
            return int(leaf * 2), int(leaf * 2)
        return leaf, array

    def expression(self, shape: tuple[int, ...], depth: int = 2) -> tuple[Tensor, np.ndarray]:
        left, left_array = self._leaf(shape) if depth <= 1 or self.rng.random() < 0.5 else self.expression(shape, 1)
        if not isinstance(left, Tensor):
            left = Tensor.full(shape, left, dtype=dtypes.int32, device=DEVICE)
            left_array = np.full(shape, left_array, np.int32)
        right, right_array = self._leaf(shape)
        operation = self.rng.choice(["add", "sub", "mul", "and", "or", "xor"])
        self.log.append(f"integer expression {operation}")
        result, model = {
            "add": (lambda: (left + right, left_array + right_array)),
            "sub": (lambda: (left - right, left_array - right_array)),
            "mul": (lambda: (left * right, left_array * right_array)),
            "and": (lambda: (left & right, left_array & right_array)),
            "or": (lambda: (left | right, left_array | right_array)),
            "xor": (lambda: (left ^ right, left_array ^ right_array)),
        }[operation]()
        return result & 1023, np.asarray(model, np.int32) & 1023

    def bounded(self, shape: tuple[int, ...]) -> tuple[Tensor, np.ndarray]:
        return self.expression(shape)

    def setitem(self) -> None:
        entry = self.rng.choice(self.entries)
        index = self.rng.randrange(entry.array.shape[0])
        constant = self.rng.randint(-9, 9)
        self.log.append(f"setitem {entry.kind} {index}")
        entry.tensor[index] = constant
        entry.array[index] = constant

    def inplace(self) -> None:
        entry = self.rng.choice(self.entries)
        operation = self.rng.choice(["+=", "-=", "//=", "%=", "&=", "|=", "^=", "<<=", ">>="])
        self.log.append(f"integer inplace {operation} on {entry.kind}")
        operand, array = self.bounded(entry.array.shape)
        tensor, model = entry.tensor, entry.array
        if operation == "+=":
            tensor += operand
            model += array
        elif operation == "-=":
            tensor -= operand
            model -= array
        elif operation == "//=":
            tensor //= 3
            model //= 3
        elif operation == "%=":
            tensor %= 5
            model %= 5
        elif operation == "&=":
            tensor &= operand
            model &= array
        elif operation == "|=":
            tensor |= operand
            model |= array
        elif operation == "^=":
            tensor ^= operand
            model ^= array
        elif operation == "<<=":
            tensor <<= 1
            model <<= 1
        else:
            tensor >>= 1
            model >>= 1
        assert entry.tensor is tensor

    def check(self, entry: Entry | None = None) -> None:
        entry = entry or self.rng.choice(self.entries)
        self.log.append(f"check {entry.kind}")
        np.testing.assert_array_equal(entry.tensor.numpy(), entry.array, err_msg="\n".join(self.log[-12:]))


def run_program(seed: int, kind: type[Program] = Program) -> None:
    program = kind(seed)
    for _ in range(STEPS):
        program.step()
    for entry in program.entries:
        program.check(entry)


@pytest.mark.parametrize("block", range(10))
def test_random_programs_match_the_numpy_model(block: int) -> None:
    for seed in range(block * PROGRAMS // 10, (block + 1) * PROGRAMS // 10):
        run_program(seed)


@pytest.mark.parametrize("block", range(4))
def test_random_integer_programs_match_the_numpy_model(block: int) -> None:
    for seed in range(block * 25, (block + 1) * 25):
        run_program(seed, IntegerProgram)


def test_pinned_seed_39_after_the_seeds_before_it() -> None:
    # seed 39 failed only after seeds 0..38 had run in the same process: a constant expression realized into a buffer
    # that a later in-place op wrote was reused by an equal expression (see test_mutation.py for the minimal case)
    for seed in range(40):
        run_program(seed)
