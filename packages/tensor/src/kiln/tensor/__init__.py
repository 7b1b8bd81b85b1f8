"""Lazy Tensor, autograd, scheduler with fusion, realize engine."""

from kiln.runtime import Device

# distributed imports mpi4py only in init() (and registers the DIST_TIMEOUT knob at import)
from kiln.tensor import distributed, multi
from kiln.tensor.counters import GlobalCounters
from kiln.tensor.device import default_device
from kiln.tensor.functions import where
from kiln.tensor.grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from kiln.tensor.jit import TinyJit, Variable
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = [
    "Device",
    "GlobalCounters",
    "Tensor",
    "TinyJit",
    "Variable",
    "default_device",
    "dtypes",
    "enable_grad",
    "inference_mode",
    "is_grad_enabled",
    "no_grad",
    "set_grad_enabled",
    "distributed",
    "multi",
    "where",
]
