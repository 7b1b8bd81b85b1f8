"""A corpus of kernel sinks built by hand from UOps, each with a numpy reference.

Every case is a kernel in the kernel sink format (README "Kernel sink format"): buffers are DEFINE_GLOBALs with the
outputs first, loops are RANGEs, reductions explicit REDUCEs. `KernelCase.inputs(rng)` makes input values,
`KernelCase.reference(inputs, var_vals)` computes the expected outputs with numpy, and `evaluate_sink` is a direct,
one-scalar-at-a-time reading of the sink format (through `kiln.uops`' scalar `exec_alu`) used to check the
references themselves. Values of bfloat16/fp8 buffers are float64 arrays of representable values; `to_storage` and
`from_storage` convert them to and from the raw bits the interpreter's buffers hold.

Cases marked `exact` compute the same bits in any summation order (small integers, max, elementwise work), so
optimized and unoptimized programs must agree bit for bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.codegen import KernelInfo, Opt, Program, Renderer, get_program, run_program
from kiln.codegen.numpy_semantics import EMULATED, compute_dtype, storage_dtype
from kiln.uops import AxisKind, DType, GroupOp, Ops, UOp, dtypes, truncate
from kiln.uops.alu import exec_alu

Arrays = list[np.ndarray]


@dataclass(frozen=True)
class KernelCase:
    """One kernel: its sink, buffer dtypes/sizes (outputs first), input maker, numpy reference, variable values."""

    name: str
    sink: UOp
    buffers: tuple[tuple[DType, int], ...]
    outputs: int
    inputs: Callable[[np.random.Generator], Arrays]
    reference: Callable[[Arrays, dict[str, int]], Arrays]
    var_vals: dict[str, int] = field(default_factory=dict)
    exact: bool = True

    def output_buffers(self) -> Arrays:
        """Zeroed output buffers in storage form."""
        return [np.zeros(size, storage_dtype(dtype)) for dtype, size in self.buffers[: self.outputs]]


def to_storage(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Values -> the buffer the interpreter reads (raw bits for bfloat16/fp8)."""
    emulated = EMULATED.get(dtype)
    return emulated.encode(values) if emulated is not None else np.asarray(values, dtype=compute_dtype(dtype))


def from_storage(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """A buffer -> its values."""
    emulated = EMULATED.get(dtype)
    return emulated.decode(raw) if emulated is not None else raw


# ---- running a case -------------------------------------------------------------------------------------------


def run_case(case: KernelCase, renderer: Renderer, opts: list[Opt] | None, inputs: Arrays) -> Arrays:
    """The case's outputs (values) after lowering for `renderer` with `opts` and interpreting."""
    program = Program(get_program(case.sink, renderer, opts))
    outputs = case.output_buffers()
    stored = [to_storage(values, dtype) for values, (dtype, _) in zip(inputs, case.buffers[case.outputs :])]
    global_size, local_size = program.launch_dims(case.var_vals)
    run_program(program, [*outputs, *stored], case.var_vals, global_size, local_size)
    return [from_storage(raw, dtype) for raw, (dtype, _) in zip(outputs, case.buffers)]


def assert_matches(case: KernelCase, got: list[np.ndarray], expected: list[np.ndarray], exact: bool) -> None:
    for slot, (values, reference) in enumerate(zip(got, expected)):
        reference = np.asarray(reference).reshape(values.shape)
        if exact or not dtypes.is_float(case.buffers[slot][0]):
            np.testing.assert_array_equal(values, reference.astype(values.dtype), err_msg=f"{case.name} output {slot}")
        else:
            np.testing.assert_allclose(values, reference, rtol=2e-6, atol=1e-7, err_msg=f"{case.name} output {slot}")


# ---- building blocks -------------------------------------------------------------------------------------------


def buffer(slot: int, dtype: DType, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), slot)


def loop(size: int | UOp, axis: int) -> UOp:
    return UOp.range(size, axis, AxisKind.LOOP)


def reduce_range(size: int | UOp, axis: int) -> UOp:
    return UOp.range(size, axis, AxisKind.REDUCE)


