"""Configuration knobs: one typed registry read lazily from the environment, overridable with `Context`.

Regenerate the documentation with `uv run python -m kiln.uops.knobs_doc > docs/knobs.md`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T", int, bool, str, float)

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})
_UNSET = object()


def _environ_key(name: str) -> object:
    """`name` as a key of CPython's `os.environ._data` (bytes on POSIX, upper-case str on Windows), else None."""
    try:
        encode = os.environ.encodekey
    except AttributeError:
        return None
    try:
        return encode(name)
    except (TypeError, ValueError):
        return None


class Knob(Generic[T]):
    """One configuration value: `name` (attribute of `knobs`), read from environment variable `env` (default: name).

    The value is, in order: the innermost `Context` override, a value assigned with `knobs.NAME = value`, the
    parsed environment variable, `default`.
    """

    def __init__(
        self,
        name: str,
        kind: type[T],
        default: T,
        help: str,
        env: str | None = None,
        owner: str = "kiln.uops",
        normalize: Callable[[T], T] | None = None,
        choices: tuple[T, ...] | None = None,
    ) -> None:
        if kind not in (int, bool, str, float):
            raise TypeError(f"knob {name!r} must be int, bool, str or float, got {kind!r}")
        self.name = name
        self.kind: type[T] = kind
        self.default: T = default
        self.help = help
        self.env = env or name
        self.owner = owner
        self.normalize: Callable[[T], T] | None = normalize
        self.choices: tuple[T, ...] | None = choices
        """The accepted values of a knob with a fixed set of them (None: any value of its type)."""
        self._assigned: Any = _UNSET
        self._raw_seen: str | None = None
        self._encoded_seen: object = None  # the `os.environ._data` value `_parsed` came from
        self._parsed: T = default
        self._env_key: object = _environ_key(self.env)

    @overload
    def __get__(self, instance: None, owner: type) -> Knob[T]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> T: ...

    def __get__(self, instance: object | None, owner: type) -> T | Knob[T]:
        if instance is None:
            return self
        return self.value()

    def __set__(self, instance: object, value: T) -> None:
        self._assigned = self.coerce(value)

    def value(self) -> T:
        """The current value (see the class docstring for the order of precedence)."""
        if _context_stack:  # read on every launch: no iterator when no Context is open
            for layer in reversed(_context_stack):
                if self.name in layer:
                    return layer[self.name]  # type: ignore[no-any-return]
        if self._assigned is not _UNSET:
            return self._assigned  # type: ignore[no-any-return]
        data = getattr(os.environ, "_data", None)
        if type(data) is dict and self._env_key is not None:
            # CPython's os.environ keeps its contents in `_data` (encoded keys and values, updated by every write
            # through os.environ): one dict probe instead of encoding and decoding through the mapping (knobs are
            # read on every launch)
            encoded = data.get(self._env_key)
            if encoded is None:
                return self.default
            if encoded is self._encoded_seen:
                return self._parsed
            raw = os.fsdecode(encoded) if isinstance(encoded, bytes) else str(encoded)
        else:
            found = os.environ.get(self.env)
            if found is None:
                return self.default
            raw, encoded = found, None
        if raw != self._raw_seen:
            self._parsed = self.parse(raw)
            self._raw_seen = raw
        self._encoded_seen = encoded
        return self._parsed

    def parse(self, raw: str) -> T:
        """The value of the environment string `raw`."""
        value: Any
        text = raw.strip()
        try:
            if self.kind is bool:
                if text.lower() in _TRUE_WORDS:
                    value = True
                elif text.lower() in _FALSE_WORDS:
                    value = False
                else:
                    raise ValueError(raw)
            elif self.kind is int:
                value = int(text or "0")
            elif self.kind is float:
                value = float(text or "0")
            else:
                value = raw
        except ValueError:
            raise ValueError(
                f"environment variable {self.env}={raw!r} is not a valid {self.kind.__name__} for knob {self.name}"
            ) from None
        result: T = self.normalize(value) if self.normalize is not None else value
        self.check_choice(result, f"environment variable {self.env}={raw!r}")
        return result

    def check_choice(self, value: T, what: str) -> None:
        """ValueError naming `what` and the accepted values when `value` is not one of this knob's `choices`."""
        if self.choices is not None and value not in self.choices:
            accepted = ", ".join(repr(choice) for choice in self.choices)
            raise ValueError(f"{what} is not an accepted value of knob {self.name}; expected one of: {accepted}")

    def coerce(self, value: object) -> T:
        """`value` checked and converted to this knob's type (bools accept 0/1, ints accept bools, floats ints)."""
        converted: Any
        if self.kind is bool and isinstance(value, int) and value in (0, 1):
            converted = bool(value)
        elif self.kind is int and isinstance(value, int):
            converted = int(value)
        elif self.kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            converted = float(value)
        elif self.kind is str and isinstance(value, str):
            converted = value
        else:
            raise TypeError(f"knob {self.name} expects a {self.kind.__name__}, got {value!r}")
        result: T = self.normalize(converted) if self.normalize is not None else converted
        self.check_choice(result, f"{self.name}={value!r}")
        return result

    def reset(self) -> None:
        """Forget a value assigned with `knobs.NAME = value`."""
        self._assigned = _UNSET

    def __repr__(self) -> str:
        return f"Knob({self.name!r}, {self.kind.__name__}, default={self.default!r}, env={self.env!r})"


