"""`Module`: the base class of layers (parameters, buffers and submodules as plain attributes, forward hooks).

A module keeps everything as ordinary attributes, so the generic state walk of `kiln.tensor.state` (a Tensor is a
leaf, list and tuple items are named by index, dict items by key, any other object by its public `__dict__`
attributes) names its tensors exactly like PyTorch ("0.weight", "layers.1.bias", "bn.running_mean"), and a plain
class holding layers works the same way with `get_state_dict` / `get_parameters` / `load_state_dict`. `walk_state`
here follows the same rule and also reports each tensor's holder, which tells parameters from buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kiln.tensor.nn.hooks import HookTable, RemovableHandle
from kiln.tensor.state.state_dict import IncompatibleKeys, get_state_dict, load_state_dict
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

__all__ = ["Module", "RemovableHandle", "walk_state"]


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


def _check_name(name: object, what: str, module: Module) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what} name should be a string. Got {type(name).__name__}")
    if not name:
        raise KeyError(f'{what} name can\'t be empty string ""')
    if "." in name:
        raise KeyError(f'{what} name can\'t contain ".", got: {name}')
    if hasattr(type(module), name):
        raise KeyError(f"attribute '{name}' already exists")
    return name


class Module:
    """The base class of layers: subclasses set parameters (Tensors that require grad), buffers (tensors named by
    `register_buffer`) and submodules as attributes and define `forward`.

    Calling a module runs its forward pre-hooks, `forward`, then its forward hooks. Modules also found inside list,
    tuple and dict attributes count as submodules (named "blocks.0", "heads.key"), as the state walk names them.

    Example:
        >>> layer = Linear(2, 3); sorted(layer.state_dict())
        ['bias', 'weight']
    """

    training: bool

    def __init__(self) -> None:
        self.training = True
        self._buffer_names: set[str] = set()
        self._non_persistent_buffers: set[str] = set()
        self._forward_hooks: HookTable = HookTable()
        self._forward_hooks_with_kwargs: set[int] = set()
        self._forward_pre_hooks: HookTable = HookTable()
        self._forward_pre_hooks_with_kwargs: set[int] = set()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pre_hooks = self.__dict__.get("_forward_pre_hooks")
        hooks = self.__dict__.get("_forward_hooks")
        if not pre_hooks and not hooks:
            return self.forward(*args, **kwargs)
        for key, hook in list((pre_hooks or {}).items()):
            if key in self._forward_pre_hooks_with_kwargs:
                changed = hook(self, args, kwargs)
                if changed is not None:
                    if not (isinstance(changed, tuple) and len(changed) == 2):
                        raise RuntimeError(
                            "forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got "
                            f"{changed}."
                        )
                    args, kwargs = changed
            else:
                changed = hook(self, args)
                if changed is not None:
                    args = changed if isinstance(changed, tuple) else (changed,)
        result = self.forward(*args, **kwargs)
        for key, hook in list((hooks or {}).items()):
            if key in self._forward_hooks_with_kwargs:
                changed = hook(self, args, kwargs, result)
            else:
                changed = hook(self, args, result)
            if changed is not None:
                result = changed
        return result

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The layer's computation (subclasses define it)."""
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    # ----- hooks

    def _hook_tables(self) -> None:
        # a subclass that skipped Module.__init__ gets its hook tables on first use
        for name in ("_forward_hooks", "_forward_pre_hooks"):
            if name not in self.__dict__:
                self.__dict__[name] = HookTable()
                self.__dict__[name + "_with_kwargs"] = set()

    def register_forward_pre_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Calls `hook(module, args)` before each forward (with_kwargs: `hook(module, args, kwargs)`); a result that
        is not None replaces the arguments (a single value becomes a 1-tuple; with_kwargs: (args, kwargs)).

        Returns:
            a handle whose `remove()` unregisters the hook.
        """
        return self._register_hook("_forward_pre_hooks", hook, prepend, with_kwargs)

    def register_forward_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Calls `hook(module, args, output)` after each forward (with_kwargs: `hook(module, args, kwargs, output)`);
        a result that is not None replaces the output. Hooks run in registration order (prepend=True: first).

        Returns:
            a handle whose `remove()` unregisters the hook.
        """
        return self._register_hook("_forward_hooks", hook, prepend, with_kwargs)

    def _register_hook(self, table: str, hook: Callable[..., Any], prepend: bool, with_kwargs: bool) -> RemovableHandle:
        if not callable(hook):
            raise TypeError(f"{table.strip('_').replace('_', ' ')} must be callable, got {type(hook).__name__}")
        self._hook_tables()
        hooks: HookTable = self.__dict__[table]
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        if prepend:
            reordered = {handle.id: hook, **{key: value for key, value in hooks.items() if key != handle.id}}
            hooks.clear()
            hooks.update(reordered)
        if with_kwargs:
            self.__dict__[table + "_with_kwargs"].add(handle.id)
        return handle

    # ----- registration

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Stores `tensor` as attribute `name`, listed by `buffers()` but not `parameters()`; in `state_dict()` only
        when `persistent` (a non-persistent buffer is state that is recomputed, not saved). None reserves the name."""
        if "_buffer_names" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' (torch Tensor or None required)"
            )
        if name not in self._buffer_names:
            _check_name(name, "buffer", self)
        setattr(self, name, tensor)
        self._buffer_names.add(name)
        non_persistent = self.__dict__.setdefault("_non_persistent_buffers", set())
        if persistent:
            non_persistent.discard(name)
        else:
            non_persistent.add(name)

    def register_parameter(self, name: str, param: Tensor | None) -> None:
        """Stores `param` (a Tensor, made a leaf that requires grad when it is not one, or None) as attribute `name`."""
        if "_buffer_names" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name(name, "parameter", self) if name not in vars(self) else None
        if param is not None:
            if not isinstance(param, Tensor):
                raise TypeError(
                    f"cannot assign '{type(param).__name__}' object to parameter '{name}' (torch.nn.Parameter or None "
                    "required)"
                )
            if param.requires_grad is not True:
                param = param.detach().requires_grad_()
        setattr(self, name, param)

    def register_module(self, name: str, module: Module | None) -> None:
        """Stores `module` (or None) as submodule `name`; the same as `add_module`."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if name not in vars(self):
            _check_name(name, "module", self)
        setattr(self, name, module)

    def add_module(self, name: str, module: Module | None) -> None:
        """Stores `module` (or None) as submodule `name`."""
        self.register_module(name, module)

    # ----- tensors

    def _is_buffer(self, owner: object, key: str) -> bool:
        return isinstance(owner, Module) and key in owner.__dict__.get("_buffer_names", ())

    def _is_non_persistent(self, owner: object, key: str) -> bool:
        return isinstance(owner, Module) and key in owner.__dict__.get("_non_persistent_buffers", ())

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> list[tuple[str, Tensor]]:
        """(name, parameter) for every parameter of this module and (recurse) its submodules, each tensor once
        unless remove_duplicate=False."""
        return self._named(prefix, lambda owner, key: not self._is_buffer(owner, key), recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> list[Tensor]:
        """Every parameter of this module and (recurse) its submodules (each tensor once)."""
        return [tensor for _name, tensor in self.named_parameters(recurse=recurse)]

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> list[tuple[str, Tensor]]:
        """(name, buffer) for every registered buffer of this module and (recurse) its submodules."""
        return self._named(prefix, self._is_buffer, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> list[Tensor]:
        """Every registered buffer (running statistics, ...) of this module and (recurse) its submodules."""
        return [tensor for _name, tensor in self.named_buffers(recurse=recurse)]

    def _named(
        self, prefix: str, keep: Callable[[object, str], bool], recurse: bool = True, remove_duplicate: bool = True
    ) -> list[tuple[str, Tensor]]:
        seen: set[int] = set()
        result = []
        direct = None if recurse else self._direct_holders()
        for name, tensor, owner, key in walk_state(self, prefix):
            if direct is not None and id(owner) not in direct:
                continue
            if (id(tensor) not in seen or not remove_duplicate) and keep(owner, key):
                seen.add(id(tensor))
                result.append((name, tensor))
        return result

    def _direct_holders(self) -> set[int]:
        """This module and the lists / tuples / dicts under it that no other module holds (recurse=False scope)."""
        holders = {id(self)}
        stack: list[object] = [self]
        while stack:
            value = stack.pop()
            items = (
                vars(value).values()
                if isinstance(value, Module)
                else (value.values() if isinstance(value, dict) else value)
            )
            for item in items if isinstance(items, Iterable) else ():
                if isinstance(item, (list, tuple, dict)) and id(item) not in holders:
                    holders.add(id(item))
                    stack.append(item)
        return holders

    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> dict[str, Tensor]:
        """Name -> tensor for every parameter and persistent buffer (PyTorch's names: "0.weight", "bn.running_mean").

        The tensors are the module's own (kiln has no detached views; keep_vars is accepted for torch's signature)."""
        state = get_state_dict(self, prefix)
        if not any(module.__dict__.get("_non_persistent_buffers") for module in self.modules()):
            return state
        dropped = {
            name for name, _tensor, owner, key in walk_state(self, prefix) if self._is_non_persistent(owner, key)
        }
        return {name: tensor for name, tensor in state.items() if name not in dropped}

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> IncompatibleKeys:
        """Copies the tensors of `state_dict` into this module's parameters and persistent buffers in place.

        Returns:
            (missing_keys, unexpected_keys), a NamedTuple like PyTorch's.

        Raises:
            RuntimeError: listing every missing key, unexpected key (when strict) and shape mismatch at once (see
                `kiln.tensor.state.load_state_dict`).
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        targets = self.state_dict()
        try:
            return load_state_dict(targets, dict(state_dict), strict)
        except RuntimeError as error:
            # the targets are a dict of this module's tensors; name the module, as torch does
            raise RuntimeError(str(error).replace("for dict:", f"for {type(self).__name__}:", 1)) from None

    # ----- submodules

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, module) for the direct submodules: module attributes, and modules inside list / tuple / dict
        attributes (named "blocks.0", "heads.key"), each once."""
        return self._child_entries(remove_duplicate=True)

    def _child_entries(self, remove_duplicate: bool) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        stack: list[tuple[str, object]] = [
            (key, value) for key, value in reversed(vars(self).items()) if not key.startswith("_")
        ]
        while stack:
            name, value = stack.pop()
            if isinstance(value, Module):
                if id(value) not in seen or not remove_duplicate:
                    seen.add(id(value))
                    yield name, value
            elif isinstance(value, (list, tuple)):
                stack.extend((f"{name}.{index}", item) for index, item in reversed(list(enumerate(value))))
            elif isinstance(value, dict):
                stack.extend((f"{name}.{key}", item) for key, item in reversed(list(value.items())))

    def children(self) -> Iterator[Module]:
        """The direct submodules (see `named_children`)."""
        return (module for _name, module in self.named_children())

    def named_modules(
        self, memo: set[int] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """(name, module) for this module ("" or `prefix`) and every submodule below it, depth first, like torch's."""
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._child_entries(remove_duplicate):
            yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        """This module and every submodule below it, depth first, each once."""
        return (module for _name, module in self.named_modules())

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path `target` ("" is this module, "blocks.0" a module in a list attribute);
        AttributeError naming the first part that is missing."""
        modules = dict(self.named_modules(remove_duplicate=False))
        if target in modules:
            return modules[target]
        parts = target.split(".")
        for count in range(len(parts) - 1, -1, -1):
            holder = modules.get(".".join(parts[:count]))
            if holder is not None:
                missing = parts[count]
                if hasattr(holder, missing):
                    raise AttributeError(f"`{missing}` is not an nn.Module")
                raise AttributeError(f"{type(holder).__name__} has no attribute `{missing}`")
        raise AttributeError(f"{type(self).__name__} has no attribute `{parts[0]}`")

    def _tensor_at(self, target: str, want_buffer: bool) -> Tensor:
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{type(module).__name__} has no attribute `{name}`")
        value = getattr(module, name)
        if not isinstance(value, Tensor) or self._is_buffer(module, name) != want_buffer:
            raise AttributeError(f"`{name}` is not {'a buffer' if want_buffer else 'an nn.Parameter'}")
        return value

    def get_parameter(self, target: str) -> Tensor:
        """The parameter at dotted path `target` ("layers.0.weight"); AttributeError when there is none."""
        return self._tensor_at(target, want_buffer=False)

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path `target` ("bn.running_mean"); AttributeError when there is none."""
        return self._tensor_at(target, want_buffer=True)

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Calls `fn` on every submodule (children first, depth first) and then on this module; returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ----- modes, gradients, dtypes

    def train(self, mode: bool = True) -> Module:
        """Sets training mode (dropout active, batch statistics) on this module and every submodule; returns self."""
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        for module in self.modules():
            module.training = mode
        return self

    def eval(self) -> Module:
        """Sets evaluation mode (dropout off, running statistics) everywhere; returns self."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Sets `requires_grad` of every parameter (False freezes them); returns self."""
        if not isinstance(requires_grad, bool):
            raise TypeError(f"requires_grad_ needs a bool, got {requires_grad!r}")
        for parameter in self.parameters():
            parameter.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forgets every parameter's gradient (`.grad = None`; with set_to_none=False, zeros), so the next backward
        starts from zero."""
        for parameter in self.parameters():
            parameter.grad = None if set_to_none else Tensor.zeros_like(parameter)

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Moves and / or casts every parameter and buffer: `to(dtype)`, `to(device)`, `to(device, dtype)` or keywords;
        only floating-point tensors change dtype, as in torch. Returns self.

        Unlike torch the tensors are replaced (new leaves with the same requires_grad), so an optimizer built
        before must be rebuilt; call `to` first."""
        device, dtype = _to_arguments(args, kwargs)
        replaced: dict[int, Tensor] = {}  # a tensor held twice (tied weights) stays one tensor
        for _name, tensor, owner, key in list(walk_state(self)):
            if id(tensor) not in replaced:
                changed = tensor
                if dtype is not None and dtypes.is_float(tensor.dtype) and tensor.dtype != dtype:
                    changed = changed.cast(dtype)
                if device is not None:
                    changed = changed.to(device)  # the same tensor when it is there already
                replaced[id(tensor)] = tensor if changed is tensor else _leaf_like(changed, tensor)
            if replaced[id(tensor)] is not tensor:
                _replace(owner, key, replaced[id(tensor)])
        return self

    def half(self) -> Module:
        """Casts floating-point parameters and buffers to float16; returns self."""
        return self.to(dtypes.float16)

    def float(self) -> Module:
        """Casts floating-point parameters and buffers to float32; returns self."""
        return self.to(dtypes.float32)

    def double(self) -> Module:
        """Casts floating-point parameters and buffers to float64; returns self."""
        return self.to(dtypes.float64)

    def bfloat16(self) -> Module:
        """Casts floating-point parameters and buffers to bfloat16; returns self."""
        return self.to(dtypes.bfloat16)

    # ----- printing

    def __repr__(self) -> str:
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        children = [(name, repr(child).replace("\n", "\n  ")) for name, child in self._child_entries(False)]
        if not children and len(lines) <= 1:
            return f"{type(self).__name__}({extra})"
        lines += [f"({name}): {text}" for name, text in _compress_repeats(children)]
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

    def extra_repr(self) -> str:
        """The layer's settings shown by repr (subclasses override)."""
        return ""


def _compress_repeats(children: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Runs of children named by consecutive integers with equal reprs shown once as "(0-3): 4 x Layer(...)",
    as torch's ModuleList repr does."""
    result: list[tuple[str, str]] = []
    index = 0
    while index < len(children):
        name, text = children[index]
        end = index + 1
        while (
            name.isdigit()
            and end < len(children)
            and children[end][1] == text
            and children[end][0] == str(int(name) + end - index)
        ):
            end += 1
        if end - index > 1:
            result.append((f"{name}-{children[end - 1][0]}", f"{end - index} x {text}"))
        else:
            result.append((name, text))
        index = end
    return result


def _to_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str | None, DType | None]:
    device: str | None = kwargs.pop("device", None)
    dtype: DType | None = kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, DType):
            dtype = arg
        elif isinstance(arg, str):
            device = arg
        elif isinstance(arg, Tensor):
            device, dtype = arg.device if isinstance(arg.device, str) else None, arg.dtype
        else:
            raise TypeError(f"to() expects a dtype, a device string or a Tensor, got {arg!r}")
    return device, dtype


def _leaf_like(value: Tensor, original: Tensor) -> Tensor:
    """`value` computed into a buffer of its own, a leaf with `original`'s requires_grad."""
    fresh = Tensor.empty(*value.shape, dtype=value.dtype, device=value.device)
    fresh = fresh.assign(value.detach()).realize()
    if original.requires_grad is not None:
        fresh.requires_grad_(original.requires_grad)
    return fresh


def _replace(owner: object, key: str, value: Tensor) -> None:
    if isinstance(owner, list):
        owner[int(key)] = value
    elif isinstance(owner, dict):
        owner[next(item for item in owner if str(item) == key)] = value
    elif isinstance(owner, tuple):
        raise TypeError(f"to() cannot replace tensor {key} held in a tuple; hold it in a list or an attribute")
    else:
        setattr(owner, key, value)