def write(target: UOp, index: UOp | int, value: UOp, *ranges: UOp) -> UOp:
    store = target.index(index).store(value)
    return store.end(*ranges) if ranges else store


def kernel(name: str, *effects: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo(name))


def small_ints(low: int, high: int, dtype: Any = np.float32) -> Callable[[np.random.Generator, int], np.ndarray]:
    return lambda rng, size: rng.integers(low, high, size).astype(dtype)


def normal(dtype: Any = np.float32) -> Callable[[np.random.Generator, int], np.ndarray]:
    return lambda rng, size: rng.standard_normal(size).astype(dtype)


def inputs_of(
    *makers: tuple[Callable[[np.random.Generator, int], np.ndarray], int],
) -> Callable[[np.random.Generator], Arrays]:
    return lambda rng: [make(rng, size) for make, size in makers]


def rounded(dtype: DType, values: np.ndarray) -> np.ndarray:
    """Values rounded to `dtype` by the scalar definition (`kiln.uops.truncate`), lane by lane."""
    return np.array([truncate(dtype, float(v)) for v in np.asarray(values).reshape(-1)], dtype=np.float64)


def representable(dtype: DType) -> Callable[[np.random.Generator, int], np.ndarray]:
    """Random values of a numpy-less float format, drawn from its finite bit patterns."""

    def make(rng: np.random.Generator, size: int) -> np.ndarray:
        values = rounded(dtype, rng.standard_normal(size) * 4)
        return values

    return make


CORPUS: list[KernelCase] = []


def case(function: Callable[[], KernelCase]) -> Callable[[], KernelCase]:
    CORPUS.append(function())
    return function


# ---- elementwise over every dtype ------------------------------------------------------------------------------

ROWS, COLUMNS = 6, 10


def _elementwise_case(dtype: DType) -> KernelCase:
    size = ROWS * COLUMNS
    out, a, b = buffer(0, dtype, size), buffer(1, dtype, size), buffer(2, dtype, size)
    row, column = loop(ROWS, 0), loop(COLUMNS, 1)
    index = row * COLUMNS + column
    x, y = a.index(index).load(), b.index(index).load()
    if dtype == dtypes.bool:
        value = (x ^ y) | x.lt(y)
        reference: Callable[[Arrays, dict[str, int]], Arrays] = lambda i, v: [(i[0] ^ i[1]) | (i[0] < i[1])]  # noqa: E731
        make = lambda rng, n: rng.integers(0, 2, n).astype(bool)  # noqa: E731
    elif dtype in EMULATED:
        value = (x * y + x).maximum(y)

        def reference(i: Arrays, v: dict[str, int]) -> Arrays:
            return [np.fmax(rounded(dtype, rounded(dtype, i[0] * i[1]) + i[0]), i[1])]

        make = representable(dtype)
    else:
        value = (x * y + x).maximum(y)
        numpy_dtype = compute_dtype(dtype)
        if dtypes.is_float(dtype):
            reference = lambda i, v: [np.fmax(i[0] * i[1] + i[0], i[1])]  # noqa: E731
            make = normal(numpy_dtype)
        else:
            reference = lambda i, v: [np.maximum(i[0] * i[1] + i[0], i[1])]  # noqa: E731
            info = np.iinfo(numpy_dtype)
            make = lambda rng, n: rng.integers(info.min, info.max, n, dtype=numpy_dtype, endpoint=True)  # noqa: E731
    sink = kernel(f"elementwise_{dtype.name}", write(out, index, value, row, column))
    return KernelCase(
        f"elementwise_{dtype.name}", sink, ((dtype, size),) * 3, 1, inputs_of((make, size), (make, size)), reference
    )


for _dtype in dtypes.all:
    CORPUS.append(_elementwise_case(_dtype))


# ---- broadcasts ------------------------------------------------------------------------------------------------


