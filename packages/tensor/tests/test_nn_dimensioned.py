"""nn.dimensioned and nn.applied: the layer families written one line a member get their dims, function and
docstring from the class keywords."""

from __future__ import annotations

import inspect
import re

import numpy as np

from kiln.tensor import Tensor, nn
from kiln.tensor.nn.applied import AppliedFunction
from kiln.tensor.nn.dimensioned import Dimensioned


def _public_layers() -> list[type]:
    return [value for name in nn.__all__ if inspect.isclass(value := getattr(nn, name))]


def test_every_member_of_a_family_has_the_dims_its_name_spells() -> None:
    members = [layer for layer in _public_layers() if issubclass(layer, Dimensioned)]
    assert len(members) >= 30  # padding, pooling, unpooling, convolutions, instance norms
    for layer in members:
        spelled = re.search(r"(\d)d$", layer.__name__)
        assert spelled is not None and layer.dims == int(spelled.group(1)), layer


def test_every_public_layer_has_a_docstring_naming_what_it_is_like() -> None:
    for layer in _public_layers():
        assert layer.__doc__, layer
    assert nn.MaxPool3d.__doc__ == "3-d max pooling, like `torch.nn.MaxPool3d`."
    assert nn.ZeroPad1d.__doc__ == "Pads the last dim with zeros, like `torch.nn.ZeroPad1d`."
    assert nn.ReflectionPad3d.__doc__ is not None and nn.ReflectionPad3d.__doc__.startswith("Pads the last 3 dims")
    assert nn.Tanh.__doc__ == "tanh(x), like `torch.nn.Tanh`."
    assert nn.Hardswish.__doc__ is not None and "repr" in nn.Hardswish.__doc__  # its own docstring wins


def test_a_one_line_activation_applies_its_function() -> None:
    values = np.array([-2.0, -0.5, 0.0, 0.5, 2.0], np.float32)
    np.testing.assert_allclose(nn.Tanh()(Tensor(values)).numpy(), np.tanh(values), rtol=1e-6)
    np.testing.assert_allclose(nn.Softsign()(Tensor(values)).numpy(), values / (1 + np.abs(values)), rtol=1e-6)
    np.testing.assert_allclose(nn.ReLU6()(Tensor(values * 4)).numpy(), np.clip(values * 4, 0, 6))
    assert nn.Softmin.__mro__[1] is nn.Softmax and nn.Softmin(dim=0).dim == 0  # the parent's arguments kept


def test_the_keywords_set_the_function_and_arguments_of_a_new_layer() -> None:
    class Scaled(AppliedFunction, function=lambda x, factor: x * factor, arguments=("factor",)):
        def __init__(self, factor: float) -> None:
            super().__init__()
            self.factor = factor

    assert Scaled(3.0)(Tensor([1.0, 2.0])).tolist() == [3.0, 6.0]
    assert Scaled(3.0).extra_repr() == "factor=3.0"
