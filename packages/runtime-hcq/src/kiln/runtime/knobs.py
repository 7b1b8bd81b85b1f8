"""The runtime's configuration knobs, registered in kiln.uops' knob registry.

DEV (default device) and PROFILE are kiln.uops knobs; the runtime adds LRU and one `<KIND>_RENDERER` knob per
device kind: the built-in kinds' at import (so docs/knobs.md lists them), other kinds' when a device of that kind
first picks its renderer.
"""

from __future__ import annotations

from kiln.uops import Knob, knobs, register_knob

__all__ = ["cpu_pin", "cpu_shares", "default_device", "lru_enabled", "profiling_enabled", "renderer_knob"]

_LRU = register_knob(
    "LRU", bool, True, "Keep freed device memory in a cache for reuse by allocations of the same size."
)

_CPU_SHARES = register_knob(
    "CPU_SHARES",
    int,
    1,
    "Split the host's cores into this many parts: device CPU:i runs its multi-core kernels on part i (mod the "
    "count), with its own queue. 1: every CPU device uses every core.",
)

_CPU_PIN = register_knob(
    "CPU_PIN",
    bool,
    True,
    "Pin each core-pool worker thread of a CPU device to one host core of its set (the launching thread stays "
    "free). Off, the OS may wake a worker on the launching thread's busy core, and a short multi-core kernel then "
    "runs its cores one after the other.",
)


_CPU_SPIN = register_knob(
    "CPU_SPIN",
    int,
    1000,
    "Microseconds a pinned core-pool worker keeps polling for the next multi-core launch after one before it "
    "sleeps (native launches only; it yields its core to any other runnable thread while it polls). A polling "
    "worker starts a launch at once; a sleeping one takes tens of microseconds to wake. 0: sleep at once (no CPU "
    "time spent waiting, e.g. for several kiln processes on one machine; slower back-to-back launches).",
)

_CPU_NATIVE_LAUNCH = register_knob(
    "CPU_NATIVE_LAUNCH",
    bool,
    True,
    "Run the cores of a multi-core CPU kernel from the compiler-built core launcher (kiln.renderers' "
    "core_launcher): no Python and no GIL per core. Off: one ctypes call per core from Python threads.",
)


def cpu_spin_microseconds() -> int:
    """How long a pinned core-pool worker polls for launches before sleeping (the CPU_SPIN knob; ValueError below
    0)."""
    value = _CPU_SPIN.value()
    if value < 0:
        raise ValueError(f"CPU_SPIN is a number of microseconds, at least 0; got {value}")
    return value


def cpu_native_launch() -> bool:
    """Whether multi-core CPU kernels are launched through the native core launcher (the CPU_NATIVE_LAUNCH knob)."""
    return _CPU_NATIVE_LAUNCH.value()


def cpu_pin() -> bool:
    """Whether core-pool workers are pinned to one core each (the CPU_PIN knob)."""
    return _CPU_PIN.value()


def cpu_shares() -> int:
    """How many parts CPU_SHARES splits the host's cores into (ValueError below 1)."""
    value = _CPU_SHARES.value()
    if value < 1:
        raise ValueError(f"CPU_SHARES must be at least 1, got {value}")
    return value


def default_device() -> str:
    """The device named by DEV ("" when unset)."""
    return knobs.DEVICE.strip()


_PROFILE = knobs.get_knob("PROFILE")  # read on every launch: the Knob itself, not through the registry's attribute


def profiling_enabled() -> bool:
    """Whether PROFILE is on."""
    return bool(_PROFILE.value())


def lru_enabled() -> bool:
    """Whether LRU is on (allocators cache freed blocks)."""
    return _LRU.value()


_BUILTIN_RENDERER_CHOICES = {
    "CPU": ("", "llvm", "c"),
    "PYTHON": ("", "python"),
    "CUDA": ("", "cuda", "ptx"),
    "CL": ("", "opencl"),
}
"""The accepted `<KIND>_RENDERER` values of the built-in kinds, after `_renderer_name` ("" picks the first)."""


def _renderer_name(raw: str) -> str:
    # the class name, 'llvm' and ' LLVM ' all name the LLVM renderer
    return raw.strip().lower().removesuffix("renderer")


_BUILTIN_RENDERER_HELP = {
    "CPU": "Renderer of CPU devices: 'llvm' (LLVM IR via llvmlite, the default with it) or 'c' (C, system compiler).",
    "PYTHON": "Renderer of PYTHON devices: 'python' (the interpreter's linear programs, the only one).",
    "CUDA": "Renderer of CUDA devices: 'cuda' (CUDA C via NVRTC, the default) or 'ptx' (PTX assembly).",
    "CL": "Renderer of CL devices: 'opencl' (OpenCL C built by the OpenCL platform, the only one).",
}


def renderer_knob(kind: str) -> Knob[str]:
    """The `<KIND>_RENDERER` knob: the renderer a device of `kind` uses instead of its first one."""
    if kind in _BUILTIN_RENDERER_HELP:
        return register_knob(
            f"{kind}_RENDERER",
            str,
            "",
            _BUILTIN_RENDERER_HELP[kind],
            owner="kiln.runtime",
            normalize=_renderer_name,
            choices=_BUILTIN_RENDERER_CHOICES[kind],
        )
    return register_knob(
        f"{kind}_RENDERER",
        str,
        "",
        f"Renderer of {kind} devices, by class name without 'Renderer', any case; empty: the device's first.",
        owner="kiln.runtime.device",  # kinds of other packages and tests: registered when first used, not documented
    )


for _kind in _BUILTIN_RENDERER_HELP:
    renderer_knob(_kind)
