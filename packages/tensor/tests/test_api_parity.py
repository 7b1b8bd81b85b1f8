"""The Tensor API parity work beyond the conformance suite: coverage, index dtypes, error classes, decompositions,
sampling statistics, static-size selection, conveniences; and the docstring examples of the new ops modules."""

from __future__ import annotations

import doctest
import importlib
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from script_loading import load_script

from kiln.tensor import Tensor
from kiln.uops import Context, dtypes

ROOT = Path(__file__).resolve().parents[3]
NEW_MODULES = [
    "trigonometric",
    "activations",
    "comparison",
    "scans",
    "layout",
    "selection",
    "decompositions",
    "sampling",
    "statistics",
    "placement",
    "metadata",
    "special",
    "linear_solve",
]


def test_api_coverage_meets_its_targets() -> None:
    # every tinygrad name except the listed exceptions (and the pending ones), and >= 180 torch.Tensor names
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "api_coverage.py"), "--check"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    torch_line = run.stdout.splitlines()[0]
    have = int(torch_line.split("has ")[1].split(" of")[0])
    assert have >= 180, torch_line
    failing = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "api_coverage.py"), "--check", "--torch-target", "1000"],
        capture_output=True,
        text=True,
    )
    assert failing.returncode == 1 and "coverage check failed" in failing.stdout


def test_coverage_exceptions_need_reasons(tmp_path: Path) -> None:
    api_coverage = load_script("scripts/api_coverage.py")

    listing = tmp_path / "exceptions.txt"
    listing.write_text("# comment\nalu: a reason\nshard:\n")
    with pytest.raises(ValueError, match="'shard' has no reason"):
        api_coverage.read_exceptions(listing)


@pytest.mark.parametrize("module", NEW_MODULES)
def test_docstring_examples(module: str) -> None:
    # every method's example is a known answer
    globs = {"Tensor": Tensor, "math": math, "dtypes": dtypes}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = doctest.DocTestFinder().find(importlib.import_module(f"kiln.tensor.ops.{module}"), globs=globs)
    assert sum(len(test.examples) for test in tests) > 0
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_index_returning_ops_give_the_default_int() -> None:
    x = Tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    indices = [
        x.argmax(),
        x.argmin(1),
        x.argsort(),
        x.sort()[1],
        x.topk(2)[1],
        x.cummax(1)[1],
        x.cummin(1)[1],
        x.reshape(1, 1, 2, 3).max_pool2d((2, 1), return_indices=True)[1],
        x.nonzero(),
        x.nonzero(size=2),
        Tensor.arange(3),
        Tensor([0.5, 0.5]).multinomial(2),
        Tensor.randperm(3),
    ]
    assert [index.dtype for index in indices] == [dtypes.default_int] * len(indices)
    assert dtypes.default_int == dtypes.int32


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: Tensor([1.0]).div(2, rounding_mode="flor"), ValueError, "rounding_mode"),
        (lambda: Tensor([1.0]).gelu(approximate="tanhh"), ValueError, "approximate"),
        (lambda: Tensor([[1.0]]).scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "max"), ValueError, "amax"),
        (lambda: Tensor([[1.0]]).qr(mode="full"), ValueError, "reduced"),
        (lambda: Tensor.meshgrid(Tensor([1]), indexing="ji"), ValueError, "indexing"),
        (lambda: Tensor([1.0]).norm("nuc"), ValueError, "fro"),
        (lambda: Tensor.zeros(2, 3).sum(2), IndexError, "out of range"),
        (lambda: Tensor.zeros(2, 3).cumprod(-3), IndexError, "out of range"),
        (lambda: Tensor.zeros(2, 3).diagonal(0, 0, 2), IndexError, "out of range"),
        (lambda: Tensor.zeros(2, 3).movedim(2, 0), IndexError, "out of range"),
        (lambda: Tensor.zeros(2, 3).roll(1, 4), IndexError, "out of range"),
        (lambda: Tensor.zeros(2, 3).narrow(1, 2, 2), IndexError, "out of range"),
        (lambda: Tensor.zeros(2, 3).softmin(3), IndexError, "out of range"),
        (lambda: Tensor.zeros(2, 3).select(0, 2), IndexError, "out of range"),
        (lambda: Tensor.zeros(2, 3).reshape("a"), TypeError, "int"),
        (lambda: Tensor.zeros(2, 3).index_select(0, Tensor([0.0])), TypeError, "integer"),
        (lambda: Tensor.zeros(2).masked_select(Tensor([1, 0])), TypeError, "bool"),
        (lambda: Tensor.zeros(2).roll(1.5, 0), TypeError, "int"),
        (lambda: Tensor([1, 2]) ** -1, RuntimeError, "negative integer powers"),
    ],
)
def test_errors_use_torchs_exception_classes(call: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()  # type: ignore[operator]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (2, 6), (1, 4), (4, 1)])
def test_svd_reconstructs_and_matches_numpys_singular_values(shape: tuple[int, int], seed: int) -> None:
    values = np.random.default_rng(seed).standard_normal(shape)
    u, s, v = Tensor(values).svd()
    k = min(shape)
    assert u.shape == (shape[0], k) and s.shape == (k,) and v.shape == (shape[1], k)
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(values, compute_uv=False), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose((u.numpy() * s.numpy()) @ v.numpy().T, values, atol=1e-9)
    np.testing.assert_allclose(u.numpy().T @ u.numpy(), np.eye(k), atol=1e-9)
    np.testing.assert_allclose(v.numpy().T @ v.numpy(), np.eye(k), atol=1e-9)


def test_svd_of_a_rank_deficient_matrix() -> None:
    values = np.outer([1.0, 2.0, 3.0], [1.0, -1.0])
    _, s, _ = Tensor(values).svd()
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(values, compute_uv=False), atol=1e-9)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 3, 2)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_matches_numpy(shape: tuple[int, ...], mode: str) -> None:
    values = np.random.default_rng(4).standard_normal(shape)
    q, r = Tensor(values).qr(mode)
    expected_q, expected_r = np.linalg.qr(values, mode=mode)
    np.testing.assert_allclose(q.numpy(), expected_q, atol=1e-9)
    np.testing.assert_allclose(r.numpy(), expected_r, atol=1e-9)


