"""Lazy Tensor, autograd, scheduler with fusion, realize engine."""

from kiln.runtime import Device
from kiln.tensor.counters import GlobalCounters
from kiln.tensor.device import default_device
from kiln.tensor.jit import TinyJit, Variable
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["Device", "GlobalCounters", "Tensor", "TinyJit", "Variable", "default_device", "dtypes"]
