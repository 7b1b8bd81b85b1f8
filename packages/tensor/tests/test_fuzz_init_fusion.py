"""Differential fuzzer of initialisers and random tensors fused with their consumers (issue 36), on every CPU
renderer: the LLVM IR and C renderers of the CPU device (knob CPU_RENDERER) and the PYTHON device.

A program, drawn from `random.Random(seed)`, makes its sources: lazy random tensors (Tensor.rand, randn, uniform,
normal, randint), lazy initialisers (scaled_uniform, glorot_uniform, kaiming_uniform, kaiming_normal) or lazy
constant-built ones (arange, eye, full, linspace), parameters of nn.init (realized when made, as layers make them),
nn layers (nn.Embedding, nn.Linear) applied to lazy random inputs, integer indices (lazy randint or uploaded); and
uses them in the same lazy graph: a gather (integer-tensor indexing, Tensor.gather, nn.Embedding on random indices),
a matmul (or nn.Linear), a reduction, integer arithmetic, then up to three of elementwise math, reductions (sum /
amax / amin / mean over an axis or all), a normalisation reading its input twice, another matmul. Sizes are drawn
so that some kernels do 2**14 iterations or more (the CPU heuristic then spreads them over cores: a SPECIAL core_id)
and gathers index with int64 offsets (a loaded index times a row length): the pair issue 36 broke. The PYTHON
device gets programs of at most 2**15 elements per tensor (its interpreter is slower), the CPU ones 2**18.

Oracle, independent of fusion: `Tensor.manual_seed(seed)`, then each source is made and realized alone (`numpy()`),
in the same order as the fused program makes them, so each draws the same Threefry call numbers; numpy computes the
program's ops on those arrays in float64; the fused program, built again after the same `manual_seed`, must match:
integers exactly, floats to 2e-5 of each element's magnitude (`Step.magnitude`: the sum of the absolute values of
the terms it adds). Programs run unchecked (CHECK=False, the default outside tests): checked mode reads index
tensors first, which realizes a random index apart from its gather.

CI runs `PROGRAMS` programs (seeds 0 .. PROGRAMS-1) on each renderer and the `PINNED` seeds on theirs, each
renderer in an Engine of its own (an engine keeps the renderer it first built): about 27 s in one process with the
compile cache empty (`-n 0 --durations=5`), 10 s with it warm. The long form:
`KILN_INIT_FUSION_FUZZ=400 uv run pytest packages/tensor/tests/test_fuzz_init_fusion.py -n 2` runs seeds 0 .. 399
on every renderer. A seed that ever fails is pinned in `PINNED` with what it found. What a seed draws depends on
this generator: a change to it changes the pinned programs too (find the failing ones again and pin those).
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes, nn
from kiln.tensor.realize import Engine, use_engine
from kiln.uops import Context, Ops

PROGRAMS = int(os.environ.get("KILN_INIT_FUSION_FUZZ", "9"))
PINNED: dict[str, tuple[int, ...]] = {
    # before the fix of issue 36 (codegen's index dtype pass typed SPECIALs int64): a kernel on several cores with
    # int64 offsets, which LLVM rejected ("'%core_id' defined with type 'i32' but expected 'i64'"); and 168,
    # Tensor.normal(16, 64, 3).amax(), on which LLVM 22's CRC loop recognizer never finished (LLVM_OPTIONS of
    # kiln.renderers.toolchain)
    "llvm": (
        *(7, 11, 16, 25, 36, 41, 47, 60, 65, 73, 75, 98, 131, 148, 168, 184, 186, 204, 210, 223, 251, 261, 262),
        *(280, 301, 315, 320, 321, 344, 349, 374, 395),
    ),
    # the fuzzer's own tolerance, before `Step.magnitude`: a sum that cancels to ~0 was held to the rounding of its
    # result instead of its terms
    "python": (10,),
}
"""Seeds that once failed, by target, with what they found; each runs on its target in CI."""

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Target:
    """Where a program runs: a device and, for the CPU, the renderer knob; `budget` caps any tensor's elements."""

    name: str
    device: str
    renderer: str
    budget: int
    available: bool