_registry: dict[str, Knob[Any]] = {}
_context_stack: list[dict[str, Any]] = []


def register_knob(
    name: str,
    kind: type[T],
    default: T,
    help: str,
    env: str | None = None,
    owner: str | None = None,
    normalize: Callable[[T], T] | None = None,
    choices: tuple[T, ...] | None = None,
) -> Knob[T]:
    """Add a knob to the registry (a package calls this at import). Re-registering the same definition is a no-op.

    `owner` (default: the calling package) groups the knob in docs/knobs.md. Read the value as `knobs.NAME`.
    `choices` lists the accepted values of a knob with a fixed set of them: any other value raises ValueError
    listing them when the knob is read or set.
    """
    if not name.isidentifier() or not name.isupper():
        raise ValueError(f"knob names are upper-case identifiers, got {name!r}")
    if owner is None:
        caller = sys._getframe(1).f_globals
        owner = caller.get("__package__") or caller.get("__name__") or "unknown"
    existing = _registry.get(name)
    if existing is not None:
        if (existing.kind, existing.default, existing.env, existing.owner) != (kind, default, env or name, owner):
            raise ValueError(f"knob {name} is already registered differently: {existing!r} (by {existing.owner})")
        return existing
    knob = Knob(name, kind, default, help, env, owner, normalize, choices)
    _registry[name] = knob
    return knob


def _expand_home(path: str) -> str:
    return os.path.expanduser(path)


class Knobs:
    """The registry's attribute view: `knobs.DEBUG`, `knobs.BEAM`, ... (typed for the knobs of kiln.uops)."""

    DEBUG = register_knob(
        "DEBUG",
        int,
        0,
        "Verbosity (each level adds to the ones below): 1 one summary line per realize (kernels, copies, time); "
        "2 one line per kernel (device, name, launch size, time, GFLOP/s, GB/s); 3 the applied optimizations; "
        "4 the kernel source; 5 the optimized kernel sink; 6 the linearized uops.",
    )
    BEAM = register_knob("BEAM", int, 0, "Beam width of the kernel optimization search; 0 uses the heuristics only.")
    BEAM_WORKERS = register_knob(
        "BEAM_WORKERS",
        int,
        0,
        "Worker processes that build BEAM's candidate kernels in parallel (timing stays serial); 0: min(cores, 8); "
        "1: build them in the searching process.",
    )
    BEAM_TIMEOUT = register_knob(
        "BEAM_TIMEOUT",
        float,
        60.0,
        "Seconds a BEAM worker may spend building one candidate; past it the worker is killed and replaced and the "
        "candidate skipped.",
    )
    NOOPT = register_knob("NOOPT", bool, False, "Apply no kernel optimizations (no upcast, local or unroll).")
    TENSOR_CORES = register_knob(
        "TENSOR_CORES",
        bool,
        True,
        "Let the heuristic opts put a matmul on the renderer's tensor cores (the first unit its dtypes fit: float16 "
        "or bfloat16 inputs on NVIDIA sm_80+, AMD, Metal); 0: never (BEAM and explicit opts still may).",
    )
    VIZ = register_knob(
        "VIZ", bool, False, "Record graph-rewrite traces for kiln.viz (read when kiln.uops is imported)."
    )
    PROFILE = register_knob("PROFILE", bool, False, "Record profiler events (kernel launches, copies) for kiln.viz.")
    VIZ_OUT = register_knob(
        "VIZ_OUT",
        str,
        "",
        "Directory the VIZ trace and PROFILE timeline are written to at exit; empty: kiln-viz-<pid> in the temp dir.",
    )
    VIZ_SERVE = register_knob(
        "VIZ_SERVE", bool, True, "With VIZ, serve the written files at exit (python -m kiln.viz --open DIR)."
    )
    VIZ_PORT = register_knob("VIZ_PORT", int, 8000, "Port of the kiln.viz server (host 127.0.0.1).")
    DEVICE = register_knob(
        "DEVICE", str, "", "Default device, e.g. CPU, PYTHON, CUDA; empty: the first available.", "DEV"
    )
    CACHEDIR = register_knob(
        "CACHEDIR", str, "~/.cache/kiln", "Directory of the on-disk caches (~ is expanded).", normalize=_expand_home
    )
    DISABLE_COMPILER_CACHE = register_knob(
        "DISABLE_COMPILER_CACHE", bool, False, "Compile every program afresh instead of reading the disk cache."
    )
    SPEC = register_knob("SPEC", int, 0, "1: check each intermediate graph against its stage's spec (type_verify).")

    def __getattr__(self, name: str) -> Any:
        # knobs registered by other packages after this class was built
        knob = _registry.get(name)
        if knob is None:
            raise AttributeError(f"unknown knob {name!r}; registered knobs: {sorted(_registry)}")
        return knob.value()

    def __setattr__(self, name: str, value: Any) -> None:
        knob = _registry.get(name)
        if knob is None:
            raise AttributeError(f"unknown knob {name!r}; registered knobs: {sorted(_registry)}")
        knob._assigned = knob.coerce(value)

    def __dir__(self) -> list[str]:
        return sorted(_registry)

    def get_knob(self, name: str) -> Knob[Any]:
        """The Knob object registered as `name`."""
        knob = _registry.get(name)
        if knob is None:
            raise KeyError(f"unknown knob {name!r}; registered knobs: {sorted(_registry)}")
        return knob

    def all(self) -> list[Knob[Any]]:
        """Every registered knob."""
        return list(_registry.values())