@case
def broadcast_row() -> KernelCase:
    out, a, b = buffer(0, dtypes.float32, 60), buffer(1, dtypes.float32, 60), buffer(2, dtypes.float32, 10)
    i, j = loop(6, 0), loop(10, 1)
    value = a.index(i * 10 + j).load() + b.index(j).load()
    sink = kernel("broadcast_row", write(out, i * 10 + j, value, i, j))
    return KernelCase(
        "broadcast_row",
        sink,
        ((dtypes.float32, 60), (dtypes.float32, 60), (dtypes.float32, 10)),
        1,
        inputs_of((normal(), 60), (normal(), 10)),
        lambda x, v: [(x[0].reshape(6, 10) + x[1]).reshape(-1)],
    )


@case
def outer_product() -> KernelCase:
    out, a, b = buffer(0, dtypes.float32, 63), buffer(1, dtypes.float32, 7), buffer(2, dtypes.float32, 9)
    i, j = loop(7, 0), loop(9, 1)
    sink = kernel("outer_product", write(out, i * 9 + j, a.index(i).load() * b.index(j).load(), i, j))
    return KernelCase(
        "outer_product",
        sink,
        ((dtypes.float32, 63), (dtypes.float32, 7), (dtypes.float32, 9)),
        1,
        inputs_of((normal(), 7), (normal(), 9)),
        lambda x, v: [np.outer(x[0], x[1]).reshape(-1)],
    )


# ---- reductions ------------------------------------------------------------------------------------------------


def _reduce_case(
    name: str, op: Ops, axis: int, make: Callable[[np.random.Generator, int], np.ndarray], dtype: DType = dtypes.float32
) -> KernelCase:
    rows, columns = 6, 12
    keep = (rows, columns)[1 - axis]
    out, a = buffer(0, dtype, keep), buffer(1, dtype, rows * columns)
    kept, reduced = loop(keep, 0), reduce_range((rows, columns)[axis], 1)
    row, column = (reduced, kept) if axis == 0 else (kept, reduced)
    value = a.index(row * columns + column).load().reduce(reduced, op=op)
    sink = kernel(name, write(out, kept, value, kept))
    numpy_op = {Ops.ADD: np.sum, Ops.MAX: np.max, Ops.MUL: np.prod}[op]
    return KernelCase(
        name,
        sink,
        ((dtype, keep), (dtype, rows * columns)),
        1,
        inputs_of((make, rows * columns)),
        lambda x, v: [numpy_op(x[0].reshape(rows, columns), axis=axis).astype(x[0].dtype)],
    )


CORPUS += [
    _reduce_case("sum_axis0", Ops.ADD, 0, small_ints(-8, 9)),
    _reduce_case("sum_axis1", Ops.ADD, 1, small_ints(-8, 9)),
    _reduce_case("max_axis0", Ops.MAX, 0, normal()),
    _reduce_case("max_axis1", Ops.MAX, 1, normal()),
    _reduce_case("prod_axis0", Ops.MUL, 0, lambda rng, n: rng.choice(np.array([-2, -1, 1, 2], np.float32), n)),
    _reduce_case("prod_axis1", Ops.MUL, 1, lambda rng, n: rng.choice(np.array([-2, -1, 1, 2], np.float32), n)),
    _reduce_case("sum_int32_wraps", Ops.ADD, 1, small_ints(-(2**31), 2**31 - 1, np.int32), dtypes.int32),
    _reduce_case("max_int8", Ops.MAX, 0, small_ints(-128, 128, np.int8), dtypes.int8),
]


@case
def sum_all() -> KernelCase:
    out, a = buffer(0, dtypes.float32, 1), buffer(1, dtypes.float32, 40)
    i, j = reduce_range(5, 0), reduce_range(8, 1)
    sink = kernel("sum_all", write(out, 0, a.index(i * 8 + j).load().reduce(i, j)))
    return KernelCase(
        "sum_all",
        sink,
        ((dtypes.float32, 1), (dtypes.float32, 40)),
        1,
        inputs_of((small_ints(-9, 10), 40)),
        lambda x, v: [np.array([x[0].sum()], np.float32)],
    )


