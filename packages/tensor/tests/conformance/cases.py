"""The conformance table: (op, inputs, call) cases replayed on kiln against torch's recorded outputs and gradients.

This module imports neither torch nor kiln: each case's `call(lib, *tensors)` uses Tensor methods both frameworks
spell alike, or `lib.<name>` where they differ (the recorder's torch namespace and the test's kiln namespace both
define those names). scripts/record_torch_conformance.py runs every case under torch and writes
torch_conformance.npz next to this file; test_conformance.py replays them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Input:
    """One input: random values of `shape` and `dtype` in [low, high), or the fixed `values`."""

    shape: tuple[int, ...] = (3, 4)
    dtype: str = "float32"
    low: float = -2.0
    high: float = 2.0
    values: Any = None


@dataclass(frozen=True)
class Case:
    """`call(lib, *inputs)` returns a tensor or a tuple of tensors; float inputs get gradients when `grad`."""

    name: str
    call: Callable[..., Any]
    inputs: tuple[Input, ...] = field(default_factory=lambda: (Input(),))
    grad: bool = True
    rtol: float | None = None
    atol: float | None = None


def _f(shape: tuple[int, ...] = (3, 4), dtype: str = "float32", low: float = -2.0, high: float = 2.0) -> Input:
    return Input(shape, dtype, low, high)


def _fixed(values: Any, dtype: str) -> Input:
    return Input(values=values, dtype=dtype)


FLOATS = ("float32", "float16", "float64")
CASES: list[Case] = []


def _add(case: Case) -> None:
    CASES.append(case)


# ---- elementwise math on every float dtype (and int input, promoted) -------------------------------------------
_UNIT = (-0.95, 0.95)
_MATH: list[tuple[str, Callable[..., Any], tuple[float, float]]] = [
    ("asin", lambda lib, x: x.asin(), _UNIT),
    ("acos", lambda lib, x: x.acos(), _UNIT),
    ("atan", lambda lib, x: x.atan(), (-6.0, 6.0)),
    ("sinh", lambda lib, x: x.sinh(), (-4.0, 4.0)),
    ("cosh", lambda lib, x: x.cosh(), (-4.0, 4.0)),
    ("asinh", lambda lib, x: x.asinh(), (-6.0, 6.0)),
    ("acosh", lambda lib, x: x.acosh(), (1.05, 6.0)),
    ("atanh", lambda lib, x: x.atanh(), _UNIT),
    ("log10", lambda lib, x: x.log10(), (0.1, 10.0)),
    ("log1p", lambda lib, x: x.log1p(), (-0.9, 3.0)),
    ("expm1", lambda lib, x: x.expm1(), (-3.0, 3.0)),
    ("softsign", lambda lib, x: lib.softsign(x), (-3.0, 3.0)),
    ("selu", lambda lib, x: lib.selu(x), (-3.0, 3.0)),
    ("celu", lambda lib, x: lib.celu(x, 0.7), (-3.0, 3.0)),
    ("logsigmoid", lambda lib, x: lib.logsigmoid(x), (-8.0, 8.0)),
    ("quick_gelu", lambda lib, x: lib.quick_gelu(x), (-4.0, 4.0)),
    ("hardshrink", lambda lib, x: lib.hardshrink(x, 0.5), (-2.0, 2.0)),
    ("softshrink", lambda lib, x: lib.softshrink(x, 0.5), (-2.0, 2.0)),
    ("tanhshrink", lambda lib, x: lib.tanhshrink(x), (-2.0, 2.0)),
    ("sinc", lambda lib, x: x.sinc(), (-2.0, 2.0)),
    ("deg2rad", lambda lib, x: x.deg2rad(), (-180.0, 180.0)),
    ("rad2deg", lambda lib, x: x.rad2deg(), (-3.0, 3.0)),
    ("logit", lambda lib, x: x.logit(), (0.05, 0.95)),
    ("erfc", lambda lib, x: x.erfc(), (-2.0, 2.0)),
    ("frac", lambda lib, x: x.frac(), (-3.0, 3.0)),
    ("sigmoid", lambda lib, x: x.sigmoid(), (-10.0, 10.0)),
    ("tanh", lambda lib, x: x.tanh(), (-5.0, 5.0)),
    ("gelu", lambda lib, x: lib.gelu(x), (-4.0, 4.0)),
    ("gelu_tanh", lambda lib, x: lib.gelu(x, approximate="tanh"), (-4.0, 4.0)),
]
for _name, _call, (_low, _high) in _MATH:
    for _dtype in FLOATS:
        # erf is Abramowitz & Stegun 7.1.26 (error 1.5e-7): float64 results match to that, not to 1e-6 relative
        _loose = 1e-5 if _dtype == "float64" and _name in ("erfc", "gelu") else None
        _add(Case(f"{_name}_{_dtype}", _call, (_f((3, 5), _dtype, _low, _high),), atol=_loose))
for _name in ("asin", "atan", "log10", "sinh"):
    _call = next(call for name, call, _ in _MATH if name == _name)
    _add(Case(f"{_name}_int32", _call, (Input((6,), "int32", 1, 3),), grad=False))
    _add(Case(f"{_name}_empty", _call, (_f((0, 3)),)))

# extremes: finite, torch-equal values and gradients far from 0; relu / abs at exactly 0
_EXTREME = [-1e38, -1e10, -1e3, -30.0, -1.0, 0.0, 1.0, 30.0, 1e3, 1e10, 1e38]
for _name in ("sigmoid", "tanh", "gelu", "softsign", "logsigmoid", "atan", "asinh"):
    _call = next(call for name, call, _ in _MATH if name == _name)
    _add(Case(f"{_name}_extremes", _call, (_fixed(_EXTREME, "float32"),)))
_add(Case("relu_at_zero", lambda lib, x: x.relu(), (_fixed([-1.0, 0.0, -0.0, 2.0], "float32"),)))
_add(Case("abs_at_zero", lambda lib, x: x.abs(), (_fixed([-1.0, 0.0, -0.0, 2.0], "float32"),)))

# ---- binary math: broadcasting, dtypes -----------------------------------------------------------------------
_BINARY: list[tuple[str, Callable[..., Any]]] = [
    ("logaddexp", lambda lib, a, b: a.logaddexp(b)),
    ("logaddexp2", lambda lib, a, b: a.logaddexp2(b)),
    ("atan2", lambda lib, a, b: a.atan2(b)),
    ("hypot", lambda lib, a, b: a.hypot(b)),
    ("copysign", lambda lib, a, b: a.copysign(b)),
    ("fmax", lambda lib, a, b: a.fmax(b)),
    ("fmin", lambda lib, a, b: a.fmin(b)),
    ("xlogy", lambda lib, a, b: a.xlogy(b)),
]
for _name, _call in _BINARY:
    _positive = _name == "xlogy"
    for _dtype in ("float32", "float64"):
        second = _f((4,), _dtype, 0.1 if _positive else -2.0, 3.0)
        _add(Case(f"{_name}_broadcast_{_dtype}", _call, (_f((3, 1), _dtype), second)))
_add(
    Case(
        "mod_int",
        lambda lib, a, b: lib.mod(a, b),
        (_fixed([-7, -3, 0, 3, 7], "int32"), _fixed([2, -2, 3, 2, -3], "int32")),
        grad=False,
    )
)
_add(
    Case(
        "mod_float",
        lambda lib, a, b: lib.mod(a, b),
        (_f((5,), low=-5, high=5), _fixed([1.5, -2.0, 2.5, -0.5, 3.0], "float32")),
    )
)
_add(
    Case(
        "isclose",
        lambda lib, a, b: a.isclose(b, rtol=1e-2, atol=1e-3),
        (
            _fixed([1.0, 2.0, float("inf"), float("nan"), 0.0], "float32"),
            _fixed([1.001, 2.1, float("inf"), float("nan"), 1e-4], "float32"),
        ),
        grad=False,
    )
)
_add(
    Case("signbit", lambda lib, x: x.signbit(), (_fixed([-0.0, 0.0, -1.0, 2.0, float("-inf")], "float32"),), grad=False)
)
_add(
    Case(
        "heaviside",
        lambda lib, x, v: x.heaviside(v),
        (_fixed([-1.0, 0.0, 2.0], "float32"), _fixed([0.5], "float32")),
        grad=False,
    )
)
_add(
    Case(
        "nan_to_num",
        lambda lib, x: x.nan_to_num(nan=1.0, posinf=2.0, neginf=-2.0),
        (_fixed([float("nan"), float("inf"), float("-inf"), 3.0], "float32"),),
    )
)
# exponents >= 0 only: torch's ldexp gradient computes 2**e in integers (2**-2 -> 0), kiln's gives 0.25
_add(Case("ldexp", lambda lib, x, e: x.ldexp(e), (_f((4,)), _fixed([0, 1, 2, 3], "int32"))))
_add(Case("float_power", lambda lib, x: x.float_power(2.5), (_f((4,), low=0.5, high=2.0),)))
_add(
    Case(
        "pow_int_negative_tensor",
        lambda lib, a, b: a.pow(b),
        (_fixed([1, 2, -1, -1, 3], "int32"), _fixed([-1, -2, -1, -2, 0], "int32")),
        grad=False,
    )
)
_add(Case("lshift_rshift", lambda lib, a: (a << 2, a >> 1), (_fixed([1, -4, 7, 0], "int32"),), grad=False))
_add(
    Case(
        "isinf_directions",
        lambda lib, x: (lib.isposinf(x), lib.isneginf(x)),
        (_fixed([1.0, float("inf"), float("-inf")], "float32"),),
        grad=False,
    )
)

# ---- activations and normalization with dims -------------------------------------------------------------
_add(Case("softmin_dim0", lambda lib, x: lib.softmin(x, 0), (_f((3, 4)),)))
_add(Case("softmin_neg_dim", lambda lib, x: lib.softmin(x, -1), (_f((2, 3, 4)),)))
_add(Case("normalize_p2", lambda lib, x: lib.normalize(x), (_f((3, 4)),)))
_add(Case("normalize_p1_dim_neg", lambda lib, x: lib.normalize(x, p=1.0, dim=-1), (_f((2, 3, 4)),)))
_add(Case("prelu", lambda lib, x, w: lib.prelu(x, w), (_f((2, 3, 4)), _f((3,), low=0.1, high=0.5))))
_add(Case("norm_fro", lambda lib, x: x.norm(), (_f((3, 4)),)))
_add(Case("norm_p3_dim", lambda lib, x: x.norm(3.0, dim=1), (_f((3, 4), low=0.5, high=2.0),)))
_add(Case("dist", lambda lib, a, b: a.dist(b), (_f((3, 4)), _f((4,)))))
_add(Case("log_softmax_45x65", lambda lib, x: x.log_softmax(0), (_f((45, 65)),)))
_add(Case("comparison_gradient", lambda lib, a, b: (a < b).float() * a, (_f((4,)), _f((4,)))))
_add(Case("cat_empty_operand", lambda lib, a, b: lib.cat([a, b], 0) * 2.0, (_f((2, 3)), _f((0, 3)))))

# ---- scans and reductions ------------------------------------------------------------------------------------
for _dtype in ("float32", "float64"):
    _add(Case(f"cumprod_{_dtype}", lambda lib, x: x.cumprod(1), (_f((3, 5), _dtype, 0.5, 1.5),)))
    _add(Case(f"logcumsumexp_{_dtype}", lambda lib, x: x.logcumsumexp(-1), (_f((3, 5), _dtype, -5.0, 5.0),)))
_add(Case("cumprod_int", lambda lib, x: x.cumprod(0), (_fixed([1, -2, 3, 2], "int32"),), grad=False))
_add(Case("cumprod_with_zero", lambda lib, x: x.cumprod(0), (_fixed([2.0, 0.0, 3.0, 4.0], "float32"),)))
_add(
    Case(
        "cummin",
        lambda lib, x: x.cummin(1),
        (_fixed([[3.0, 1.0, 2.0, 1.0, 0.5], [0.0, 1.0, -1.0, 2.0, -1.0]], "float32"),),
    )
)
_add(Case("cummin_neg_dim_int", lambda lib, x: x.cummin(-1), (_fixed([[5, 3, 4, 3, 1]], "int32"),), grad=False))
_add(Case("std_mean", lambda lib, x: lib.std_mean(x, 1), (_f((3, 5)),)))
_add(Case("var_mean_correction0", lambda lib, x: lib.var_mean(x, (0, 1), correction=0, keepdim=True), (_f((3, 5)),)))
_add(Case("amax_dims", lambda lib, x: x.amax((0, 2)), (_f((2, 3, 4)),)))
_add(Case("amin_neg_dim", lambda lib, x: x.amin(-1, keepdim=True), (_f((2, 3, 4)),)))
_add(Case("amax_ties", lambda lib, x: x.amax(1), (_fixed([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], "float32"),)))
_add(Case("aminmax", lambda lib, x: x.aminmax(dim=0), (_f((3, 4)),)))
_add(
    Case(
        "nansum", lambda lib, x: x.nansum(1), (_fixed([[1.0, float("nan"), 2.0], [float("nan"), 3.0, 4.0]], "float32"),)
    )
)
_add(
    Case(
        "nanmean",
        lambda lib, x: x.nanmean(1),
        (_fixed([[1.0, float("nan"), 2.0], [float("nan"), 3.0, 4.0]], "float32"),),
    )
)
_add(Case("count_nonzero", lambda lib, x: x.count_nonzero(1), (_fixed([[0, 1, 2], [0, 0, 3]], "int32"),), grad=False))
_add(Case("sum_dtype", lambda lib, x: x.sum(1, dtype=lib.float64), (_f((3, 4)),)))
_add(
    Case("prod_dtype_int", lambda lib, x: x.prod(0, dtype=lib.int32), (_fixed([[1, 2], [3, -4]], "int32"),), grad=False)
)

# ---- layout and selection ------------------------------------------------------------------------------------
_add(Case("clone", lambda lib, x: x.clone() * 3.0, (_f(),)))
_add(Case("roll_dims", lambda lib, x: x.roll((1, -2), (0, 1)), (_f((3, 4)),)))
_add(Case("roll_flat", lambda lib, x: x.roll(5), (_f((3, 4)),)))
_add(Case("diag_vector_offset", lambda lib, x: x.diag(1), (_f((3,)),)))
_add(Case("diag_matrix_neg", lambda lib, x: x.diag(-1), (_f((3, 4)),)))
_add(Case("diagonal_dims", lambda lib, x: x.diagonal(1, 0, 2), (_f((3, 2, 4)),)))
_add(Case("meshgrid_ij", lambda lib, a, b: lib.meshgrid(a, b, indexing="ij"), (_f((3,)), _f((2,)))))
_add(Case("meshgrid_xy", lambda lib, a, b: lib.meshgrid(a, b, indexing="xy"), (_f((3,)), _f((2,)))))
_add(Case("unfold", lambda lib, x: x.unfold(1, 3, 2), (_f((2, 7)),)))
_add(Case("unfold_neg_dim", lambda lib, x: x.unfold(-1, 2, 1), (_f((2, 3, 4)),)))
_add(Case("repeat_interleave_int", lambda lib, x: x.repeat_interleave(2, dim=1), (_f((2, 3)),)))
_add(Case("repeat_interleave_flat", lambda lib, x: x.repeat_interleave(3), (_f((2, 2)),)))
_add(
    Case("masked_select", lambda lib, x, m: x.masked_select(m), (_f((3, 4)), _fixed([True, False, True, True], "bool")))
)
_add(Case("nonzero", lambda lib, x: x.nonzero(), (_fixed([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]], "float32"),), grad=False))
_add(Case("nonzero_empty", lambda lib, x: x.nonzero(), (_fixed([[0.0, 0.0]], "float32"),), grad=False))
_add(Case("rot90", lambda lib, x: x.rot90(1, (0, 1)), (_f((3, 4)),)))
_add(Case("rot90_k3_dims", lambda lib, x: x.rot90(3, (1, 2)), (_f((2, 3, 4)),)))
_add(Case("flips", lambda lib, x: (x.fliplr(), x.flipud()), (_f((3, 4)),)))
_add(Case("movedim", lambda lib, x: x.movedim((0, 1), (2, 0)), (_f((2, 3, 4)),)))
_add(Case("swapaxes_t_mT", lambda lib, x, y: (x.swapaxes(0, -1), y.t(), x.mT), (_f((2, 3, 4)), _f((3, 4)))))
_add(Case("narrow_select", lambda lib, x: (x.narrow(1, -3, 2), x.select(0, -1)), (_f((3, 4)),)))
_add(Case("unbind", lambda lib, x: x.unbind(1), (_f((2, 3)),)))
_add(Case("index_select", lambda lib, x, i: x.index_select(1, i), (_f((3, 4)), _fixed([3, 0, 3], "int64"))))
_add(Case("take", lambda lib, x, i: x.take(i), (_f((3, 4)), _fixed([[0, 11], [5, 5]], "int64"))))
_add(Case("take_along_dim", lambda lib, x, i: x.take_along_dim(i, 1), (_f((3, 4)), _fixed([[0], [3], [1]], "int64"))))
_add(Case("tensor_split", lambda lib, x: x.tensor_split(3, 1), (_f((2, 5)),)))
_add(Case("tensor_split_indices", lambda lib, x: x.tensor_split([1, 3], 0), (_f((5, 2)),)))
_add(Case("tile", lambda lib, x: x.tile((2, 1, 2)), (_f((2, 3)),)))
_add(Case("expand_as_view_as", lambda lib, x, y: (x.expand_as(y), y.view_as(y.t())), (_f((1, 4)), _f((3, 4)))))
_add(Case("new_zeros", lambda lib, x: x.new_zeros((2, 3)) + x.sum(), (_f((2,)),)))
for _reduce in ("sum", "prod", "mean", "amax", "amin"):
    for _include in (True, False):
        _add(
            Case(
                f"scatter_reduce_{_reduce}_{'self' if _include else 'noself'}",
                lambda lib, x, i, s, r=_reduce, inc=_include: x.scatter_reduce(1, i, s, r, include_self=inc),
                (_f((2, 4)), _fixed([[0, 0, 3], [1, 1, 1]], "int64"), _f((2, 3))),
            )
        )

# ---- linear algebra ----------------------------------------------------------------------------------------
_add(Case("dot_vectors", lambda lib, a, b: a.dot(b), (_f((5,)), _f((5,)))))
_add(Case("dot_nd_is_matmul", lambda lib, a, b: lib.dot(a, b), (_f((2, 3, 4)), _f((4, 2)))))
_add(Case("kron", lambda lib, a, b: a.kron(b), (_f((2, 3)), _f((2, 2)))))
_add(Case("trace", lambda lib, x: x.trace(), (_f((3, 4)),)))
_add(Case("outer_inner", lambda lib, a, b, c: (a.outer(b), c.inner(b)), (_f((3,)), _f((4,)), _f((2, 4)))))
_add(Case("addmm", lambda lib, s, a, b: s.addmm(a, b, beta=0.5, alpha=2.0), (_f((4,)), _f((3, 5)), _f((5, 4)))))
_add(
    Case(
        "addmv_addr", lambda lib, s, m, v, t: (s.addmv(m, v), m.addr(s, v)), (_f((3,)), _f((3, 4)), _f((4,)), _f((1,)))
    )
)
_add(
    Case(
        "baddbmm_bmm",
        lambda lib, s, a, b: (s.baddbmm(a, b, alpha=0.5), a.bmm(b)),
        (_f((2, 3, 2)), _f((2, 3, 4)), _f((2, 4, 2))),
    )
)
_add(Case("mm_mv", lambda lib, a, b, v: (a.mm(b), a.mv(v)), (_f((3, 4)), _f((4, 2)), _f((4,)))))
_add(Case("matrix_power", lambda lib, x: x.matrix_power(3), (_f((3, 3), low=-1.0, high=1.0),)))
_add(Case("qr_tall", lambda lib, x: lib.qr(x), (_f((5, 3)),), atol=1e-4))
_add(Case("qr_wide_batched", lambda lib, x: lib.qr(x), (_f((2, 3, 4)),), atol=1e-4))
_add(Case("svd_values", lambda lib, x: lib.svdvals(x), (_f((4, 3)),), grad=False, atol=1e-4))
_add(Case("svd_values_gradient", lambda lib, x: lib.svdvals(x), (_f((3, 2), "float64"),)))
_add(Case("einsum_ellipsis_middle", lambda lib, a, b: lib.einsum("i...j,jk->...ik", a, b), (_f((2, 3, 4)), _f((4, 2)))))
_add(Case("einsum_trace_batch", lambda lib, a: lib.einsum("...ii->...", a), (_f((2, 3, 3)),)))

# ---- order statistics, differences, covariance, histograms -----------------------------------------------------
_add(Case("kthvalue", lambda lib, x: x.kthvalue(2, 1), (_f((3, 5)),)))
_add(Case("kthvalue_keepdim_neg", lambda lib, x: x.kthvalue(3, -2, keepdim=True), (_f((2, 4, 3)),)))
_add(Case("median_all", lambda lib, x: x.median(), (_f((3, 4)),)))
_add(Case("median_dim", lambda lib, x: x.median(0), (_f((4, 3)),)))
_add(Case("msort", lambda lib, x: x.msort(), (_f((4, 3)),)))
for _interpolation in ("linear", "lower", "higher", "midpoint", "nearest"):
    _add(
        Case(
            f"quantile_{_interpolation}",
            lambda lib, x, i=_interpolation: x.quantile(0.3, 1, interpolation=i),
            (_f((3, 6)),),
        )
    )
_add(Case("quantile_all_keepdim", lambda lib, x: x.quantile(0.75, keepdim=True), (_f((3, 4)),)))
_add(Case("diff", lambda lib, x: x.diff(), (_f((3, 5)),)))
_add(Case("diff_n2_dim0_prepend", lambda lib, x, p: x.diff(2, 0, prepend=p), (_f((4, 3)), _f((1, 3)))))
_add(Case("diff_bool", lambda lib, x: x.diff(), (_fixed([True, True, False, True], "bool"),), grad=False))
_add(Case("cov", lambda lib, x: x.cov(), (_f((3, 6)),)))
_add(Case("cov_correction0", lambda lib, x: x.cov(correction=0), (_f((2, 5)),)))
_add(Case("corrcoef", lambda lib, x: x.corrcoef(), (_f((3, 6)),)))
_add(Case("histc", lambda lib, x: x.histc(bins=5, min=-1.0, max=1.0), (_f((20,)),), grad=False))
_add(Case("histc_data_range", lambda lib, x: x.histc(bins=4), (_f((20,)),), grad=False))
_add(Case("bincount", lambda lib, x: x.bincount(minlength=7), (_fixed([1, 3, 3, 0, 5], "int64"),), grad=False))
_add(Case("bincount_weights", lambda lib, x, w: x.bincount(w), (_fixed([1, 3, 3, 0], "int64"), _f((4,))), grad=False))

# ---- out-of-place placement, diagonal matrices, multiply-adds, cross -------------------------------------------
_add(
    Case(
        "index_add",
        lambda lib, x, i, s: x.index_add(1, i, s, alpha=2.0),
        (_f((2, 4)), _fixed([0, 3, 0], "int64"), _f((2, 3))),
    )
)
_add(Case("index_fill", lambda lib, x, i: x.index_fill(0, i, -1.5), (_f((3, 2)), _fixed([2, 0], "int64"))))
_add(Case("index_copy", lambda lib, x, i, s: x.index_copy(0, i, s), (_f((4, 2)), _fixed([3, 1], "int64"), _f((2, 2)))))
_add(
    Case(
        "masked_scatter",
        lambda lib, x, m, s: x.masked_scatter(m, s),
        (_f((3, 4)), _fixed([True, False, False, True], "bool"), _f((8,))),
    )
)
_add(Case("select_scatter", lambda lib, x, s: x.select_scatter(s, 1, -1), (_f((3, 4)), _f((3,)))))
_add(Case("slice_scatter", lambda lib, x, s: x.slice_scatter(s, 1, 1, None, 2), (_f((3, 5)), _f((3, 2)))))
_add(Case("diag_embed", lambda lib, x: x.diag_embed(1, 0, 2), (_f((2, 3)),)))
_add(Case("diagflat", lambda lib, x: x.diagflat(-1), (_f((2, 2)),)))
_add(Case("diagonal_scatter", lambda lib, x, s: x.diagonal_scatter(s, 1), (_f((3, 4)), _f((3,)))))
_add(
    Case(
        "addcmul_addcdiv",
        lambda lib, x, a, b: (x.addcmul(a, b, value=0.5), x.addcdiv(a, b, value=2.0)),
        (_f((3, 1)), _f((4,)), _f((3, 4), low=0.5, high=2.0)),
    )
)
_add(Case("cross", lambda lib, a, b: a.cross(b, dim=1), (_f((2, 3)), _f((2, 3)))))

# ---- tinygrad spellings with a torch equivalent ------------------------------------------------------------------
_add(Case("layernorm", lambda lib, x: lib.layernorm(x), (_f((2, 3, 4)),)))
_add(
    Case(
        "batchnorm",
        lambda lib, x, w, b, m, s: lib.batchnorm(x, w, b, m, s),
        (_f((2, 3, 4)), _f((3,)), _f((3,)), _f((3,)), _f((3,), low=0.5, high=2.0)),
    )
)
_add(Case("rearrange", lambda lib, x: lib.rearrange_bhwc(x), (_f((2, 6, 4)),)))

# ---- zero-size inputs ------------------------------------------------------------------------------------------
_ZERO = (0, 3)
_add(Case("empty_cumprod", lambda lib, x: x.cumprod(0), (_f(_ZERO),)))
_add(Case("empty_logcumsumexp", lambda lib, x: x.logcumsumexp(1), (_f((2, 0)),)))
_add(Case("empty_roll", lambda lib, x: x.roll(2, 0), (_f(_ZERO),)))
_add(Case("empty_diagonal", lambda lib, x: x.diagonal(), (_f(_ZERO),)))
_add(Case("empty_amax_kept_dim", lambda lib, x: x.amax(0), (_f((3, 0)),)))
_add(Case("empty_nansum", lambda lib, x: x.nansum(0), (_f(_ZERO),)))
_add(Case("empty_logaddexp", lambda lib, a, b: a.logaddexp(b), (_f(_ZERO), _f((3,)))))
_add(Case("empty_kron", lambda lib, a, b: a.kron(b), (_f(_ZERO), _f((2, 2)))))
_add(Case("empty_movedim", lambda lib, x: x.movedim(0, 1), (_f(_ZERO),)))
_add(
    Case("empty_masked_select", lambda lib, x, m: x.masked_select(m), (_f(_ZERO), _fixed([True, False, True], "bool")))
)
_add(Case("empty_repeat_interleave", lambda lib, x: x.repeat_interleave(2, dim=0), (_f(_ZERO),)))
_add(Case("empty_tile", lambda lib, x: x.tile(2, 1), (_f(_ZERO),)))
_add(Case("empty_diff", lambda lib, x: x.diff(dim=0), (_f(_ZERO),)))
_add(Case("empty_cross_batch", lambda lib, a, b: a.cross(b, dim=1), (_f(_ZERO), _f(_ZERO))))

# ---- more dtypes: float16 / float64 / integers for the layout and scan ops -------------------------------------
for _dtype in ("float16", "float64", "int32"):
    _grad = _dtype != "int32"
    _in = Input((3, 4), _dtype, -3, 3)
    _add(Case(f"roll_{_dtype}", lambda lib, x: x.roll(1, -1), (_in,), grad=_grad))
    _add(Case(f"diagonal_{_dtype}", lambda lib, x: x.diagonal(-1), (_in,), grad=_grad))
    _add(Case(f"rot90_{_dtype}", lambda lib, x: x.rot90(2), (_in,), grad=_grad))
    _add(Case(f"amax_{_dtype}", lambda lib, x: x.amax(-1), (_in,), grad=_grad))
    _add(Case(f"cummin_{_dtype}", lambda lib, x: x.cummin(0), (_in,), grad=_grad))
    _add(Case(f"kron_{_dtype}", lambda lib, a: a.kron(a[:2, :2]), (_in,), grad=_grad))
    _add(
        Case(
            f"index_select_{_dtype}", lambda lib, x, i: x.index_select(0, i), (_in, _fixed([2, 0], "int64")), grad=_grad
        )
    )
_add(Case("cumprod_float16", lambda lib, x: x.cumprod(1), (_f((2, 4), "float16", 0.5, 1.5),)))
_add(Case("logaddexp_float16", lambda lib, a, b: a.logaddexp(b), (_f((3, 1), "float16"), _f((4,), "float16"))))
_add(Case("nanmean_float64", lambda lib, x: x.nanmean(0), (_fixed([[1.0, float("nan")], [3.0, 4.0]], "float64"),)))

# ---- the log-gamma family ------------------------------------------------------------------------------------
for _dtype in ("float32", "float64"):
    _add(Case(f"lgamma_{_dtype}", lambda lib, x: x.lgamma(), (_f((3, 5), _dtype, 0.1, 12.0),)))
    _add(
        Case(f"lgamma_negative_{_dtype}", lambda lib, x: x.lgamma(), (_fixed([-0.5, -1.5, -2.25, -3.75, 0.3], _dtype),))
    )
    _add(Case(f"digamma_{_dtype}", lambda lib, x: x.digamma(), (_f((3, 5), _dtype, 0.1, 12.0),)))
    _add(
        Case(
            f"digamma_negative_{_dtype}", lambda lib, x: x.digamma(), (_fixed([-0.5, -1.5, -2.25, -3.75, 0.3], _dtype),)
        )
    )
_add(Case("lgamma_large", lambda lib, x: x.lgamma(), (_fixed([100.0, 1e4, 1e10, 3e30], "float32"),)))
_add(Case("polygamma0", lambda lib, x: x.polygamma(0), (_f((4,), low=0.5, high=5.0),)))
_add(Case("mvlgamma", lambda lib, x: x.mvlgamma(3), (_f((4,), low=1.5, high=5.0),)))
_add(Case("lgamma_float16", lambda lib, x: x.lgamma(), (_f((4,), "float16", 0.5, 6.0),)))

# ---- determinants, solves, inverses, Cholesky, pseudo-inverse (float64: well-conditioned small systems) ----------
_SPD = [[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]]
_add(Case("det_batched", lambda lib, x: x.det(), (_f((2, 3, 3), "float64"),)))
_add(Case("det_float32", lambda lib, x: x.det(), (_f((3, 3)),), atol=1e-4))
_add(Case("slogdet", lambda lib, x: x.slogdet(), (_f((2, 3, 3), "float64"),)))
_add(Case("logdet_spd", lambda lib, x: x.logdet(), (_fixed(_SPD, "float64"),)))
_add(Case("solve_matrix", lambda lib, a, b: lib.solve(a, b), (_fixed(_SPD, "float64"), _f((3, 2), "float64"))))
_add(Case("solve_vector_batched", lambda lib, a, b: lib.solve(a, b), (_f((2, 3, 3), "float64"), _f((2, 3), "float64"))))
_add(Case("inverse", lambda lib, x: x.inverse(), (_fixed(_SPD, "float64"),)))
_add(Case("cholesky", lambda lib, x: x.cholesky(), (_fixed(_SPD, "float64"),)))
_add(Case("cholesky_upper", lambda lib, x: lib.cholesky_upper(x), (_fixed(_SPD, "float64"),)))
_add(Case("pinverse", lambda lib, x: x.pinverse(), (_f((4, 2), "float64"),)))
_add(Case("matrix_power_negative", lambda lib, x: x.matrix_power(-2), (_fixed(_SPD, "float64"),)))
_add(
    Case(
        "unique",
        lambda lib, x: x.unique(return_inverse=True, return_counts=True),
        (_fixed([[3, 1, 3], [2, 5, 1]], "int32"),),
        grad=False,
    )
)
_add(Case("unique_float", lambda lib, x: x.unique(), (_fixed([0.5, -1.0, 0.5, 2.0, -1.0], "float32"),), grad=False))
_add(
    Case(
        "unique_consecutive",
        lambda lib, x: x.unique_consecutive(return_inverse=True, return_counts=True),
        (_fixed([1, 1, 2, 2, 1, 3, 3], "int64"),),
        grad=False,
    )
)
_add(Case("unique_empty", lambda lib, x: x.unique(return_counts=True), (_f((0,)),), grad=False))
for _dtype in ("float16", "float32", "float64"):
    _add(
        Case(
            f"nan_to_num_defaults_{_dtype}",
            lambda lib, x: x.nan_to_num(),
            (_fixed([float("nan"), float("inf"), float("-inf"), 1.5], _dtype),),
        )
    )
