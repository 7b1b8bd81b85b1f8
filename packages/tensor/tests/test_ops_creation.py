"""Creation functions (zeros, ones, full, empty, arange, linspace, eye, *_like), casts, and the counter-based random
functions, whose bits are checked against an independent pure-Python Threefry-2x32-20 written here."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kiln.tensor.ops.random import threefry2x32
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, Ops, dtypes, exec_alu

DEVICE = "PYTHON"
Array = np.ndarray[Any, Any]


pytestmark = pytest.mark.default_device(DEVICE)


# ------------------------------------------------------------------------------------------------------------------
# an independent Threefry-2x32-20 (Salmon et al., SC'11; constants from Random123's threefry.h)
# ------------------------------------------------------------------------------------------------------------------

M32 = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & M32


def reference_threefry(counter: tuple[int, int], key: tuple[int, int]) -> tuple[int, int]:
    rotations = [[13, 15, 26, 6], [17, 29, 16, 24]]
    keys = [key[0], key[1], 0x1BD11BDA ^ key[0] ^ key[1]]
    x = [(counter[0] + keys[0]) & M32, (counter[1] + keys[1]) & M32]
    for block in range(5):  # 5 blocks of 4 rounds, a key injection after each
        for rotation in rotations[block % 2]:
            x[0] = (x[0] + x[1]) & M32
            x[1] = _rotl(x[1], rotation) ^ x[0]
        injection = block + 1
        x[0] = (x[0] + keys[injection % 3]) & M32
        x[1] = (x[1] + keys[(injection + 1) % 3] + injection) & M32
    return x[0], x[1]


# Random123 known-answer vectors (kat_vectors: threefry2x32 20 <counter> <key> <result>)
KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize(("counter", "key", "expected"), KNOWN_ANSWERS)
def test_reference_threefry_known_answers(
    counter: tuple[int, int], key: tuple[int, int], expected: tuple[int, int]
) -> None:
    assert reference_threefry(counter, key) == expected
    # kiln.uops' THREEFRY op (word 0 in the low 32 bits) is a third implementation of the same function
    packed = exec_alu(Ops.THREEFRY, dtypes.uint64, [counter[0] | counter[1] << 32, key[0] | key[1] << 32])
    assert isinstance(packed, int)
    assert (packed & M32, packed >> 32) == expected


def test_tensor_threefry_matches_reference() -> None:
    generator = np.random.default_rng(0)
    words = generator.integers(0, 2**32, size=(2, 40), dtype=np.uint64).astype(np.uint32)
    words[:, :3] = np.array([[a for (a, _), _, _ in KNOWN_ANSWERS], [b for (_, b), _, _ in KNOWN_ANSWERS]])
    for key in [(0, 0), (0x13198A2E, 0x03707344), (M32, 12345)]:
        first, second = threefry2x32(Tensor(words[0]), Tensor(words[1]), *key)
        Tensor.realize_all(first, second)
        expected = [reference_threefry((int(a), int(b)), key) for a, b in zip(words[0], words[1])]
        assert first.tolist() == [pair[0] for pair in expected]
        assert second.tolist() == [pair[1] for pair in expected]


def _expected_bits(seed: int, call: int, count: int) -> list[int]:
    """The uint32 words kiln's random functions use: Threefry of (block, call) under the seed's two words; first
    words of all blocks, then second words."""
    key = (seed & M32, (seed >> 32) & M32)
    half = (count + 1) // 2
    outputs = [reference_threefry((block, call), key) for block in range(half)]
    return ([first for first, _ in outputs] + [second for _, second in outputs])[:count]


@pytest.mark.parametrize("seed", [0, 42, 2**40 + 5])
@pytest.mark.parametrize("count", [1, 7, 64])
def test_rand_bits_match_reference(seed: int, count: int) -> None:
    Tensor.manual_seed(seed)
    first, second = Tensor.rand(count), Tensor.rand(count)
    Tensor.realize_all(first, second)
    for call, values in enumerate((first, second)):
        bits = np.array(_expected_bits(seed, call, count), dtype=np.uint64)
        np.testing.assert_array_equal(values.numpy(), (bits >> 8).astype(np.float32) * np.float32(2.0**-24))


def test_rand_other_float_dtypes_are_exact_and_below_one() -> None:
    Tensor.manual_seed(3)
    halves, doubles = Tensor.rand(50, dtype=dtypes.float16), Tensor.rand(2, 25, dtype=dtypes.float64)
    Tensor.realize_all(halves, doubles)
    # float16 keeps 11 bits of precision (values in [0, 1) with 10 stored mantissa bits), float64 all 32 bits
    half_bits = np.array(_expected_bits(3, 0, 50), dtype=np.uint64)
    np.testing.assert_array_equal(halves.numpy(), ((half_bits >> 21).astype(np.float64) * 2.0**-11).astype(np.float16))
    double_bits = np.array(_expected_bits(3, 1, 50), dtype=np.uint64).reshape(2, 25)
    np.testing.assert_array_equal(doubles.numpy(), double_bits.astype(np.float64) * 2.0**-32)
    assert halves.numpy().max() < 1.0


def test_randn_and_randint_from_reference_bits() -> None:
    Tensor.manual_seed(11)
    normal = Tensor.randn(2, 6)
    integers = Tensor.randint(3, 5, low=-4, high=9)
    Tensor.realize_all(normal, integers)
    key = (11, 0)
    pairs = [reference_threefry((block, 0), key) for block in range(12)]
    u1 = np.array([(a >> 8) * 2.0**-24 for a, _ in pairs])
    u2 = np.array([(b >> 8) * 2.0**-24 for _, b in pairs])
    expected = np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * math.pi * u2)
    np.testing.assert_allclose(normal.numpy().reshape(-1), expected, rtol=1e-5, atol=1e-5)
    bits = np.array(_expected_bits(11, 1, 15), dtype=np.uint64)
    np.testing.assert_array_equal(
        integers.numpy().reshape(-1), ((bits * np.uint64(13)) >> np.uint64(32)).astype(np.int64) - 4
    )
    assert integers.dtype is dtypes.int32


def test_random_numbers_are_identical_on_every_device() -> None:
    Tensor.manual_seed(7)
    python = Tensor.rand(33, device="PYTHON").numpy()
    Tensor.manual_seed(7)
    cpu = Tensor.rand(33, device="CPU").numpy()
    np.testing.assert_array_equal(python, cpu)


def test_random_distributions() -> None:
    Tensor.manual_seed(1234)
    uniform, normal = Tensor.rand(20000), Tensor.randn(20000)
    shifted = Tensor.uniform(5000, low=-2.0, high=3.0)
    scaled = Tensor.normal(5000, mean=10.0, std=0.5)
    integers = Tensor.randint(6000, low=-3, high=3)
    Tensor.realize_all(uniform, normal, shifted, scaled, integers)
    u, n, s, g, i = uniform.numpy(), normal.numpy(), shifted.numpy(), scaled.numpy(), integers.numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1.0) < 0.03
    assert abs(np.mean(np.abs(n) < 1.0) - 0.6827) < 0.02  # the share within one standard deviation
    assert s.min() >= -2.0 and s.max() < 3.0 and abs(s.mean() - 0.5) < 0.06
    assert abs(g.mean() - 10.0) < 0.03 and abs(g.std() - 0.5) < 0.03
    counts = np.bincount(i + 3, minlength=6)
    assert set(np.unique(i)) == set(range(-3, 3)) and counts.min() > 850 and counts.max() < 1150


def test_manual_seed_repeats_the_stream() -> None:
    Tensor.manual_seed(99)
    first = [Tensor.rand(5).tolist(), Tensor.randn(5).tolist()]
    Tensor.manual_seed(99)
    second = [Tensor.rand(5).tolist(), Tensor.randn(5).tolist()]
    assert first == second
    assert first[0] != Tensor.rand(5).tolist()


def test_random_like_and_requires_grad() -> None:
    x = Tensor.zeros(3, 4, dtype=dtypes.float16)
    assert x.rand_like().shape == (3, 4) and x.rand_like().dtype is dtypes.float16
    assert x.randn_like(dtype=dtypes.float32).dtype is dtypes.float32
    weights = Tensor.rand(2, 2, requires_grad=True)
    assert weights.requires_grad is True


def test_randint_like_draws_from_the_reference_bits() -> None:
    Tensor.manual_seed(11)
    like = Tensor.zeros(3, 5, dtype=dtypes.int16)
    integers = like.randint_like(-4, 9)
    assert integers.shape == (3, 5) and integers.dtype is dtypes.int16
    bits = np.array(_expected_bits(11, 0, 15), dtype=np.uint64)
    expected = ((bits * np.uint64(13)) >> np.uint64(32)).astype(np.int64) - 4
    np.testing.assert_array_equal(integers.numpy().reshape(-1), expected)
    # one bound is the upper one (PyTorch's randint_like(x, high)); a float tensor gets float integers
    Tensor.manual_seed(5)
    floats = Tensor.zeros(400).randint_like(3)
    assert floats.dtype is dtypes.float32 and set(np.unique(floats.numpy())) == {0.0, 1.0, 2.0}
    assert like.randint_like(2, dtype=dtypes.int64, requires_grad=False).dtype is dtypes.int64
    with pytest.raises(TypeError, match=r"dtypes\.bool"):
        Tensor([True]).randint_like(2)
    with pytest.raises(ValueError, match="low=5 high=5"):
        like.randint_like(5, 5)


# ------------------------------------------------------------------------------------------------------------------
# constants, ranges, casts
# ------------------------------------------------------------------------------------------------------------------


def test_constant_tensors() -> None:
    cases: list[tuple[Tensor, Array, DType]] = [
        (Tensor.zeros(2, 3), np.zeros((2, 3), np.float32), dtypes.float32),
        (Tensor.ones((4,), dtype=dtypes.int8), np.ones(4, np.int8), dtypes.int8),
        (Tensor.full((2, 2), 7), np.full((2, 2), 7, np.int32), dtypes.int32),
        (Tensor.full((3,), 2.5), np.full(3, 2.5, np.float32), dtypes.float32),
        (Tensor.full((2,), True), np.full(2, True), dtypes.bool),
        (Tensor.full((2,), 255, dtype=dtypes.uint8), np.full(2, 255, np.uint8), dtypes.uint8),
        (Tensor.full((), math.inf), np.array(math.inf, np.float32), dtypes.float32),
        (Tensor.zeros(2, 3).ones_like(), np.ones((2, 3), np.float32), dtypes.float32),
        (Tensor([1, 2]).zeros_like(), np.zeros(2, np.int32), dtypes.int32),
        (Tensor([1, 2]).full_like(0.5), np.full(2, 0.5, np.int32), dtypes.int32),
        (Tensor([1, 2]).full_like(0.5, dtype=dtypes.float64), np.full(2, 0.5), dtypes.float64),
    ]
    Tensor.realize_all(*(tensor for tensor, _, _ in cases))
    for tensor, expected, dtype in cases:
        assert tensor.dtype is dtype
        np.testing.assert_array_equal(tensor.numpy(), expected)


def test_empty_has_shape_and_dtype_and_takes_assignments() -> None:
    x = Tensor.empty(2, 3, dtype=dtypes.int16)
    assert x.shape == (2, 3) and x.dtype is dtypes.int16
    x.assign(Tensor.full((2, 3), 4, dtype=dtypes.int16))
    np.testing.assert_array_equal(x.numpy(), np.full((2, 3), 4, np.int16))
    assert Tensor.zeros(3).empty_like().shape == (3,)


@pytest.mark.parametrize(
    ("arguments", "dtype"),
    [
        ((10,), None),
        ((2, 11, 3), None),
        ((5, -6, -2), None),
        ((0, 1, 0.125), None),
        ((-1.5, 2.0, 0.5), None),
        ((0, 100000), None),
        ((1, 10, 2), dtypes.float32),
        ((0.5, 6.5), dtypes.int64),
        ((10,), dtypes.uint8),
    ],
)
def test_arange_matches_numpy(arguments: tuple[Any, ...], dtype: DType | None) -> None:
    start, stop, step = {1: (arguments[0], None, 1), 2: (*arguments, 1)}.get(len(arguments), arguments)
    result = Tensor.arange(start, stop, step, dtype=dtype)
    natural = np.float32 if any(isinstance(v, float) for v in arguments) else np.int32
    expected = np.arange(*arguments, dtype=np.float64).astype(dtype.name if dtype else natural)
    assert result.dtype is (dtype or (dtypes.float32 if natural is np.float32 else dtypes.int32))
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("start", "end", "steps"), [(0, 1, 5), (-2.5, 7.0, 11), (3, 3, 4), (10, -10, 7), (1, 2, 1), (0, 1, 2)]
)
def test_linspace_matches_numpy(start: float, end: float, steps: int) -> None:
    result = Tensor.linspace(start, end, steps)
    np.testing.assert_allclose(result.numpy(), np.linspace(start, end, steps), rtol=1e-6, atol=1e-6)
    if steps > 1:
        assert result.numpy()[-1] == np.float32(end)  # the far end is exact


def test_zero_size_creation() -> None:
    cases = [Tensor.arange(3, 3), Tensor.zeros(0, 3), Tensor.rand(0), Tensor.linspace(0, 1, 0), Tensor.eye(0, 2)]
    for tensor, shape in zip(cases, [(0,), (0, 3), (0,), (0,), (0, 2)]):
        assert tensor.shape == shape
        assert tensor.numpy().shape == shape


def test_eye_and_linspace_dtypes() -> None:
    cases = [
        (Tensor.eye(3), np.eye(3, dtype=np.float32)),
        (Tensor.eye(2, 4, dtype=dtypes.int32), np.eye(2, 4, dtype=np.int32)),
        (Tensor.eye(4, 1, dtype=dtypes.bool), np.eye(4, 1, dtype=np.bool_)),
        (Tensor.linspace(0, 10, 6, dtype=dtypes.int32), np.linspace(0, 10, 6).astype(np.int32)),
    ]
    Tensor.realize_all(*(tensor for tensor, _ in cases))
    for tensor, expected in cases:
        assert tensor.numpy().dtype == expected.dtype
        np.testing.assert_array_equal(tensor.numpy(), expected)


def test_casts_match_numpy() -> None:
    floats = np.array([1.7, -1.7, 0.5, -0.0, 300.25, -129.5, 65504.0], dtype=np.float32)
    ints = np.array([-1, 0, 1, 127, 128, 255, 256, -129], dtype=np.int32)
    cases: list[tuple[Tensor, Array]] = [
        (Tensor(floats).int(), floats.astype(np.int32)),
        (Tensor(floats).long(), floats.astype(np.int64)),
        (Tensor(floats).half(), floats.astype(np.float16)),
        (Tensor(floats).double(), floats.astype(np.float64)),
        (Tensor(floats).bool(), floats.astype(np.bool_)),
        (Tensor(ints).cast(dtypes.int8), ints.astype(np.int8)),
        (Tensor(ints).cast(dtypes.uint8), ints.astype(np.uint8)),
        (Tensor(ints).float(), ints.astype(np.float32)),
        (Tensor(ints > 0).int(), (ints > 0).astype(np.int32)),
        (Tensor(floats).bitcast(dtypes.uint32), floats.view(np.uint32)),
        (Tensor(ints).bitcast(dtypes.float32), ints.view(np.float32)),
        (Tensor(floats.astype(np.float16)).bitcast(dtypes.int16), floats.astype(np.float16).view(np.int16)),
    ]
    Tensor.realize_all(*(tensor for tensor, _ in cases))
    for position, (tensor, expected) in enumerate(cases):
        assert tensor.numpy().dtype == expected.dtype, position
        np.testing.assert_array_equal(tensor.numpy(), expected, err_msg=str(position))


def test_cast_to_bfloat16_rounds_to_nearest_even() -> None:
    values = np.array([1.0, 1.00390625, 1.01171875, 3.14159265, -2.0e-3], dtype=np.float32)
    rounded = Tensor(values).cast(dtypes.bfloat16)
    assert rounded.dtype is dtypes.bfloat16
    bits = values.view(np.uint32).astype(np.uint64)
    # round to nearest even on the upper 16 bits
    upper = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    np.testing.assert_array_equal(rounded.numpy(), (upper << 16).astype(np.uint32).view(np.float32))
