"""kiln.tensor.nn: layers with PyTorch's names, arguments and default initialisation.

Modules keep parameters, buffers and submodules as plain attributes (see `module.py`), so their state-dict names
match PyTorch's and a plain Python class holding layers works with the same state functions.
"""

from kiln.tensor.nn import functional, init
from kiln.tensor.nn.activation import GELU, Dropout, ReLU, Sigmoid, SiLU, Softmax, Tanh
from kiln.tensor.nn.attention import MultiheadAttention
from kiln.tensor.nn.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d
from kiln.tensor.nn.linear import Embedding, Flatten, Identity, Linear
from kiln.tensor.nn.module import Module, Sequential
from kiln.tensor.nn.normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from kiln.tensor.nn.pooling import AvgPool1d, AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d

__all__ = [
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Dropout",
    "Embedding",
    "Flatten",
    "GELU",
    "GroupNorm",
    "Identity",
    "LayerNorm",
    "Linear",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "Module",
    "MultiheadAttention",
    "RMSNorm",
    "ReLU",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "functional",
    "init",
]
