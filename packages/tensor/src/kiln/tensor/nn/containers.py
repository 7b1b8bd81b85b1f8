"""Containers of layers and parameters: `Sequential`, `ModuleList`, `ModuleDict`, `ParameterList`, `ParameterDict`,
and `Parameter`, with `torch.nn`'s names and methods.

Items are kept as attributes named by their index ("0", "1", ...) or key, the way `Sequential` keeps its layers, so
the state walk of `module.py` names their tensors like torch ("layers.0.weight", "heads.query.bias",
"scales.1"). kiln has no Parameter class: a parameter is a Tensor that requires grad, so `Parameter(t)` returns
one, and `isinstance(x, Parameter)` is not available.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

from kiln.tensor.nn.module import Module, _check_name
from kiln.tensor.tensor import Tensor

__all__ = ["ModuleDict", "ModuleList", "Parameter", "ParameterDict", "ParameterList", "Sequential"]

Item = TypeVar("Item")


def Parameter(data: Tensor | None = None, requires_grad: bool = True) -> Tensor:
    """A tensor to be trained: `data` (sharing its memory) as a leaf that requires grad (an empty tensor when None),
    like `torch.nn.Parameter`.

    Example:
        >>> Parameter(Tensor([1.0, 2.0])).requires_grad
        True
    """
    if data is None:
        data = Tensor.empty(0)
    if not isinstance(data, Tensor):
        raise TypeError(f"Parameter needs a Tensor, got {type(data).__name__}")
    return data.detach().requires_grad_(requires_grad)


def _as_parameter(value: Any) -> Any:
    # torch's ParameterList / ParameterDict turn a plain tensor into a Parameter; other objects stay as they are
    if isinstance(value, Tensor) and value.requires_grad is not True:
        return Parameter(value)
    return value


def _as_module(value: Any, container: str) -> Module:
    if not isinstance(value, Module):
        raise TypeError(f"{container} can only hold Modules, got {type(value).__name__}")
    return value


class _IndexedContainer(Module, Generic[Item]):
    """Items stored as attributes "0", "1", ... (the names torch's state dict uses)."""

    def __init__(self, items: Iterable[Any] | None = None) -> None:
        super().__init__()
        self._count = 0
        if items is not None:
            self.extend(items)

    def _convert(self, value: Any) -> Item:
        raise NotImplementedError

    def _index(self, index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"{type(self).__name__} indices must be integers or slices, not {type(index).__name__}")
        if not -self._count <= index < self._count:
            raise IndexError(f"index {index} is out of range for {type(self).__name__} of length {self._count}")
        return index % self._count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Item]:
        return (getattr(self, str(index)) for index in range(self._count))

    def _items(self) -> list[Item]:
        return list(self)

    def _reset(self, items: list[Item]) -> None:
        for index in range(self._count):
            delattr(self, str(index))
        self._count = 0
        for item in items:
            setattr(self, str(self._count), item)
            self._count += 1

    def __setitem__(self, index: int, value: Any) -> None:
        setattr(self, str(self._index(index)), self._convert(value))

    def __delitem__(self, index: int | slice) -> None:
        items = self._items()
        del items[index if isinstance(index, slice) else self._index(index)]
        self._reset(items)

    def append(self, value: Any) -> _IndexedContainer[Item]:
        """Adds `value` at the end; returns self."""
        setattr(self, str(self._count), self._convert(value))
        self._count += 1
        return self

    def extend(self, values: Iterable[Any]) -> _IndexedContainer[Item]:
        """Appends every item of `values`; returns self."""
        if isinstance(values, (str, bytes, Tensor)) or not isinstance(values, Iterable):
            raise TypeError(
                f"{type(self).__name__}.extend should be called with an iterable, got {type(values).__name__}"
            )
        for value in values:
            self.append(value)
        return self

    def __iadd__(self, values: Iterable[Any]) -> _IndexedContainer[Item]:
        return self.extend(values)