@case
def sum_middle_axis() -> KernelCase:
    out, a = buffer(0, dtypes.float32, 24), buffer(1, dtypes.float32, 120)
    i, k, j = loop(4, 0), loop(6, 2), reduce_range(5, 1)
    value = a.index(i * 30 + j * 6 + k).load().reduce(j)
    sink = kernel("sum_middle_axis", write(out, i * 6 + k, value, i, k))
    return KernelCase(
        "sum_middle_axis",
        sink,
        ((dtypes.float32, 24), (dtypes.float32, 120)),
        1,
        inputs_of((small_ints(-9, 10), 120)),
        lambda x, v: [x[0].reshape(4, 5, 6).sum(axis=1).reshape(-1)],
    )


# ---- matmul and convolution ------------------------------------------------------------------------------------


@case
def matmul() -> KernelCase:
    m, n, k = 8, 10, 12
    out, a, b = buffer(0, dtypes.float32, m * n), buffer(1, dtypes.float32, m * k), buffer(2, dtypes.float32, k * n)
    i, j, r = loop(m, 0), loop(n, 1), reduce_range(k, 2)
    value = (a.index(i * k + r).load() * b.index(r * n + j).load()).reduce(r)
    sink = kernel("matmul", write(out, i * n + j, value, i, j))
    return KernelCase(
        "matmul",
        sink,
        ((dtypes.float32, m * n), (dtypes.float32, m * k), (dtypes.float32, k * n)),
        1,
        inputs_of((small_ints(-4, 5), m * k), (small_ints(-4, 5), k * n)),
        lambda x, v: [(x[0].reshape(m, k) @ x[1].reshape(k, n)).reshape(-1)],
    )


@case
def matmul_int8_into_int32() -> KernelCase:
    m, n, k = 4, 6, 16
    out, a, b = buffer(0, dtypes.int32, m * n), buffer(1, dtypes.int8, m * k), buffer(2, dtypes.int8, k * n)
    i, j, r = loop(m, 0), loop(n, 1), reduce_range(k, 2)
    product = a.index(i * k + r).load().cast(dtypes.int32) * b.index(r * n + j).load().cast(dtypes.int32)
    sink = kernel("matmul_int8", write(out, i * n + j, product.reduce(r), i, j))
    reference = lambda x, v: [(x[0].astype(np.int32).reshape(m, k) @ x[1].astype(np.int32).reshape(k, n)).reshape(-1)]  # noqa: E731
    return KernelCase(
        "matmul_int8_into_int32",
        sink,
        ((dtypes.int32, m * n), (dtypes.int8, m * k), (dtypes.int8, k * n)),
        1,
        inputs_of((small_ints(-128, 128, np.int8), m * k), (small_ints(-128, 128, np.int8), k * n)),
        reference,
    )


@case
def conv2d() -> KernelCase:
    batch, cin, cout, height, width, size = 2, 3, 4, 6, 6, 3
    oh, ow = height - size + 1, width - size + 1
    out = buffer(0, dtypes.float32, batch * cout * oh * ow)
    image = buffer(1, dtypes.float32, batch * cin * height * width)
    weight = buffer(2, dtypes.float32, cout * cin * size * size)
    n, co, y, x = loop(batch, 0), loop(cout, 1), loop(oh, 2), loop(ow, 3)
    ci, ky, kx = reduce_range(cin, 4), reduce_range(size, 5), reduce_range(size, 6)
    pixel = image.index(((n * cin + ci) * height + y + ky) * width + x + kx).load()
    tap = weight.index(((co * cin + ci) * size + ky) * size + kx).load()
    value = (pixel * tap).reduce(ci, ky, kx)
    sink = kernel("conv2d", write(out, ((n * cout + co) * oh + y) * ow + x, value, n, co, y, x))

    def reference(arrays: Arrays, v: dict[str, int]) -> Arrays:
        img = arrays[0].reshape(batch, cin, height, width)
        w = arrays[1].reshape(cout, cin, size, size)
        result = np.zeros((batch, cout, oh, ow), np.float32)
        for dy, dx in itertools.product(range(size), range(size)):
            result += np.einsum("bchw,oc->bohw", img[:, :, dy : dy + oh, dx : dx + ow], w[:, :, dy, dx])
        return [result.reshape(-1)]

    sizes = (
        (dtypes.float32, batch * cout * oh * ow),
        (dtypes.float32, batch * cin * height * width),
        (dtypes.float32, cout * cin * size * size),
    )
    return KernelCase(
        "conv2d",
        sink,
        sizes,
        1,
        inputs_of((small_ints(-3, 4), sizes[1][1]), (small_ints(-3, 4), sizes[2][1])),
        reference,
    )


