"""Activation layers with `torch.nn`'s names, constructor arguments and `extra_repr`, as modules over the functions
of `kiln.tensor.nn.functional` (which call the Tensor methods of the same names)."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn import init
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


class ReLU(Module):
    """max(x, 0), like `torch.nn.ReLU`."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        """F.relu(x)."""
        return F.relu(x, self.inplace)

    def extra_repr(self) -> str:
        return _inplace_note(self.inplace, "")


class ReLU6(ReLU):
    """min(max(x, 0), 6), like `torch.nn.ReLU6`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.relu6(x)."""
        return F.relu6(x, self.inplace)


class SELU(ReLU):
    """The self-normalizing ELU, like `torch.nn.SELU`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.selu(x)."""
        return F.selu(x, self.inplace)


class SiLU(ReLU):
    """x * sigmoid(x), like `torch.nn.SiLU`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.silu(x)."""
        return F.silu(x, self.inplace)


class Mish(ReLU):
    """x * tanh(softplus(x)), like `torch.nn.Mish`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.mish(x)."""
        return F.mish(x, self.inplace)


class Hardswish(ReLU):
    """x * relu6(x + 3) / 6, like `torch.nn.Hardswish` (whose repr does not show inplace)."""

    def forward(self, x: Tensor) -> Tensor:
        """F.hardswish(x)."""
        return F.hardswish(x, self.inplace)

    def extra_repr(self) -> str:
        return ""


class Hardsigmoid(Hardswish):
    """relu6(x + 3) / 6, like `torch.nn.Hardsigmoid`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.hardsigmoid(x)."""
        return F.hardsigmoid(x, self.inplace)


class LeakyReLU(Module):
    """x where positive, negative_slope * x elsewhere, like `torch.nn.LeakyReLU`."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x: Tensor) -> Tensor:
        """F.leaky_relu(x, negative_slope)."""
        return F.leaky_relu(x, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}{_inplace_note(self.inplace)}"


class ELU(Module):
    """x where positive, alpha (exp(x) - 1) elsewhere, like `torch.nn.ELU`."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x: Tensor) -> Tensor:
        """F.elu(x, alpha)."""
        return F.elu(x, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}{_inplace_note(self.inplace)}"


class CELU(ELU):
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)), like `torch.nn.CELU`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.celu(x, alpha)."""
        return F.celu(x, self.alpha, self.inplace)


class GELU(Module):
    """The Gaussian error linear unit (`approximate` 'none' or 'tanh'), like `torch.nn.GELU`."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        """F.gelu(x, approximate)."""
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    """log(1 + exp(beta x)) / beta, linear above `threshold`, like `torch.nn.Softplus`."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        """F.softplus(x, beta, threshold)."""
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    """x clamped to [min_val, max_val], like `torch.nn.Hardtanh`."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"Hardtanh needs max_val > min_val, got min_val={min_val}, max_val={max_val}")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, x: Tensor) -> Tensor:
        """F.hardtanh(x, min_val, max_val)."""
        return F.hardtanh(x, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_note(self.inplace)}"


class Threshold(Module):
    """x where x > threshold, else value, like `torch.nn.Threshold`."""

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, x: Tensor) -> Tensor:
        """F.threshold(x, threshold, value)."""
        return F.threshold(x, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}{_inplace_note(self.inplace)}"


class Hardshrink(Module):
    """x where |x| > lambd, else 0, like `torch.nn.Hardshrink`."""

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, x: Tensor) -> Tensor:
        """F.hardshrink(x, lambd)."""
        return F.hardshrink(x, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    """x shrunk toward 0 by lambd, like `torch.nn.Softshrink`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.softshrink(x, lambd)."""
        return F.softshrink(x, self.lambd)


class Tanh(Module):
    """tanh(x), like `torch.nn.Tanh`."""

    def forward(self, x: Tensor) -> Tensor:
        """x.tanh()."""
        return x.tanh()


class Sigmoid(Module):
    """1 / (1 + exp(-x)), like `torch.nn.Sigmoid`."""

    def forward(self, x: Tensor) -> Tensor:
        """x.sigmoid()."""
        return x.sigmoid()


class LogSigmoid(Module):
    """log(sigmoid(x)), like `torch.nn.LogSigmoid`."""

    def forward(self, x: Tensor) -> Tensor:
        """x.logsigmoid()."""
        return x.logsigmoid()


class Softsign(Module):
    """x / (1 + |x|), like `torch.nn.Softsign`."""

    def forward(self, x: Tensor) -> Tensor:
        """x.softsign()."""
        return x.softsign()


class Tanhshrink(Module):
    """x - tanh(x), like `torch.nn.Tanhshrink`."""

    def forward(self, x: Tensor) -> Tensor:
        """x.tanhshrink()."""
        return x.tanhshrink()


class Softmax(Module):
    """softmax along `dim`, like `torch.nn.Softmax` (dim=None: torch's legacy choice, 0 for 0-, 1- and 3-d
    inputs, else 1, with its deprecation warning)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        """F.softmax(x, dim)."""
        return F.softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """log(softmax(x)) along `dim`, like `torch.nn.LogSoftmax`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.log_softmax(x, dim)."""
        return F.log_softmax(x, self.dim)


class Softmin(Softmax):
    """softmax(-x) along `dim`, like `torch.nn.Softmin`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.softmin(x, dim)."""
        return F.softmin(x, self.dim)


class GLU(Module):
    """a * sigmoid(b) for the halves a, b of the input along `dim`, like `torch.nn.GLU`."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        """F.glu(x, dim)."""
        return F.glu(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


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