TARGETS = [
    Target("llvm", "CPU", "llvm", 2**18, importlib.util.find_spec("llvmlite") is not None),
    Target("c", "CPU", "c", 2**18, any(shutil.which(name) for name in ("clang", "gcc"))),
    Target("python", "PYTHON", "", 2**15, True),  # the interpreter: smaller programs keep it quick
]


@pytest.fixture(scope="module")
def engines() -> dict[str, Engine]:
    return {target.name: Engine() for target in TARGETS}


@contextmanager
def running(target: Target, engine: Engine) -> Iterator[None]:
    """`target`'s renderer knob, unchecked indexing and the target's own engine; skips a missing toolchain."""
    if not target.available:
        pytest.skip(f"the {target.name} renderer's toolchain is not installed")
    with Context(CPU_RENDERER=target.renderer, CHECK=False), use_engine(engine):
        yield


# ---- sources ---------------------------------------------------------------------------------------------------

PARAMETER_INITS = ("init.normal", "init.uniform", "init.kaiming_uniform", "init.xavier_uniform")
"""nn.init's initialisers: a parameter realized when it is made (layers call them in their constructors)."""

FLOAT_INITS = (
    "rand",
    "randn",
    "uniform",
    "normal",
    "scaled_uniform",
    "glorot_uniform",
    "kaiming_uniform",
    "kaiming_normal",
    "arange",
    "eye",
    "full",
    "linspace",
)