# ---- two reductions: softmax ------------------------------------------------------------------------------------


@case
def softmax() -> KernelCase:
    rows, columns = 4, 16
    out, a = buffer(0, dtypes.float32, rows * columns), buffer(1, dtypes.float32, rows * columns)
    i, j, r_max, r_sum = loop(rows, 0), loop(columns, 1), reduce_range(columns, 2), reduce_range(columns, 3)
    peak = a.index(i * columns + r_max).load().reduce(r_max, op=Ops.MAX)
    total = (a.index(i * columns + r_sum).load() - peak).exp2().reduce(r_sum)
    value = (a.index(i * columns + j).load() - peak).exp2() / total
    sink = kernel("softmax", write(out, i * columns + j, value, i, j))

    def reference(arrays: Arrays, v: dict[str, int]) -> Arrays:
        x = arrays[0].reshape(rows, columns)
        e = np.exp2(x - x.max(axis=1, keepdims=True))
        return [(e / e.sum(axis=1, keepdims=True)).reshape(-1)]

    return KernelCase(
        "softmax",
        sink,
        ((dtypes.float32, rows * columns),) * 2,
        1,
        inputs_of((normal(), rows * columns)),
        reference,
        exact=False,
    )


@case
def row_norm() -> KernelCase:
    # layer_norm's row kernel: the mean, then the variance around it (a reduce that needs the first), then the output
    rows, columns = 5, 24
    out, a = buffer(0, dtypes.float32, rows * columns), buffer(1, dtypes.float32, rows * columns)
    i, j, r_mean, r_var = loop(rows, 0), loop(columns, 1), reduce_range(columns, 2), reduce_range(columns, 3)
    mean = a.index(i * columns + r_mean).load().reduce(r_mean) * (1 / columns)
    centered = a.index(i * columns + r_var).load() - mean
    variance = (centered * centered).reduce(r_var) * (1 / columns)
    value = (a.index(i * columns + j).load() - mean) / (variance + 1.0)
    sink = kernel("row_norm", write(out, i * columns + j, value, i, j))

    def reference(arrays: Arrays, v: dict[str, int]) -> Arrays:
        x = arrays[0].reshape(rows, columns)
        mean = x.sum(axis=1, keepdims=True) * np.float32(1 / columns)
        variance = ((x - mean) ** 2).sum(axis=1, keepdims=True) * np.float32(1 / columns)
        return [((x - mean) / (variance + 1)).reshape(-1)]

    return KernelCase(
        "row_norm",
        sink,
        ((dtypes.float32, rows * columns),) * 2,
        1,
        inputs_of((normal(), rows * columns)),
        reference,
        exact=False,
    )


@case
def sum_of_row_maxima() -> KernelCase:
    # a row reduce nested in an outer reduce over the rows (cross-entropy's shape): the max runs once per row
    rows, columns = 6, 16
    out, a = buffer(0, dtypes.float32, 1), buffer(1, dtypes.float32, rows * columns)
    r_rows, r_max = reduce_range(rows, 0), reduce_range(columns, 1)
    peak = a.index(r_rows * columns + r_max).load().reduce(r_max, op=Ops.MAX)
    value = (a.index(r_rows * columns + 3).load() - peak).reduce(r_rows)
    sink = kernel("sum_of_row_maxima", write(out, 0, value))

    def reference(arrays: Arrays, v: dict[str, int]) -> Arrays:
        x = arrays[0].reshape(rows, columns)
        return [np.array([(x[:, 3] - x.max(axis=1)).sum()], np.float32)]

    return KernelCase(
        "sum_of_row_maxima",
        sink,
        ((dtypes.float32, 1), (dtypes.float32, rows * columns)),
        1,
        inputs_of((small_ints(-9, 10), rows * columns)),
        reference,
    )


