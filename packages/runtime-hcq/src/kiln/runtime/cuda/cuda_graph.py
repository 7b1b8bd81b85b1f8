"""`CUDAGraphBatch`: a run of kernels of one CUDA device replayed as one CUDA graph (one `cuGraphLaunch`).

TinyJit's replay (kiln.tensor's `jit_replay`) submits a run of kernels of a queue-driven device as one list; a CUDA
device launches kernel by kernel, one `cuLaunchKernel` each (~3-5 µs of CPU per launch). A `CUDAGraphBatch` takes
the same captured steps (runner, buffers, which buffers are the call's inputs, variable values) and builds a graph
of kernel nodes, each depending on the one before (the kernels' order), instantiated once; a replay updates the
nodes whose arguments change (a kernel reading or writing an input, a kernel over variables) with
`cuGraphExecKernelNodeSetParams` and launches the graph.

The graph is built node by node (`cuGraphAddKernelNode`) rather than by stream capture: kiln launches on the legacy
default stream, which cannot be captured, and with node handles a replay updates exactly the nodes it must. The
graph runs on a stream of its own created without CU_STREAM_NON_BLOCKING, so it stays ordered with the copies and
single launches on the legacy default stream (CUDA guide, "Implicit Synchronization").

The graph functions are bound on first use (`DriverAPI.bind`), so a driver without them fails here, naming the
function, and not when the device opens.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kiln.runtime.buffer import Buffer
from kiln.runtime.cuda.context import CUDAContext
from kiln.runtime.cuda.cuda_runner import CUDAProgramRunner
from kiln.runtime.cuda.driver_api import kernel_parameters

__all__ = ["GRAPH_PROTOTYPES", "CUDAGraphBatch", "GraphStep", "KernelNodeParams", "graph_device"]


class KernelNodeParams(ctypes.Structure):
    """`CUDA_KERNEL_NODE_PARAMS_v2` (cuda.h, CUDA 12+): the v1 fields, then `kern` and `ctx` (NULL: use `func`)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
        ("extra", ctypes.POINTER(ctypes.c_void_p)),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


_c_void_pp = ctypes.POINTER(ctypes.c_void_p)
_params_p = ctypes.POINTER(KernelNodeParams)

GRAPH_PROTOTYPES: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    # name: (symbols to try, newest first; argument types from cuda.h)
    "cuStreamCreate": (("cuStreamCreate",), (_c_void_pp, ctypes.c_uint)),
    "cuStreamDestroy": (("cuStreamDestroy_v2", "cuStreamDestroy"), (ctypes.c_void_p,)),
    "cuGraphCreate": (("cuGraphCreate",), (_c_void_pp, ctypes.c_uint)),
    "cuGraphAddKernelNode": (
        ("cuGraphAddKernelNode_v2", "cuGraphAddKernelNode"),
        (_c_void_pp, ctypes.c_void_p, _c_void_pp, ctypes.c_size_t, _params_p),
    ),
    "cuGraphInstantiateWithFlags": (
        ("cuGraphInstantiateWithFlags",),
        (_c_void_pp, ctypes.c_void_p, ctypes.c_ulonglong),
    ),
    "cuGraphExecKernelNodeSetParams": (
        ("cuGraphExecKernelNodeSetParams_v2", "cuGraphExecKernelNodeSetParams"),
        (ctypes.c_void_p, ctypes.c_void_p, _params_p),
    ),
    "cuGraphLaunch": (("cuGraphLaunch",), (ctypes.c_void_p, ctypes.c_void_p)),
    "cuGraphExecDestroy": (("cuGraphExecDestroy",), (ctypes.c_void_p,)),
    "cuGraphDestroy": (("cuGraphDestroy",), (ctypes.c_void_p,)),
}
"""The driver's graph functions a `CUDAGraphBatch` calls (CUDA >= 12: the `_v2` kernel-node functions take
`KernelNodeParams`; an older driver's plain ones read its v1 prefix)."""


class GraphStep(Protocol):
    """One captured kernel launch, as kiln.tensor's `CapturedStep` holds it."""

    runner: Any
    buffers: list[Buffer | None]
    patches: tuple[tuple[int, int], ...]  # (position in buffers, input number)
    var_vals: dict[str, int] | None


def graph_device(step: GraphStep) -> CUDAContext | None:
    """The CUDA device whose graph can take `step`: a CUDA kernel whose launch sizes are fixed or follow the variable
    values given at capture; None otherwise (a copy, another device's kernel, variables without captured values)."""
    runner = step.runner
    if not isinstance(runner, CUDAProgramRunner):
        return None
    if bool(runner.variables) != bool(step.var_vals):
        return None
    dims = runner.launch_dims(step.var_vals or {})
    if not all(isinstance(size, int) and size >= 1 for sizes in dims for size in sizes):
        return None
    return runner.device


