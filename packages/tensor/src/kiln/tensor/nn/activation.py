"""Activation layers with `torch.nn`'s names, constructor arguments and `extra_repr`, as modules over the functions
of `kiln.tensor.nn.functional` (which call the Tensor methods of the same names)."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn import init
from kiln.tensor.nn.applied import AppliedFunction
from kiln.tensor.nn.arguments import check_positive_int
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = [
    "CELU", "ELU", "GELU", "GLU", "SELU", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU",
    "LogSigmoid", "LogSoftmax", "Mish", "PReLU", "RReLU", "ReLU", "ReLU6", "Sigmoid", "SiLU", "Softmax", "Softmax2d",
    "Softmin", "Softplus", "Softshrink", "Softsign", "Tanh", "Tanhshrink", "Threshold",
]  # fmt: skip


def _inplace_note(inplace: bool, lead: str = ", ") -> str:
    # torch's reprs mention inplace only when it is set
    return f"{lead}inplace=True" if inplace else ""


class ReLU(AppliedFunction, function=F.relu, arguments=("inplace",)):
    """max(x, 0), like `torch.nn.ReLU`."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace


class ReLU6(ReLU, function=F.relu6, doc="min(max(x, 0), 6)"): ...


class SELU(ReLU, function=F.selu, doc="The self-normalizing ELU"): ...


class SiLU(ReLU, function=F.silu, doc="x * sigmoid(x)"): ...


class Mish(ReLU, function=F.mish, doc="x * tanh(softplus(x))"): ...


class Hardswish(ReLU, function=F.hardswish):
    """x * relu6(x + 3) / 6, like `torch.nn.Hardswish` (whose repr does not show inplace)."""

    def extra_repr(self) -> str:
        return ""


class Hardsigmoid(Hardswish, function=F.hardsigmoid, doc="relu6(x + 3) / 6"): ...


class LeakyReLU(AppliedFunction, function=F.leaky_relu, arguments=("negative_slope", "inplace")):
    """x where positive, negative_slope * x elsewhere, like `torch.nn.LeakyReLU`."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace


class ELU(AppliedFunction, function=F.elu, arguments=("alpha", "inplace")):
    """x where positive, alpha (exp(x) - 1) elsewhere, like `torch.nn.ELU`."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace


class CELU(ELU, function=F.celu, doc="max(0, x) + min(0, alpha (exp(x / alpha) - 1))"): ...


class GELU(AppliedFunction, function=F.gelu, arguments=("approximate",)):
    """The Gaussian error linear unit (`approximate` 'none' or 'tanh'), like `torch.nn.GELU`."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(AppliedFunction, function=F.softplus, arguments=("beta", "threshold")):
    """log(1 + exp(beta x)) / beta, linear above `threshold`, like `torch.nn.Softplus`."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold


class Hardtanh(AppliedFunction, function=F.hardtanh, arguments=("min_val", "max_val", "inplace")):
    """x clamped to [min_val, max_val], like `torch.nn.Hardtanh`."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"Hardtanh needs max_val > min_val, got min_val={min_val}, max_val={max_val}")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace


class Threshold(AppliedFunction, function=F.threshold, arguments=("threshold", "value", "inplace")):
    """x where x > threshold, else value, like `torch.nn.Threshold`."""

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace


class Hardshrink(AppliedFunction, function=F.hardshrink, arguments=("lambd",)):
    """x where |x| > lambd, else 0, like `torch.nn.Hardshrink`."""

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink, function=F.softshrink, doc="x shrunk toward 0 by lambd"): ...


class Tanh(AppliedFunction, function=F.tanh, doc="tanh(x)"): ...


class Sigmoid(AppliedFunction, function=F.sigmoid, doc="1 / (1 + exp(-x))"): ...


class LogSigmoid(AppliedFunction, function=F.logsigmoid, doc="log(sigmoid(x))"): ...


class Softsign(AppliedFunction, function=F.softsign, doc="x / (1 + |x|)"): ...


class Tanhshrink(AppliedFunction, function=F.tanhshrink, doc="x - tanh(x)"): ...


class Softmax(AppliedFunction, function=F.softmax, arguments=("dim",)):
    """softmax along `dim`, like `torch.nn.Softmax` (dim=None: torch's legacy choice, 0 for 0-, 1- and 3-d
    inputs, else 1, with its deprecation warning)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim


class LogSoftmax(Softmax, function=F.log_softmax, doc="log(softmax(x)) along `dim`"): ...


class Softmin(Softmax, function=F.softmin, doc="softmax(-x) along `dim`"): ...


class GLU(AppliedFunction, function=F.glu, arguments=("dim",)):
    """a * sigmoid(b) for the halves a, b of the input along `dim`, like `torch.nn.GLU`."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim


class PReLU(Module):
    """x where positive, weight * x elsewhere, with a learned weight of `num_parameters` entries (1, or one per
    channel of dim 1) filled with `init`, like `torch.nn.PReLU`."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: str | None = None) -> None:
        super().__init__()
        check_positive_int(num_parameters, "PReLU num_parameters")
        self.num_parameters = num_parameters
        self.init = init
        self.weight = _filled((num_parameters,), init, device)

    def forward(self, x: Tensor) -> Tensor:
        """F.prelu(x, weight)."""
        return F.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


def _filled(shape: tuple[int, ...], value: float, device: str | None) -> Tensor:
    return init.parameter(Tensor.full(shape, float(value), device=device))


class Softmax2d(Module):
    """softmax over the channels (dim -3) of (N, C, H, W) or (C, H, W), like `torch.nn.Softmax2d`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.softmax(x, -3)."""
        if x.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {x.ndim}D instead")
        return F.softmax(x, -3)


class RReLU(Module):
    """Leaky ReLU with a random slope from U(lower, upper) per element in training, (lower + upper) / 2 in eval,
    like `torch.nn.RReLU`."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False) -> None:
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, x: Tensor) -> Tensor:
        """F.rrelu(x, lower, upper, training)."""
        return F.rrelu(x, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}{_inplace_note(self.inplace)}"
