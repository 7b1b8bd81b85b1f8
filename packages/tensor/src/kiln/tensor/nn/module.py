"""`Module`: the base class of layers (parameters, buffers and submodules as plain attributes) and `Sequential`.

A module keeps everything as ordinary attributes, so the generic state walk of `kiln.tensor.state` (a Tensor is a
leaf, list and tuple items are named by index, dict items by key, any other object by its public `__dict__`
attributes) names its tensors exactly like PyTorch ("0.weight", "layers.1.bias", "bn.running_mean"), and a plain
class holding layers works the same way with `get_state_dict` / `get_parameters` / `load_state_dict`. `walk_state`
here follows the same rule and also reports each tensor's holder, which tells parameters from buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from kiln.tensor.state.state_dict import IncompatibleKeys, get_state_dict, load_state_dict
from kiln.tensor.tensor import Tensor

__all__ = ["Module", "Sequential", "walk_state"]


def walk_state(obj: object, prefix: str = "") -> Iterator[tuple[str, Tensor, object, str]]:
    """Every tensor reachable from `obj`: (dotted name, tensor, the object holding it, its attribute or key).

    Tensors are leaves; list / tuple items are named by index, dict items by key; other objects with a plain
    `__dict__` by their attributes, skipping names that start with "_"; anything else (numbers, strings,
    functions' bodies, classes) is skipped. An object reached twice (shared or cyclic) is walked once.
    """
    seen: set[int] = set()
    stack: list[tuple[str, object, object, str]] = [(prefix, obj, None, "")]
    while stack:
        name, value, owner, key = stack.pop()
        if isinstance(value, Tensor):
            yield name, value, owner, key
            continue
        if id(value) in seen:
            continue
        items: list[tuple[str, object]]
        if isinstance(value, (list, tuple)):
            items = [(str(index), item) for index, item in enumerate(value)]
        elif isinstance(value, dict):
            items = [(str(item_key), item) for item_key, item in value.items()]
        else:
            attributes = getattr(value, "__dict__", None)
            if not isinstance(attributes, dict) or isinstance(value, type):
                continue
            items = [(attribute, item) for attribute, item in attributes.items() if not attribute.startswith("_")]
        seen.add(id(value))
        # pushed in reverse so names come out in insertion order
        for item_key, item in reversed(items):
            stack.append((f"{name}.{item_key}" if name else item_key, item, value, item_key))


class Module:
    """The base class of layers: subclasses set parameters (Tensors that require grad), buffers (tensors named by
    `register_buffer`) and submodules as attributes and define `forward`.

    Example:
        >>> layer = Linear(2, 3); sorted(layer.state_dict())
        ['bias', 'weight']
    """

    training: bool

    def __init__(self) -> None:
        self.training = True
        self._buffer_names: set[str] = set()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The layer's computation (subclasses define it)."""
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def register_buffer(self, name: str, tensor: Tensor) -> None:
        """Stores `tensor` as attribute `name`, listed by `state_dict()` and `buffers()` but not `parameters()`."""
        if not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer({name!r}) needs a Tensor, got {type(tensor).__name__}")
        setattr(self, name, tensor)
        self._buffer_names.add(name)

    def _is_buffer(self, owner: object, key: str) -> bool:
        return isinstance(owner, Module) and key in owner.__dict__.get("_buffer_names", ())

    def named_parameters(self, prefix: str = "") -> list[tuple[str, Tensor]]:
        """(name, parameter) for every parameter of this module and its submodules (each tensor once)."""
        return self._named(prefix, lambda owner, key: not self._is_buffer(owner, key))

    def parameters(self) -> list[Tensor]:
        """Every parameter of this module and its submodules (each tensor once)."""
        return [tensor for _name, tensor in self.named_parameters()]

    def named_buffers(self, prefix: str = "") -> list[tuple[str, Tensor]]:
        """(name, buffer) for every registered buffer of this module and its submodules."""
        return self._named(prefix, self._is_buffer)

    def buffers(self) -> list[Tensor]:
        """Every registered buffer (running statistics, ...) of this module and its submodules."""
        return [tensor for _name, tensor in self.named_buffers()]

    def _named(self, prefix: str, keep: Callable[[object, str], bool]) -> list[tuple[str, Tensor]]:
        seen: set[int] = set()
        result = []
        for name, tensor, owner, key in walk_state(self, prefix):
            if id(tensor) not in seen and keep(owner, key):
                seen.add(id(tensor))
                result.append((name, tensor))
        return result

    def state_dict(self, prefix: str = "") -> dict[str, Tensor]:
        """Name -> tensor for every parameter and buffer (PyTorch's names: "0.weight", "bn.running_mean")."""
        return get_state_dict(self, prefix)

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copies the tensors of `state_dict` into this module's parameters and buffers in place.

        Returns:
            (missing_keys, unexpected_keys), like PyTorch.

        Raises:
            RuntimeError: listing every missing key, unexpected key and shape mismatch at once (see
                `kiln.tensor.state.load_state_dict`).
        """
        return load_state_dict(self, state_dict, strict)

    def children(self) -> list[Module]:
        """The direct submodules (attributes, and modules inside list / tuple / dict attributes)."""
        found: list[Module] = []
        for key, value in vars(self).items():
            if key.startswith("_"):
                continue
            values = list(value.values()) if isinstance(value, dict) else value
            for item in values if isinstance(values, (list, tuple)) else [values]:
                if isinstance(item, Module) and all(item is not other for other in found):
                    found.append(item)
        return found

    def modules(self) -> list[Module]:
        """This module and every submodule below it, depth first."""
        result: list[Module] = []
        stack: list[Module] = [self]
        while stack:
            module = stack.pop()
            if any(module is other for other in result):
                continue
            result.append(module)
            stack.extend(reversed(module.children()))
        return result

    def train(self, mode: bool = True) -> Module:
        """Sets training mode (dropout active, batch statistics) on this module and every submodule; returns self."""
        if not isinstance(mode, bool):
            raise TypeError(f"train(mode) needs a bool, got {mode!r}")
        for module in self.modules():
            module.training = mode
        return self

    def eval(self) -> Module:
        """Sets evaluation mode (dropout off, running statistics) everywhere; returns self."""
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forgets every parameter's gradient (`.grad = None`; with set_to_none=False, zeros), so the next backward
        starts from zero."""
        for parameter in self.parameters():
            parameter.grad = None if set_to_none else Tensor.zeros_like(parameter)

    def __repr__(self) -> str:
        children = [f"  ({name}): {child!r}".replace("\n", "\n  ") for name, child in self._named_children()]
        extra = self.extra_repr()
        if not children:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n" + "\n".join(children) + "\n)"

    def _named_children(self) -> list[tuple[str, Module]]:
        return [(key, value) for key, value in vars(self).items() if isinstance(value, Module)]

    def extra_repr(self) -> str:
        """The layer's settings shown by repr (subclasses override)."""
        return ""


class Sequential(Module):
    """Layers applied in order; layer i is attribute "i", so names read "0.weight", "2.bias" like PyTorch's.

    Example:
        >>> model = Sequential(Linear(2, 4), ReLU(), Linear(4, 1)); list(model.state_dict())
        ['0.weight', '0.bias', '2.weight', '2.bias']
    """

    def __init__(self, *layers: Callable[..., Any]) -> None:
        super().__init__()
        for index, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(f"Sequential layer {index} must be callable, got {type(layer).__name__}")
            setattr(self, str(index), layer)
        self._count = len(layers)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> Any:
        if not -self._count <= index < self._count:
            raise IndexError(f"Sequential index {index} out of range for {self._count} layers")
        return getattr(self, str(index % self._count))

    def __iter__(self) -> Iterator[Any]:
        return (getattr(self, str(index)) for index in range(self._count))

    def forward(self, x: Any) -> Any:
        """Applies every layer in order."""
        for layer in self:
            x = layer(x)
        return x