def test_qr_of_a_zero_column_stays_finite() -> None:
    q, r = Tensor([[0.0, 1.0], [0.0, 2.0]]).qr()
    np.testing.assert_allclose(q.numpy() @ r.numpy(), [[0.0, 1.0], [0.0, 2.0]], atol=1e-6)


def test_multinomial_frequencies_follow_the_weights() -> None:
    Tensor.manual_seed(3)
    weights = np.array([0.1, 0.0, 0.2, 0.7])
    draws = Tensor(weights.astype(np.float32)).multinomial(4000, replacement=True).numpy()
    frequencies = np.bincount(draws, minlength=4) / draws.size
    assert frequencies[1] == 0.0
    np.testing.assert_allclose(frequencies, weights, atol=0.03)  # 4000 draws: standard error <= 0.008


def test_multinomial_without_replacement_draws_distinct_nonzero_categories() -> None:
    Tensor.manual_seed(5)
    rows = Tensor([[1.0, 0.0, 2.0, 3.0, 0.5], [0.0, 1.0, 1.0, 0.0, 1.0]]).multinomial(3).numpy()
    for row, weights in zip(rows, [[1.0, 0.0, 2.0, 3.0, 0.5], [0.0, 1.0, 1.0, 0.0, 1.0]]):
        assert len(set(row.tolist())) == 3 and all(weights[i] > 0 for i in row)
    assert sorted(rows[1].tolist()) == [1, 2, 4]  # exactly the three non-zero categories
    with pytest.raises(ValueError, match="without replacement"):
        Tensor([1.0, 1.0]).multinomial(3)


def test_randperm_is_a_permutation() -> None:
    Tensor.manual_seed(7)
    permutation = Tensor.randperm(50).numpy()
    assert sorted(permutation.tolist()) == list(range(50)) and permutation.tolist() != list(range(50))


@pytest.mark.parametrize("size", [0, 2, 5, 9])
def test_static_size_selection_pads_or_truncates(size: int) -> None:
    values = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]], np.float32)
    mask = values != 0
    selected = Tensor(values).masked_select(Tensor(mask), size=size, fill_value=-9.0).numpy()
    expected = np.concatenate([values[mask], np.full(max(0, size - mask.sum()), -9.0)])[:size]
    np.testing.assert_array_equal(selected, expected)
    rows = Tensor(values).nonzero(size=size).numpy()
    expected_rows = np.concatenate([np.argwhere(mask), np.full((max(0, size - mask.sum()), 2), -1)])[:size]
    np.testing.assert_array_equal(rows, expected_rows)
    as_tuple = Tensor(values).nonzero(as_tuple=True, size=size)
    np.testing.assert_array_equal(np.stack([t.numpy() for t in as_tuple], 1).reshape(-1, 2), expected_rows)


def test_rearrange_against_numpy() -> None:
    values = np.arange(2 * 6 * 4).reshape(2, 6, 4)
    got = Tensor(values).rearrange("b (h w) c -> (b c) w h", w=3).numpy()
    np.testing.assert_array_equal(got, values.reshape(2, 2, 3, 4).transpose(0, 3, 2, 1).reshape(8, 3, 2))
    with pytest.raises(ValueError, match="not divisible"):
        Tensor(values).rearrange("b (h w) c -> b h w c", h=4)
    with pytest.raises(ValueError, match="same dims"):
        Tensor(values).rearrange("b x c -> b c", x=6)