# ---- padding (gated loads) ---------------------------------------------------------------------------------------


@case
def pad_both_sides() -> KernelCase:
    n, before, after = 13, 2, 3
    out, a = buffer(0, dtypes.float32, n + before + after), buffer(1, dtypes.float32, n)
    i = loop(n + before + after, 0)
    inside = (i >= before) & i.lt(n + before)
    value = a.index(i - before, gate=inside).load()
    sink = kernel("pad_both_sides", write(out, i, value, i))
    return KernelCase(
        "pad_both_sides",
        sink,
        ((dtypes.float32, n + before + after), (dtypes.float32, n)),
        1,
        inputs_of((normal(), n)),
        lambda x, v: [np.pad(x[0], (before, after))],
    )


@case
def padded_conv1d() -> KernelCase:
    n, taps = 15, 3
    out, a, w = buffer(0, dtypes.float32, n), buffer(1, dtypes.float32, n), buffer(2, dtypes.float32, taps)
    i, k = loop(n, 0), reduce_range(taps, 1)
    position = i + k - 1
    inside = (position >= 0) & position.lt(n)
    value = (a.index(position, gate=inside).load() * w.index(k).load()).reduce(k)
    sink = kernel("padded_conv1d", write(out, i, value, i))

    def reference(x: Arrays, v: dict[str, int]) -> Arrays:
        padded = np.pad(x[0], 1)
        return [sum(padded[t : t + n] * x[1][t] for t in range(taps)).astype(np.float32)]

    return KernelCase(
        "padded_conv1d",
        sink,
        ((dtypes.float32, n), (dtypes.float32, n), (dtypes.float32, taps)),
        1,
        inputs_of((small_ints(-5, 6), n), (small_ints(-3, 4), taps)),
        reference,
    )


# ---- symbolic shapes -----------------------------------------------------------------------------------------------


@case
def symbolic_elementwise() -> KernelCase:
    limit = 32
    n = UOp.variable("n", 1, limit)
    out, a = buffer(0, dtypes.float32, limit), buffer(1, dtypes.float32, limit)
    i = loop(n, 0)
    sink = kernel("symbolic_elementwise", write(out, i, a.index(i).load() * 3.0 + 1.0, i))

    def reference(x: Arrays, v: dict[str, int]) -> Arrays:
        result = np.zeros(limit, np.float32)
        result[: v["n"]] = x[0][: v["n"]] * np.float32(3) + np.float32(1)
        return [result]

    return KernelCase(
        "symbolic_elementwise",
        sink,
        ((dtypes.float32, limit),) * 2,
        1,
        inputs_of((normal(), limit)),
        reference,
        {"n": 19},
    )


@case
def symbolic_row_sum() -> KernelCase:
    rows, limit = 4, 16
    n = UOp.variable("n", 1, limit)
    out, a = buffer(0, dtypes.int32, rows), buffer(1, dtypes.int32, rows * limit)
    i, j = loop(rows, 0), reduce_range(n, 1)
    sink = kernel("symbolic_row_sum", write(out, i, a.index(i * n + j).load().reduce(j), i))

    def reference(x: Arrays, v: dict[str, int]) -> Arrays:
        count = v["n"]
        return [x[0][: rows * count].reshape(rows, count).sum(axis=1).astype(np.int32)]

    return KernelCase(
        "symbolic_row_sum",
        sink,
        ((dtypes.int32, rows), (dtypes.int32, rows * limit)),
        1,
        inputs_of((small_ints(-100, 100, np.int32), rows * limit)),
        reference,
        {"n": 11},
    )


# ---- assorted shapes -------------------------------------------------------------------------------------------