class ModuleList(_IndexedContainer[Module]):
    """A list of submodules, registered so `parameters()`, `state_dict()`, `train()` and `to()` see them, like
    `torch.nn.ModuleList` (it has no forward: iterate it).

    Example:
        >>> layers = ModuleList([Linear(2, 2) for _ in range(2)]); list(layers.state_dict())
        ['0.weight', '0.bias', '1.weight', '1.bias']
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__(modules)

    def _convert(self, value: Any) -> Module:
        return _as_module(value, "ModuleList")

    @overload
    def __getitem__(self, index: int) -> Module: ...

    @overload
    def __getitem__(self, index: slice) -> ModuleList: ...

    def __getitem__(self, index: int | slice) -> Module | ModuleList:
        if isinstance(index, slice):
            return ModuleList(self._items()[index])
        result: Module = getattr(self, str(self._index(index)))
        return result

    def insert(self, index: int, module: Module) -> None:
        """Inserts `module` before position `index` (Python list semantics)."""
        items = self._items()
        items.insert(index, self._convert(module))
        self._reset(items)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self, *other])


class ParameterList(_IndexedContainer[Any]):
    """A list of parameters (plain tensors become parameters), like `torch.nn.ParameterList`; names "0", "1", ...

    Example:
        >>> scales = ParameterList([Tensor.ones(2)]); scales[0].requires_grad
        True
    """

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__(values)

    def _convert(self, value: Any) -> Any:
        return _as_parameter(value)

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, slice):
            return ParameterList(self._items()[index])
        return getattr(self, str(self._index(index)))

    def extra_repr(self) -> str:
        lines = [f"({index}): Parameter containing: [{_describe(value)}]" for index, value in enumerate(self)]
        return "\n".join(lines)


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"{value.dtype.name} of size {'x'.join(str(size) for size in value.shape)}"
    return type(value).__name__


_RESERVED = frozenset({"training"})


class _KeyedContainer(Module, Generic[Item]):
    """Items stored as attributes named by their string keys, in insertion order."""

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> None:
        super().__init__()
        self._keys: list[str] = []
        if items is not None:
            self.update(items)

    def _convert(self, value: Any) -> Item:
        raise NotImplementedError

    def _check_key(self, key: str) -> str:
        if not isinstance(key, str):
            raise TypeError(f"{type(self).__name__} keys must be strings, got {type(key).__name__}")
        if not key or "." in key or key.startswith("_"):
            raise KeyError(f"{type(self).__name__} key {key!r} must be non-empty, without '.', not starting with '_'")
        if key not in self._keys and (hasattr(type(self), key) or key in _RESERVED):
            raise KeyError(f"attribute {key!r} already exists on {type(self).__name__}")
        return key

    def __getitem__(self, key: str) -> Item:
        if key not in self._keys:
            raise KeyError(key)
        result: Item = getattr(self, key)
        return result

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, self._check_key(key), self._convert(value))
        if key not in self._keys:
            self._keys.append(key)

    def __delitem__(self, key: str) -> None:
        if key not in self._keys:
            raise KeyError(key)
        delattr(self, key)
        self._keys.remove(key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._keys))

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def keys(self) -> list[str]:
        """The keys in insertion order."""
        return list(self._keys)

    def values(self) -> list[Item]:
        """The items in insertion order."""
        return [self[key] for key in self._keys]

    def items(self) -> list[tuple[str, Item]]:
        """(key, item) pairs in insertion order."""
        return [(key, self[key]) for key in self._keys]

    def pop(self, key: str) -> Item:
        """Removes `key` and returns its item."""
        value = self[key]
        del self[key]
        return value

    def clear(self) -> None:
        """Removes every item."""
        for key in list(self._keys):
            del self[key]

    def update(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Adds or replaces the items of a mapping or of (key, value) pairs."""
        pairs = items.items() if isinstance(items, Mapping) else items
        for pair in pairs:
            key, value = pair
            self[key] = value