class _Node:
    """One kernel node: its runner, its captured buffers and variables, the inputs it takes, its current params."""

    __slots__ = ("arguments", "buffers", "handle", "params", "patches", "runner", "var_vals")

    def __init__(self, step: GraphStep) -> None:
        self.runner: CUDAProgramRunner = step.runner
        self.buffers, self.patches, self.var_vals = step.buffers, step.patches, step.var_vals
        self.handle: int | None = None
        self.arguments: tuple[Any, ...] = ()
        self.params = KernelNodeParams()

    def build(self, buffers: Sequence[Buffer | None], var_vals: Mapping[str, int] | None) -> KernelNodeParams:
        """Fresh params for a launch on `buffers` with these variable values (checked as a single launch is). The
        argument block and pointer array are kept alive with the node: the driver copies them during the call."""
        runner = self.runner
        present: Sequence[Buffer] = buffers  # type: ignore[assignment]  # unused slots may hold None
        values = runner.variable_values(var_vals) if var_vals else ()
        block = runner.pack_arguments(runner.buffer_addresses(present), values)
        storage = (ctypes.c_char * len(block)).from_buffer(block)
        pointers = kernel_parameters(storage, runner.arg_layout.offsets)
        global_size, local_size = runner.launch_dims(var_vals or {})
        params = KernelNodeParams(runner.function, *global_size, *local_size, 0, pointers, None, None, None)
        self.arguments, self.params = (block, storage, pointers), params
        return params


class CUDAGraphBatch:
    """A replay segment of consecutive kernels of one CUDA device, launched as one CUDA graph per replay.

    `CUDAGraphBatch(device, steps)` builds and instantiates the graph (steps as `graph_device` accepts them, all on
    `device`); `batch(inputs, values)` replays it with the call's input buffers and variable values; `close()` (or
    garbage collection) destroys the graph, its executable and its stream.
    """

    def __init__(self, device: CUDAContext, steps: Sequence[GraphStep]) -> None:
        if not steps:
            raise ValueError("a CUDA graph needs at least one kernel")
        for number, step in enumerate(steps):
            if graph_device(step) is not device:
                raise ValueError(f"step {number} ({step.runner!r}) is not a kernel a graph on {device.name} can take")
        self.device = device
        self.api = device.api
        self.api.bind(GRAPH_PROTOTYPES)
        self.graph: int | None = None
        self.executable: int | None = None
        self.stream: int | None = None
        device.make_current()
        self.nodes = [_Node(step) for step in steps]
        where = f"CUDA graph of {len(steps)} kernels on {device.name}"
        self.graph = self.api.get_handle("cuGraphCreate", 0, context=where)
        previous: ctypes.c_void_p | None = None
        for node in self.nodes:
            handle = ctypes.c_void_p()
            dependencies = ctypes.byref(previous) if previous is not None else None
            params = node.build(node.buffers, node.var_vals)
            self.api.call(
                "cuGraphAddKernelNode",
                ctypes.byref(handle),
                self.graph,
                dependencies,
                1 if previous is not None else 0,
                ctypes.byref(params),
                context=f"{node.runner.name} in the {where}",
            )
            node.handle, previous = handle.value, handle
        self.executable = self.api.get_handle("cuGraphInstantiateWithFlags", self.graph, 0, context=where)
        self.stream = self.api.get_handle("cuStreamCreate", 0, context=where)  # blocking: ordered with stream 0
        self.patched = [node for node in self.nodes if node.patches or node.var_vals]

    def __call__(self, inputs: Sequence[Buffer], values: Mapping[str, int]) -> None:
        """Launches the graph on `inputs` (the call's buffers, by input number); a kernel's variables take their
        value in `values`, else the captured one."""
        api = self.api
        self.device.make_current()
        for node in self.patched:
            buffers = list(node.buffers)
            for position, number in node.patches:
                buffers[position] = inputs[number]
            captured = node.var_vals
            var_vals = {name: values.get(name, value) for name, value in captured.items()} if captured else None
            params = node.build(buffers, var_vals)
            api.call("cuGraphExecKernelNodeSetParams", self.executable, node.handle, ctypes.byref(params))
        api.call("cuGraphLaunch", self.executable, self.stream, context=f"CUDA graph on {self.device.name}")

    def close(self) -> None:
        """Destroys the executable graph, the graph and the stream (idempotent)."""
        for attribute, function in (
            ("executable", "cuGraphExecDestroy"),
            ("graph", "cuGraphDestroy"),
            ("stream", "cuStreamDestroy"),
        ):
            handle = getattr(self, attribute, None)
            if handle is not None:
                setattr(self, attribute, None)
                self.api.call(function, handle)

    def __del__(self) -> None:
        # at interpreter exit the driver may be gone: what is left is freed with the process
        with contextlib.suppress(Exception):
            self.close()