def test_dtype_min_and_max_are_numpys() -> None:
    for dtype, numpy_type in [(dtypes.int8, np.int8), (dtypes.uint16, np.uint16), (dtypes.int64, np.int64)]:
        assert (dtype.min, dtype.max) == (np.iinfo(numpy_type).min, np.iinfo(numpy_type).max)
    assert (dtypes.float32.min, dtypes.float32.max) == (-math.inf, math.inf)


def test_conveniences() -> None:
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    assert x.reshape(None, 3, 1).shape == (2, 3, 1) and x.reshape((None, -1)).shape == (2, 3)
    assert Tensor.cat([x, x], 1).shape == (2, 6) and Tensor.stack((x, x), 0).shape == (2, 2, 3)
    assert Tensor.cat((x, x), 1).shape == (2, 6)
    assert x.size() == (2, 3) and x.size(-1) == 3 and x.dim() == 2 and x.nelement() == 6
    assert x.is_floating_point() and not Tensor([1]).is_floating_point()
    assert x.data.requires_grad is not True and x.data.tolist() == x.tolist()
    x.grad = Tensor.ones(2, 3)
    assert x.grad.tolist() == [[1.0] * 3] * 2
    assert [t.dtype for t in (x.bfloat16(), x.short(), x.char(), x.byte())] == [
        dtypes.bfloat16,
        dtypes.int16,
        dtypes.int8,
        dtypes.uint8,
    ]
    assert (Tensor([1, -8]) << 2).tolist() == [4, -32] and (Tensor([1, -8]) >> 1).tolist() == [0, -4]
    assert Tensor([math.inf, -math.inf, 1.0]).isinf(detect_negative=False).tolist() == [True, False, False]
    assert Tensor([math.inf, -math.inf, 1.0]).isinf(detect_positive=False).tolist() == [False, True, False]
    assert Tensor([[1, 2], [3, 4]]).dot(Tensor([1, 1])).tolist() == [3, 7]
    with pytest.raises(ValueError, match="permutation"):
        x.permute(0, 0)


def _alias_pairs() -> dict[str, tuple[object, object]]:
    x = Tensor(np.array([[0.25, -0.5, 0.75], [0.5, 0.125, -0.25]]))
    y = Tensor(np.array([[0.5, 0.25, -1.0], [2.0, -0.5, 0.25]]))
    b = Tensor(np.ones((2, 2, 3)))
    c = Tensor(np.ones((2, 3, 2)))
    v = Tensor(np.array([1.0, 2.0, 3.0]))
    return {
        "H": (lambda: x.H, lambda: x.t()),
        "mH": (lambda: x.mH, lambda: x.mT),
        "adjoint": (lambda: x.adjoint(), lambda: x.mT),
        "absolute": (lambda: x.absolute(), lambda: x.abs()),
        "arccos": (lambda: x.arccos(), lambda: x.acos()),
        "arccosh": (lambda: (x + 2).arccosh(), lambda: (x + 2).acosh()),
        "arcsin": (lambda: x.arcsin(), lambda: x.asin()),
        "arcsinh": (lambda: x.arcsinh(), lambda: x.asinh()),
        "arctan": (lambda: x.arctan(), lambda: x.atan()),
        "arctan2": (lambda: x.arctan2(y), lambda: x.atan2(y)),
        "arctanh": (lambda: x.arctanh(), lambda: x.atanh()),
        "addbmm": (lambda: x[:, :2].addbmm(b, c), lambda: x[:, :2] + b.bmm(c).sum(0)),
        "bfloat16": (lambda: x.bfloat16(), lambda: x.cast(dtypes.bfloat16)),
        "clamp_max": (lambda: x.clamp_max(0.2), lambda: x.clamp(max=0.2)),
        "clamp_min": (lambda: x.clamp_min(0.2), lambda: x.clamp(min=0.2)),
        "const_like": (lambda: x.const_like(3.0), lambda: x.full_like(3.0)),
        "contiguous_backward": (lambda: x.contiguous_backward(), lambda: x.contiguous()),
        "cpu": (lambda: x.cpu(), lambda: x.to("CPU")),
        "divide": (lambda: x.divide(y), lambda: x.div(y)),
        "true_divide": (lambda: x.true_divide(y), lambda: x.div(y)),
        "dsplit": (lambda: b.dsplit(3)[1], lambda: b.tensor_split(3, 2)[1]),
        "hsplit": (lambda: x.hsplit(3)[2], lambda: x.tensor_split(3, 1)[2]),
        "vsplit": (lambda: x.vsplit(2)[1], lambda: x.tensor_split(2, 0)[1]),
        "split_with_sizes": (lambda: x.split_with_sizes([1, 2], 1)[1], lambda: x.split([1, 2], 1)[1]),
        "fix": (lambda: (x * 3).fix(), lambda: (x * 3).trunc()),
        "ger": (lambda: v.ger(v), lambda: v.outer(v)),
        "vdot": (lambda: v.vdot(v), lambda: v.dot(v)),
        "moveaxis": (lambda: b.moveaxis(0, 2), lambda: b.movedim(0, 2)),
        "swapdims": (lambda: b.swapdims(0, 2), lambda: b.transpose(0, 2)),
        "multiply": (lambda: x.multiply(y), lambda: x.mul(y)),
        "subtract": (lambda: x.subtract(y, alpha=2), lambda: x.sub(y, alpha=2)),
        "negative": (lambda: x.negative(), lambda: x.neg()),
        "positive": (lambda: x.positive(), lambda: x.contiguous()),
        "sgn": (lambda: x.sgn(), lambda: x.sign()),
        "ravel": (lambda: x.ravel(), lambda: x.reshape(-1)),
        "reshape_as": (lambda: x.reshape_as(y.t()), lambda: x.reshape(3, 2)),
        "type_as": (lambda: x.type_as(Tensor([1])), lambda: x.cast(dtypes.default_int)),
        "pad_to": (lambda: x.pad_to(3, None), lambda: x.pad([(0, 1), (0, 0)])),
        "shrink_to": (lambda: x.shrink_to(None, 2), lambda: x.shrink([None, (0, 2)])),
        "usum": (lambda: x.usum(y, 1.0), lambda: x.add(y) + 1.0),
        "uprod": (lambda: x.uprod(y, 2.0), lambda: x.mul(y) * 2.0),
        "sequential": (lambda: x.sequential([lambda t: t * 2, Tensor.exp]), lambda: (x * 2).exp()),
        "newton_schulz": (lambda: x.newton_schulz(1, (1.5, -0.5)), lambda: _one_newton_schulz_step(x)),
        "sum_to_size": (lambda: x.sum_to_size(1, 3), lambda: x.sum(0, keepdim=True)),
    }