class ModuleDict(_KeyedContainer[Module]):
    """Submodules by name, registered like attributes, like `torch.nn.ModuleDict`.

    Example:
        >>> heads = ModuleDict({"query": Linear(2, 2)}); list(heads.state_dict())
        ['query.weight', 'query.bias']
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None) -> None:
        super().__init__(modules)

    def _convert(self, value: Any) -> Module:
        return _as_module(value, "ModuleDict")


class ParameterDict(_KeyedContainer[Any]):
    """Parameters by name (plain tensors become parameters), like `torch.nn.ParameterDict`."""

    def __init__(self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> None:
        super().__init__(parameters)

    def _convert(self, value: Any) -> Any:
        return _as_parameter(value)

    def extra_repr(self) -> str:
        return "\n".join(f"({key}): Parameter containing: [{_describe(value)}]" for key, value in self.items())


class Sequential(Module):
    """Layers applied in order; layer i is attribute "i", so names read "0.weight", "2.bias" like PyTorch's. Given one
    OrderedDict (or dict), the layers are named by its keys ("conv.weight"). Any callable may be a layer.

    Example:
        >>> model = Sequential(Linear(2, 4), ReLU(), Linear(4, 1)); list(model.state_dict())
        ['0.weight', '0.bias', '2.weight', '2.bias']
    """

    def __init__(self, *layers: Any) -> None:
        super().__init__()
        self._names: list[str] = []
        if len(layers) == 1 and isinstance(layers[0], Mapping):
            for name, layer in layers[0].items():
                self._add(str(name), layer)
        else:
            for layer in layers:
                self._add(str(len(self._names)), layer)

    def _add(self, name: str, layer: Any) -> None:
        if not callable(layer):
            raise TypeError(f"Sequential layer {name} must be callable, got {type(layer).__name__}")
        if name in self._names:
            raise KeyError(f"Sequential already has a layer named {name!r}")
        if not name.isdigit():
            _check_name(name, "module", self)
        setattr(self, name, layer)
        self._names.append(name)

    def _reset(self, layers: list[Any]) -> None:
        # positional layers are renumbered "0", "1", ... like torch's after a delete or insert
        for name in self._names:
            delattr(self, name)
        self._names = []
        for layer in layers:
            self._add(str(len(self._names)), layer)

    def _position(self, index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"Sequential indices must be integers or slices, not {type(index).__name__}")
        if not -len(self._names) <= index < len(self._names):
            raise IndexError(f"Sequential index {index} out of range for {len(self._names)} layers")
        return index % len(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return Sequential({name: getattr(self, name) for name in self._names[index]})
        return getattr(self, self._names[self._position(index)])

    def __setitem__(self, index: int, layer: Any) -> None:
        if not callable(layer):
            raise TypeError(f"Sequential layer must be callable, got {type(layer).__name__}")
        setattr(self, self._names[self._position(index)], layer)

    def __delitem__(self, index: int | slice) -> None:
        layers = list(self)
        del layers[index if isinstance(index, slice) else self._position(index)]
        self._reset(layers)

    def __iter__(self) -> Iterator[Any]:
        return (getattr(self, name) for name in list(self._names))

    def __add__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return Sequential(*self, *other)

    def append(self, layer: Any) -> Sequential:
        """Adds `layer` at the end (named by its position); returns self."""
        self._add(str(len(self._names)), layer)
        return self

    def extend(self, layers: Iterable[Any]) -> Sequential:
        """Appends every layer of `layers`; returns self."""
        for layer in layers:
            self.append(layer)
        return self

    def insert(self, index: int, layer: Any) -> Sequential:
        """Inserts `layer` before position `index` (layers renumbered); returns self."""
        if not callable(layer):
            raise TypeError(f"Sequential layer must be callable, got {type(layer).__name__}")
        layers = list(self)
        if not -len(layers) <= index <= len(layers):
            raise IndexError(f"Index out of range: {index}")
        layers.insert(index, layer)
        self._reset(layers)
        return self

    def pop(self, index: int = -1) -> Any:
        """Removes and returns the layer at `index`."""
        layer = self[index]
        del self[index]
        return layer

    def forward(self, x: Any) -> Any:
        """Applies every layer in order."""
        for layer in self:
            x = layer(x)
        return x