knobs = Knobs()
"""The knob registry: read `knobs.DEBUG`, override with `Context(DEBUG=2)`."""


class Context(contextlib.ContextDecorator):
    """Override knobs inside a `with` block or a decorated function: `with Context(DEBUG=2, NOOPT=True): ...`."""

    def __init__(self, **overrides: Any) -> None:
        self.overrides: dict[str, Any] = {}
        for name, value in overrides.items():
            knob = _registry.get(name)
            if knob is None:
                raise ValueError(f"unknown knob {name!r} in Context; registered knobs: {sorted(_registry)}")
            self.overrides[name] = knob.coerce(value)
        self._layers: list[dict[str, Any]] = []

    def __enter__(self) -> Context:
        layer = dict(self.overrides)
        self._layers.append(layer)
        _context_stack.append(layer)
        return self

    def __exit__(self, *exc_info: object) -> None:
        layer = self._layers.pop()
        # remove this very layer even if an inner Context leaked (identity, not equality)
        for position in range(len(_context_stack) - 1, -1, -1):
            if _context_stack[position] is layer:
                del _context_stack[position]
                break


# ----------------------------------------------------------------------------------------------------------------
# documentation
# ----------------------------------------------------------------------------------------------------------------

MARKDOWN_HEADER = """# Configuration knobs

Generated by `uv run python -m kiln.uops.knobs_doc > docs/knobs.md` from the knob registry of `kiln.uops`; do not edit
by hand. A knob is read from its environment variable when used, so changing the variable takes effect at once.
In code, read `knobs.NAME` and override with `Context(NAME=value)` (a `with` block or a function decorator).
Booleans accept 1/0, true/false, yes/no, on/off.
"""


def knobs_markdown(owners: Iterable[str] | None = None) -> str:
    """The Markdown of docs/knobs.md: a table per owning package (kiln.uops first) of the registered knobs."""
    by_owner: dict[str, list[Knob[Any]]] = {}
    for knob in _registry.values():
        by_owner.setdefault(knob.owner, []).append(knob)
    selected = sorted(by_owner if owners is None else set(owners), key=lambda owner: (owner != "kiln.uops", owner))
    parts = [MARKDOWN_HEADER]
    for owner in selected:
        parts.append(knobs_section_markdown(owner, by_owner.get(owner, [])))
    return "\n".join(parts)


def knobs_section_markdown(owner: str, owner_knobs: Iterable[Knob[Any]] | None = None) -> str:
    """The Markdown section of one owning package."""
    if owner_knobs is None:
        owner_knobs = [knob for knob in _registry.values() if knob.owner == owner]
    lines = [
        f"## {owner}",
        "",
        "| knob | environment variable | type | default | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for knob in sorted(owner_knobs, key=lambda knob: knob.name):
        default = repr(knob.default)
        accepted = "" if knob.choices is None else " Accepted: " + ", ".join(f"`{c!r}`" for c in knob.choices) + "."
        lines.append(f"| `{knob.name}` | `{knob.env}` | {knob.kind.__name__} | `{default}` | {knob.help}{accepted} |")
    return "\n".join(lines) + "\n"