def _one_newton_schulz_step(x: Tensor) -> Tensor:
    normalized = x / ((x * x).sum().sqrt() + 1e-7)
    return normalized * 1.5 - normalized.matmul(normalized.mT).matmul(normalized) * 0.5


def test_aliases_forward() -> None:
    from gradient_classification_api import ALIASES

    pairs = _alias_pairs()
    assert set(pairs) == set(ALIASES)
    for name, (alias, target) in pairs.items():
        got, expected = alias(), target()  # type: ignore[operator]
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        np.testing.assert_allclose(got.float().numpy(), expected.float().numpy(), rtol=1e-12, err_msg=name)


def test_static_size_selection_stays_lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    # with size= the result's shape is known without reading the data: building it realizes nothing
    from kiln.tensor import tensor as tensor_module

    x = Tensor(np.array([[0.0, 1.5], [2.0, 0.0]], np.float32)).realize()
    mask = (x > 1.0).realize()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a static-size selection realized a tensor while being built")

    monkeypatch.setattr(tensor_module, "realize_uops", refuse)
    with Context(CHECK=False):  # checked mode reads index tensors by design; the default must stay lazy
        selected = x.masked_select(mask, size=3)
        rows = x.nonzero(size=3)
        columns = x.nonzero(as_tuple=True, size=1)
    assert selected.shape == (3,) and rows.shape == (3, 2) and columns[1].shape == (1,)
    monkeypatch.undo()
    assert selected.tolist() == [1.5, 2.0, 0.0] and rows.tolist() == [[0, 1], [1, 0], [-1, -1]]


def test_metadata_methods() -> None:
    x = Tensor.zeros(2, 3, 4)
    assert x.stride() == (12, 4, 1) and x.stride(-2) == 4 and x.storage_offset() == 0
    assert Tensor([1]).cpu().get_device() == -1 and Tensor([1]).cpu().is_cpu and not Tensor([1]).cpu().is_cuda
    assert x.is_same_size(Tensor.ones(2, 3, 4)) and not x.is_same_size(Tensor.ones(3, 2, 4))
    assert Tensor([2.0]).is_nonzero() and not Tensor([[0]]).is_nonzero()
    with pytest.raises(RuntimeError, match="one element"):
        Tensor([1, 2]).is_nonzero()
    values = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(Tensor(values).sum_to_size(3, 1).numpy(), values.sum((0, 2)).reshape(3, 1))
    with pytest.raises(ValueError, match="does not reduce"):
        Tensor(values).sum_to_size(2, 4)