@case
def two_outputs() -> KernelCase:
    size = 24
    out0, out1 = buffer(0, dtypes.float32, size), buffer(1, dtypes.float32, size)
    a, b = buffer(2, dtypes.float32, size), buffer(3, dtypes.float32, size)
    i = loop(size, 0)
    x, y = a.index(i).load(), b.index(i).load()
    sink = kernel("two_outputs", write(out0, i, x + y, i), write(out1, i, x * y, i))
    return KernelCase(
        "two_outputs",
        sink,
        ((dtypes.float32, size),) * 4,
        2,
        inputs_of((normal(), size), (normal(), size)),
        lambda x, v: [x[0] + x[1], x[0] * x[1]],
    )


@case
def transpose_by_index_math() -> KernelCase:
    rows, columns = 6, 8
    out, a = buffer(0, dtypes.int32, rows * columns), buffer(1, dtypes.int32, rows * columns)
    i = loop(rows * columns, 0)
    sink = kernel("transpose", write(out, i, a.index((i % columns) * rows + i // columns).load(), i))
    return KernelCase(
        "transpose_by_index_math",
        sink,
        ((dtypes.int32, rows * columns),) * 2,
        1,
        inputs_of((small_ints(-1000, 1000, np.int32), rows * columns)),
        lambda x, v: [x[0].reshape(columns, rows).T.reshape(-1)],
    )


@case
def minimum_by_where() -> KernelCase:
    size = 30
    out, a, b = buffer(0, dtypes.int32, size), buffer(1, dtypes.int32, size), buffer(2, dtypes.int32, size)
    i = loop(size, 0)
    x, y = a.index(i).load(), b.index(i).load()
    sink = kernel("minimum", write(out, i, x.lt(y).where(x, y), i))
    return KernelCase(
        "minimum_by_where",
        sink,
        ((dtypes.int32, size),) * 3,
        1,
        inputs_of((small_ints(-50, 50, np.int32), size), (small_ints(-50, 50, np.int32), size)),
        lambda x, v: [np.minimum(x[0], x[1])],
    )


@case
def transcendental_mix() -> KernelCase:
    size = 40
    out, a = buffer(0, dtypes.float32, size), buffer(1, dtypes.float32, size)
    i = loop(size, 0)
    x = a.index(i).load()
    value = x.sin() + (x * x + 1.0).log2() + (x * 0.5).exp2() + (x * x).sqrt()
    sink = kernel("transcendental_mix", write(out, i, value, i))

    def reference(arrays: Arrays, v: dict[str, int]) -> Arrays:
        x = arrays[0]
        return [np.sin(x) + np.log2(x * x + np.float32(1)) + np.exp2(x * np.float32(0.5)) + np.sqrt(x * x)]

    return KernelCase(
        "transcendental_mix",
        sink,
        ((dtypes.float32, size),) * 2,
        1,
        inputs_of((normal(), size)),
        reference,
        exact=False,
    )


@case
def casts() -> KernelCase:
    size = 20
    out_small, out_half = buffer(0, dtypes.int8, size), buffer(1, dtypes.float16, size)
    a, b = buffer(2, dtypes.float32, size), buffer(3, dtypes.int32, size)
    i = loop(size, 0)
    to_int8 = (a.index(i).load() * 3.0).cast(dtypes.int8)
    to_half = b.index(i).load().cast(dtypes.float16)
    sink = kernel("casts", write(out_small, i, to_int8, i), write(out_half, i, to_half, i))
    sizes = ((dtypes.int8, size), (dtypes.float16, size), (dtypes.float32, size), (dtypes.int32, size))

    def reference(x: Arrays, v: dict[str, int]) -> Arrays:
        with np.errstate(over="ignore"):  # ints beyond 65504 become inf in float16
            return [np.trunc(x[0] * np.float32(3)).astype(np.int8), x[1].astype(np.float16)]

    return KernelCase(
        "casts", sink, sizes, 2, inputs_of((normal(), size), (small_ints(-70000, 70000, np.int32), size)), reference
    )


@case
def row_mean() -> KernelCase:
    rows, columns = 5, 10
    out, a = buffer(0, dtypes.float32, rows), buffer(1, dtypes.float32, rows * columns)
    i, j = loop(rows, 0), reduce_range(columns, 1)
    value = a.index(i * columns + j).load().reduce(j) * 0.1
    sink = kernel("row_mean", write(out, i, value, i))
    return KernelCase(
        "row_mean",
        sink,
        ((dtypes.float32, rows), (dtypes.float32, rows * columns)),
        1,
        inputs_of((small_ints(-9, 10), rows * columns)),
        lambda x, v: [x[0].reshape(rows, columns).sum(axis=1) * np.float32(0.1)],
    )


@case
def subtract_row_sum() -> KernelCase:
    rows, columns = 6, 8
    out, a = buffer(0, dtypes.float32, rows * columns), buffer(1, dtypes.float32, rows * columns)
    i, j, k = loop(rows, 0), loop(columns, 1), reduce_range(columns, 2)
    total = a.index(i * columns + k).load().reduce(k)
    sink = kernel("subtract_row_sum", write(out, i * columns + j, a.index(i * columns + j).load() - total, i, j))

    def reference(x: Arrays, v: dict[str, int]) -> Arrays:
        m = x[0].reshape(rows, columns)
        return [(m - m.sum(axis=1, keepdims=True)).reshape(-1)]

    return KernelCase(
        "subtract_row_sum",
        sink,
        ((dtypes.float32, rows * columns),) * 2,
        1,
        inputs_of((small_ints(-9, 10), rows * columns)),
        reference,
    )


CASES_BY_NAME = {c.name: c for c in CORPUS}


# ---- the direct semantics of the sink format, for checking the references ------------------------------------------


def evaluate_sink(sink: UOp, buffers: list[list[Any]], var_vals: dict[str, int]) -> None:
    """Run kernel `sink` on Python lists of values, one scalar at a time (slow; for small kernels)."""
    for effect in sink.src:
        _run_effect(effect, {}, buffers, var_vals)


def _run_effect(node: UOp, env: dict[UOp, int], buffers: list[list[Any]], var_vals: dict[str, int]) -> None:
    if node.op is Ops.END:
        ranges = node.src[1:]
        sizes = [int(_value(r.src[0], env, buffers, var_vals)) for r in ranges]
        for values in itertools.product(*(range(s) for s in sizes)):
            _run_effect(node.src[0], {**env, **dict(zip(ranges, values))}, buffers, var_vals)
    elif node.op is Ops.STORE:
        index = node.src[0]
        slot = index.src[0].arg
        offset = int(_value(index.src[1], env, buffers, var_vals))
        if len(index.src) == 3 and not _value(index.src[2], env, buffers, var_vals):
            return
        buffers[slot][offset] = _value(node.src[1], env, buffers, var_vals)
    else:
        for source in node.src:
            _run_effect(source, env, buffers, var_vals)


def _value(node: UOp, env: dict[UOp, int], buffers: list[list[Any]], var_vals: dict[str, int]) -> Any:
    op = node.op
    if op is Ops.CONST:
        return node.arg
    if op is Ops.RANGE:
        return env[node]
    if op is Ops.DEFINE_VAR:
        return var_vals[node.arg.name]
    if op is Ops.LOAD:
        index = node.src[0]
        if len(index.src) == 3 and not _value(index.src[2], env, buffers, var_vals):
            return truncate(node.dtype, 0)
        return buffers[index.src[0].arg][int(_value(index.src[1], env, buffers, var_vals))]
    if op is Ops.REDUCE:
        ranges = node.src[1:]
        sizes = [int(_value(r.src[0], env, buffers, var_vals)) for r in ranges]
        total = dtypes.min(node.dtype) if node.arg is Ops.MAX else truncate(node.dtype, int(node.arg is Ops.MUL))
        for values in itertools.product(*(range(s) for s in sizes)):
            item = _value(node.src[0], {**env, **dict(zip(ranges, values))}, buffers, var_vals)
            total = exec_alu(node.arg, node.dtype, (total, item))
        return total
    if op is Ops.CAST:
        return truncate(node.dtype, _value(node.src[0], env, buffers, var_vals))
    if op in GroupOp.ALU:
        operands = tuple(_value(s, env, buffers, var_vals) for s in node.src)
        return exec_alu(op, node.dtype, operands)
    raise ValueError(f"evaluate_sink cannot evaluate {op!r}")