@dataclass(frozen=True)
class Source:
    """One source of a program. `kind`: a lazy float initialiser of FLOAT_INITS, "randint" (values low..high-1),
    "host" (integers from the program's own generator, uploaded), a parameter of PARAMETER_INITS, "embedding" /
    "linear" (an nn layer of `shape`: (num_embeddings, dim) / (in, out))."""

    kind: str
    shape: tuple[int, ...]
    low: int = 0
    high: int = 10
    host_values: tuple[int, ...] = ()

    def make(self, device: str) -> Any:
        """The lazy tensor (or the layer, its weights realized as the layer's constructor does)."""
        shape, kind = self.shape, self.kind
        count = math.prod(shape)
        if kind == "randint":
            return Tensor.randint(*shape, low=self.low, high=self.high, device=device)
        if kind == "host":
            return Tensor(np.array(self.host_values, np.int32).reshape(shape), device=device)
        if kind == "embedding":
            return nn.Embedding(shape[0], shape[1], device=device)
        if kind == "init.normal":
            return nn.init.normal(shape, mean=-0.5, std=2.0, device=device)
        if kind == "init.uniform":
            return nn.init.uniform(shape, -1.0, 4.0, device=device)
        if kind in ("init.kaiming_uniform", "init.xavier_uniform"):
            return getattr(nn.init, kind.removeprefix("init."))(shape, device=device)
        if kind == "linear":
            return nn.Linear(shape[0], shape[1], device=device)
        if kind in ("rand", "randn", "scaled_uniform", "glorot_uniform", "kaiming_uniform", "kaiming_normal"):
            return getattr(Tensor, kind)(*shape, device=device)
        if kind == "uniform":
            return Tensor.uniform(*shape, low=-2.0, high=3.0, device=device)
        if kind == "normal":
            return Tensor.normal(*shape, mean=1.5, std=0.5, device=device)
        if kind == "arange":
            return Tensor.arange(-1.0, -1.0 + count * 0.125, 0.125, device=device).reshape(*shape)
        if kind == "eye":
            return Tensor.eye(shape[0], count // shape[0], device=device).reshape(*shape)
        if kind == "full":
            return Tensor.full(shape, 0.75, device=device)
        if kind == "linspace":
            return Tensor.linspace(-2.0, 2.0, count, device=device).reshape(*shape)
        raise AssertionError(f"unknown source kind {kind!r}")

    def values(self, made: Any) -> Any:
        """What the oracle reads of the made source, realized alone: an array, or a layer's weight (and bias)."""
        if self.kind == "embedding":
            return made.weight.numpy().astype(np.float64)
        if self.kind == "linear":
            return made.weight.numpy().astype(np.float64), made.bias.numpy().astype(np.float64)
        array = made.numpy()
        return array.astype(np.float64) if np.issubdtype(array.dtype, np.floating) else array.astype(np.int64)


# ---- programs --------------------------------------------------------------------------------------------------


Magnitude = Callable[[Any, Any, list[Any], list[Any]], Any]
"""(x, magnitude of x, source values, source magnitudes) -> the magnitude of the step's result (see `Step`)."""


@dataclass(frozen=True)
class Step:
    """One op on the program's current value (and sources by number): `kiln` and `numpy` compute the same thing.

    `magnitude` bounds what float32 rounding can do to each element: the sum of the absolute values of the terms it
    adds (|x| @ |w| for x @ w), carried through the program, so a sum that cancels to 0 is allowed the rounding of
    its terms, not of its result."""

    text: str
    kiln: Callable[[Any, list[Any]], Any]
    numpy: Callable[[Any, list[Any]], Any]
    magnitude: Magnitude


def _same(x: Any, magnitude: Any, sources: list[Any], magnitudes: list[Any]) -> Any:
    return magnitude


@dataclass
class Program:
    """A random program: its sources (made in this order), the number of the source it starts from, its steps."""

    seed: int
    budget: int
    rng: random.Random = field(init=False)
    sources: list[Source] = field(default_factory=list)
    start: int = 0
    steps: list[Step] = field(default_factory=list)
    shape: tuple[int, ...] = ()
    integer: bool = False

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        families = {"gather": 3, "embedding": 2, "matmul": 2, "linear": 1, "reduce": 2, "integer": 1}
        family = self.rng.choices(list(families), weights=list(families.values()))[0]
        getattr(self, f"_start_{family}")()
        for _ in range(self.rng.choice([0, 1, 1, 2, 3])):
            self._tail_step()

    def describe(self) -> str:
        sources = ", ".join(f"s{k}={s.kind}{s.shape}" for k, s in enumerate(self.sources))
        return f"seed {self.seed}: {sources}; x = s{self.start}; " + "; ".join(step.text for step in self.steps)

    def add(self, source: Source) -> int:
        self.sources.append(source)
        return len(self.sources) - 1

    def float_source(self, shape: tuple[int, ...]) -> int:
        return self.add(Source(self.rng.choice(FLOAT_INITS), shape))

    def size(self, choices: tuple[int, ...], room: int) -> int:
        """A size of `choices` at most `room` (the smallest choice if none fits)."""
        fitting = [c for c in choices if c <= room]
        return self.rng.choice(fitting) if fitting else min(choices)

    def index_source(self, shape: tuple[int, ...], high: int) -> int:
        if self.rng.random() < 0.8:
            return self.add(Source("randint", shape, 0, high))
        values = tuple(self.rng.randrange(high) for _ in range(math.prod(shape)))
        return self.add(Source("host", shape, host_values=values))

    def index_shape(self, room: int) -> tuple[int, ...]:
        if self.rng.random() < 0.5:
            return (self.size((1, 5, 64, 256, 1024), room),)
        first = self.size((2, 4, 16), room)
        return (first, self.size((3, 16, 64), max(room // first, 1)))

    # -- first steps: each family makes its sources and the first use ------------------------------------------

    def _start_gather(self) -> None:
        rows, width = self.size((3, 10, 100), 100), self.size((1, 16, 64, 256, 1024), self.budget // 4)
        if self.rng.random() < 0.5:
            table = self.float_source((rows, width))
        else:  # a realized table: the gather loads it at offsets computed from a loaded index
            table = self.add(Source(self.rng.choice(PARAMETER_INITS), (rows, width)))
        if self.rng.random() < 0.6:
            index = self.index_source(self.index_shape(self.budget // width), rows)
            self.start = index
            self.shape = (*self.sources[index].shape, width)
            self.steps.append(
                Step(
                    f"x = s{table}[x]",
                    lambda x, s: s[table][x],
                    lambda x, s: s[table][x],
                    lambda x, m, s, sm: sm[table][x],
                )
            )
            return
        # Tensor.gather along a random dim, the index no larger than the table outside it
        dim = self.rng.randrange(2)
        other = (rows, width)[1 - dim]
        count = self.size((1, 7, 64, 512), self.budget // other)
        shape = (count, other) if dim == 0 else (other, count)
        index = self.index_source(shape, (rows, width)[dim])
        self.start, self.shape = table, shape
        self.steps.append(
            Step(
                f"x = x.gather({dim}, s{index})",
                lambda x, s: x.gather(dim, s[index]),
                lambda x, s: np.take_along_axis(x, s[index], dim),
                lambda x, m, s, sm: np.take_along_axis(m, s[index], dim),
            )
        )

    def _start_embedding(self) -> None:
        rows, width = self.size((10, 100), 100), self.size((8, 64, 256, 1024), self.budget // 4)
        layer = self.add(Source("embedding", (rows, width)))
        index = self.index_source(self.index_shape(self.budget // width), rows)
        self.start, self.shape = index, (*self.sources[index].shape, width)
        self.steps.append(
            Step(
                f"x = s{layer}(x)", lambda x, s: s[layer](x), lambda x, s: s[layer][x], lambda x, m, s, sm: sm[layer][x]
            )
        )

    def _start_matmul(self) -> None:
        inner = self.size((1, 16, 96, 256), 256)
        rows = self.size((1, 8, 64, 256), self.budget // inner)
        columns = self.size((1, 16, 128, 512), self.budget // max(inner, rows))
        left = self.float_source((rows, inner))
        right = self.float_source((inner, columns))
        self.start, self.shape = left, (rows, columns)
        self._append_product(right)

    def _start_linear(self) -> None:
        inner, outer = self.size((3, 32, 128), 128), self.size((4, 64, 256), 256)
        rows = self.size((1, 16, 128, 512), self.budget // max(inner, outer))
        layer = self.add(Source("linear", (inner, outer)))
        start = self.float_source((rows, inner))
        self.start, self.shape = start, (rows, outer)
        self.steps.append(
            Step(
                f"x = s{layer}(x)",
                lambda x, s: s[layer](x),
                lambda x, s: x @ s[layer][0].T + s[layer][1],
                lambda x, m, s, sm: m @ sm[layer][0].T + sm[layer][1],
            )
        )

    def _start_reduce(self) -> None:
        dims = self.rng.choice([1, 2, 3])
        shape: list[int] = []
        for _ in range(dims):
            shape.append(self.size((2, 3, 16, 64, 256, 2048), self.budget // max(math.prod(shape), 1)))
        self.start, self.shape = self.float_source(tuple(shape)), tuple(shape)
        self._reduce_step()

    def _start_integer(self) -> None:
        shape = self.index_shape(self.budget)
        low, high = self.rng.choice([(0, 10), (-50, 50), (0, 2**20)])
        self.start, self.shape, self.integer = self.add(Source("randint", shape, low, high)), shape, True
        scale, offset, modulus = self.rng.randint(1, 9), self.rng.randint(-5, 5), self.rng.randint(2, 13)
        self.steps.append(
            Step(
                f"x = (x * {scale} + {offset}) % {modulus}",
                lambda x, s: (x * scale + offset) % modulus,
                lambda x, s: np.mod(x * scale + offset, modulus),  # Python's sign of the divisor, as kiln's `%`
                _same,  # integers compare exactly
            )
        )

    # -- later steps ---------------------------------------------------------------------------------------------

    def _tail_step(self) -> None:
        if not self.shape:
            self._elementwise_step()
            return
        choices = ["elementwise", "reduce", "reduce"]
        if not self.integer:
            choices += ["normalize"]
            if len(self.shape) == 2:
                choices += ["matmul"]
        getattr(self, f"_{self.rng.choice(choices)}_step")()

    def _elementwise_step(self) -> None:
        if self.integer:
            low = self.rng.randint(-3, 3)
            self.steps.append(
                Step(
                    f"x = max(x, {low}) * 2",
                    lambda x, s: x.maximum(low) * 2,
                    lambda x, s: np.maximum(x, low) * 2,
                    _same,
                )
            )
            return
        kind = self.rng.choice(["affine", "relu", "exp", "square"])
        if kind == "affine":
            a, b = self.rng.choice([0.5, -1.25, 3.0]), self.rng.choice([0.0, 1.0, -0.25])
            self.steps.append(
                Step(
                    f"x = x * {a} + {b}",
                    lambda x, s: x * a + b,
                    lambda x, s: x * a + b,
                    lambda x, m, s, sm: abs(a) * m + abs(b),
                )
            )
        elif kind == "relu":
            self.steps.append(Step("x = x.relu()", lambda x, s: x.relu(), lambda x, s: np.maximum(x, 0.0), _same))
        elif kind == "exp":
            self.steps.append(
                Step(
                    "x = (x.clip(-3, 3) * 0.5).exp()",
                    lambda x, s: (x.clip(-3, 3) * 0.5).exp(),
                    lambda x, s: np.exp(np.clip(x, -3, 3) * 0.5),
                    # its own rounding, and x's error times the slope 0.5 * exp(...)
                    lambda x, m, s, sm: np.exp(np.clip(x, -3, 3) * 0.5) * (1 + 0.5 * m),
                )
            )
        else:
            self.steps.append(Step("x = x * x", lambda x, s: x * x, lambda x, s: x * x, lambda x, m, s, sm: 3 * m * m))

    def _reduce_step(self) -> None:
        names = {"sum": "sum", "amax": "max", "amin": "min", "mean": "mean"}  # kiln's -> numpy's
        op = self.rng.choice(["sum", "amax", "amin"] + ([] if self.integer else ["mean"]))
        axis = None if self.rng.random() < 0.25 else self.rng.randrange(len(self.shape))
        keep = self.rng.random() < 0.3
        if axis is None:
            self.shape = tuple(1 for _ in self.shape) if keep else ()
        else:
            self.shape = tuple(1 if d == axis else n for d, n in enumerate(self.shape) if keep or d != axis)
        self.steps.append(
            Step(
                f"x = x.{op}({axis}, keepdim={keep})",
                lambda x, s: getattr(x, op)(axis, keepdim=keep),
                lambda x, s: getattr(np, names[op])(x, axis=axis, keepdims=keep),
                # the rounding of the terms a sum adds; a max or min picks one element, with its own
                lambda x, m, s, sm: getattr(np, "max" if op in ("amax", "amin") else names[op])(
                    m, axis=axis, keepdims=keep
                ),
            )
        )

    def _normalize_step(self) -> None:
        # reads x twice (the mean and the difference): a random x is recomputed or stored, never drawn twice
        axis = self.rng.randrange(len(self.shape))
        self.steps.append(
            Step(
                f"x = x - x.mean({axis}, keepdim=True)",
                lambda x, s: x - x.mean(axis, keepdim=True),
                lambda x, s: x - x.mean(axis=axis, keepdims=True),
                lambda x, m, s, sm: m + m.mean(axis=axis, keepdims=True),
            )
        )

    def _append_product(self, right: int) -> None:
        self.steps.append(
            Step(
                f"x = x @ s{right}",
                lambda x, s: x @ s[right],
                lambda x, s: x @ s[right],
                lambda x, m, s, sm: m @ sm[right],
            )
        )

    def _matmul_step(self) -> None:
        inner = self.shape[1]
        columns = self.size((1, 8, 64), max(self.budget // max(self.shape[0], inner), 1))
        right = self.float_source((inner, columns))
        self.shape = (self.shape[0], columns)
        self._append_product(right)

    # -- running -------------------------------------------------------------------------------------------------

    def reference(self, device: str) -> tuple[Array, Array]:
        """numpy's result from the sources realized one by one, each alone, and its magnitude (see `Step`)."""
        Tensor.manual_seed(self.seed)
        arrays = [source.values(source.make(device)) for source in self.sources]
        magnitudes = [tuple(np.abs(a) for a in x) if isinstance(x, tuple) else np.abs(x) for x in arrays]
        value, magnitude = arrays[self.start], magnitudes[self.start]
        for step in self.steps:
            value, magnitude = step.numpy(value, arrays), step.magnitude(value, magnitude, arrays, magnitudes)
        return np.asarray(value), np.asarray(magnitude)

    def fused(self, device: str) -> Array:
        """kiln's result of the whole program built lazily and realized once."""
        Tensor.manual_seed(self.seed)
        made = [source.make(device) for source in self.sources]
        value = made[self.start]
        for step in self.steps:
            value = step.kiln(value, made)
        return np.asarray(value.numpy())


def check_program(program: Program, device: str) -> None:
    expected, magnitude = program.reference(device)
    actual = program.fused(device)
    assert actual.shape == expected.shape, f"{program.describe()}\nshape {actual.shape} != {expected.shape}"
    if program.integer:
        np.testing.assert_array_equal(actual, expected, err_msg=program.describe())
        return
    # float32 rounds each term by 2**-24 of its size: 2e-5 of the magnitude leaves room for ~300 such roundings (400
    # programs per renderer used at most a quarter of it)
    error, allowed = np.abs(actual - expected), 2e-5 * magnitude + 1e-30
    worst = np.unravel_index(np.argmax(error - allowed), error.shape) if error.size else ()
    assert (error <= allowed).all(), (
        f"{program.describe()}\n{int((error > allowed).sum())} of {error.size} elements off; at {worst}: "
        f"{actual[worst]} != {expected[worst]} (magnitude {magnitude[worst]})"
    )


def _cases() -> Iterator[Any]:
    for target in TARGETS:
        pinned = [seed for seed in PINNED.get(target.name, ()) if seed >= PROGRAMS]
        for seed in [*range(PROGRAMS), *pinned]:
            yield pytest.param(seed, target, id=f"{seed}-{target.name}")


@pytest.mark.parametrize(("seed", "target"), list(_cases()))
def test_fused_program_matches_its_sources_realized_alone(
    seed: int, target: Target, engines: dict[str, Engine]
) -> None:
    with running(target, engines[target.name]):
        check_program(Program(seed, target.budget), target.device)


# ---- issue 36 --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_issue_36_embedding_of_random_indices(target: Target, engines: dict[str, Engine]) -> None:
    # nn.Embedding(100, 1024) on Tensor.randint(16, 16, high=100): LLVM rejected the gather kernel, whose int64
    # offsets used the int32 core_id as an i64
    with running(target, engines[target.name]):
        Tensor.manual_seed(36)
        layer = nn.Embedding(100, 1024, device=target.device)
        indices = Tensor.randint(16, 16, high=100, device=target.device)
        out = layer(indices).numpy()
        Tensor.manual_seed(36)
        weight = nn.Embedding(100, 1024, device=target.device).weight.numpy()
        alone = Tensor.randint(16, 16, high=100, device=target.device).numpy()
        np.testing.assert_array_equal(out, weight[alone])
    if target.device == "CPU":
        # the case still is what broke: a kernel on several cores whose offsets are int64
        programs = [method.program for method in engines[target.name]._methods.values()]
        assert any(
            program.uses_core_id and any(u.op is Ops.INDEX and u.src[1].dtype == dtypes.int64 for u in program.uops)
            for program in programs
        )
