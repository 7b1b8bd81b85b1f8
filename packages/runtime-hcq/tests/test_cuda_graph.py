"""`CUDAGraphBatch` against a fake libcuda with the graph API (no GPU here): the driver calls it makes, in order, and
that the graph's replays compute what the same kernels launched one by one compute (checked against numpy).

The fake graph driver copies each kernel node's parameter values when a node is added or updated (as the driver
does), and `cuGraphLaunch` runs the executable's nodes in dependency order with codegen's interpreter.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from fake_libcuda import INVALID_VALUE, SUCCESS, FakeLibcuda, out
from test_cuda_device import FakeCUDARenderer

from kiln.codegen import KernelInfo, Program, get_program
from kiln.runtime import Buffer, Device
from kiln.runtime.cuda import CUDADevice, DriverAPI
from kiln.runtime.cuda.cuda_graph import CUDAGraphBatch, KernelNodeParams, graph_device
from kiln.uops import Ops, UOp, dtypes


class _GraphRenderer(FakeCUDARenderer):
    """test_cuda_device's fake GPU target, for the device kind GRAPHCUDA."""

    device = "GRAPHCUDA"


@dataclass
class _Node:
    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    parameters: tuple[int, ...]
    dependencies: tuple[int, ...]


@dataclass
class FakeGraphLibcuda(FakeLibcuda):
    """FakeLibcuda with the graph functions `CUDAGraphBatch` binds; every graph call is recorded in `calls`."""

    calls: list[str] = field(default_factory=list)
    streams: set[int] = field(default_factory=set)
    graphs: dict[int, dict[int, _Node]] = field(default_factory=dict)
    executables: dict[int, dict[int, _Node]] = field(default_factory=dict)

    def _node_of(self, params: Any, dependencies: tuple[int, ...]) -> _Node:
        assert params.sharedMemBytes == 0 and not params.extra and not params.kern and not params.ctx
        program = self.functions[params.func]
        values = self.read_parameters(program, params.kernelParams)  # copied now: the caller may free them
        grid = (params.gridDimX, params.gridDimY, params.gridDimZ)
        return _Node(params.func, grid, (params.blockDimX, params.blockDimY, params.blockDimZ), values, dependencies)

    def cuStreamCreate(self, stream: Any, flags: int) -> int:
        self.calls.append(f"cuStreamCreate flags={flags}")
        handle = self._handle()
        self.streams.add(handle)
        out(stream).value = handle
        return SUCCESS

    def cuStreamDestroy_v2(self, stream: int) -> int:
        self.calls.append("cuStreamDestroy")
        if stream not in self.streams:
            return INVALID_VALUE
        self.streams.remove(stream)
        return SUCCESS

    def cuGraphCreate(self, graph: Any, flags: int) -> int:
        self.calls.append("cuGraphCreate")
        handle = self._handle()
        self.graphs[handle] = {}
        out(graph).value = handle
        return SUCCESS

    def cuGraphAddKernelNode_v2(self, node: Any, graph: int, dependencies: Any, count: int, params: Any) -> int:
        self.calls.append(f"cuGraphAddKernelNode deps={count}")
        after = tuple(out(dependencies).value for _ in range(count)) if count else ()
        assert all(d in self.graphs[graph] for d in after), "a dependency outside the graph"
        handle = self._handle()
        self.graphs[graph][handle] = self._node_of(out(params), after)
        out(node).value = handle
        return SUCCESS

    def cuGraphInstantiateWithFlags(self, executable: Any, graph: int, flags: int) -> int:
        self.calls.append("cuGraphInstantiateWithFlags")
        handle = self._handle()
        self.executables[handle] = dict(self.graphs[graph])
        out(executable).value = handle
        return SUCCESS

    def cuGraphExecKernelNodeSetParams_v2(self, executable: int, node: int, params: Any) -> int:
        self.calls.append("cuGraphExecKernelNodeSetParams")
        old = self.executables[executable][node]
        new = self._node_of(out(params), old.dependencies)
        if new.function != old.function:
            return INVALID_VALUE  # the driver refuses a different function
        self.executables[executable][node] = new
        return SUCCESS

    def cuGraphLaunch(self, executable: int, stream: int) -> int:
        self.calls.append("cuGraphLaunch")
        assert stream in self.streams, "launched on a stream the batch did not create"
        done: set[int] = set()
        nodes = self.executables[executable]
        while len(done) < len(nodes):
            ready = [h for h, n in nodes.items() if h not in done and set(n.dependencies) <= done]
            assert len(ready) == 1, "the kernels of a batch form one chain"
            node = nodes[ready[0]]
            self.execute(self.functions[node.function], node.parameters, node.grid, node.block)
            done.add(ready[0])
        return SUCCESS

    def cuGraphExecDestroy(self, executable: int) -> int:
        self.calls.append("cuGraphExecDestroy")
        return SUCCESS if self.executables.pop(executable, None) is not None else INVALID_VALUE

    def cuGraphDestroy(self, graph: int) -> int:
        self.calls.append("cuGraphDestroy")
        return SUCCESS if self.graphs.pop(graph, None) is not None else INVALID_VALUE


@pytest.fixture
def fake() -> Iterator[FakeGraphLibcuda]:
    library = FakeGraphLibcuda(gpus=1)
    api = DriverAPI(library)
    Device.register("GRAPHCUDA", lambda name: CUDADevice(name, api))
    Device.forget("GRAPHCUDA")  # a device another test opened under this name holds another library
    try:
        yield library
    finally:
        Device.unregister("GRAPHCUDA")  # closes the device too: no later test meets this fake library


@dataclass
class Step:
    """A captured launch as kiln.tensor's CapturedStep holds it."""

    runner: Any
    buffers: list[Buffer | None]
    patches: tuple[tuple[int, int], ...] = ()
    var_vals: dict[str, int] | None = None


SIZE = 32


def affine(name: str, scale: int, limit: int | None = None) -> UOp:
    """out[i] = a[i] * scale + k over i < n (int32): k always a variable, n one when `limit` is given."""
    k = UOp.variable("k", -100, 100)
    n = UOp.variable("n", 1, limit) if limit is not None else SIZE
    i = UOp.range(n, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(SIZE), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(SIZE), arg=1)
    value = a.index(i).load() * scale + k.cast(dtypes.int32)
    return UOp(Ops.SINK, src=(out.index(i).store(value).end(i),), arg=KernelInfo(name))


def doubled(name: str) -> UOp:
    """out[i] = a[i] * 2 (no variables)."""
    i = UOp.range(SIZE, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(SIZE), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(SIZE), arg=1)
    return UOp(Ops.SINK, src=(out.index(i).store(a.index(i).load() * 2).end(i),), arg=KernelInfo(name))


def runner_of(fake: FakeGraphLibcuda, sink: UOp) -> Any:
    program = Program(get_program(sink, _GraphRenderer()))
    fake.programs[program.binary or b""] = program
    return Device["GRAPHCUDA"].runtime(program)


def test_a_graph_replays_the_kernels_with_new_inputs_and_values(fake: FakeGraphLibcuda) -> None:
    first = runner_of(fake, affine("first", 3, limit=SIZE))
    second = runner_of(fake, doubled("second"))
    third = runner_of(fake, affine("third", -1))
    inputs = [Buffer("GRAPHCUDA", SIZE, dtypes.int32).copyin(np.arange(SIZE, dtype=np.int32)) for _ in range(2)]
    middle, scratch = Buffer("GRAPHCUDA", SIZE, dtypes.int32), Buffer("GRAPHCUDA", SIZE, dtypes.int32)
    for buffer in (middle, scratch):
        buffer.copyin(np.zeros(SIZE, np.int32))
    # input 0 -> first -> middle -> second -> scratch -> third -> input 1
    steps = [
        Step(first, [middle, inputs[0]], ((1, 0),), {"k": 5, "n": SIZE}),  # the capture's own input buffers
        Step(second, [scratch, middle]),
        Step(third, [inputs[1], scratch], ((0, 1),), {"k": 1}),
    ]
    assert all(graph_device(step) is Device["GRAPHCUDA"] for step in steps)
    batch = CUDAGraphBatch(Device["GRAPHCUDA"], steps)
    assert fake.calls == [
        "cuGraphCreate",
        "cuGraphAddKernelNode deps=0",
        "cuGraphAddKernelNode deps=1",
        "cuGraphAddKernelNode deps=1",
        "cuGraphInstantiateWithFlags",
        "cuStreamCreate flags=0",  # blocking: ordered with the legacy default stream's copies and launches
    ]
    fake.calls.clear()
    launches = len(fake.launches)
    middle_expected = np.zeros(SIZE, np.int32)
    for call, (k, n) in enumerate(((7, SIZE), (-2, 20))):
        source = np.arange(SIZE, dtype=np.int32) * (call + 1) - 9
        a, b = (Buffer("GRAPHCUDA", SIZE, dtypes.int32).copyin(v) for v in (source, np.full(SIZE, 4, np.int32)))
        batch([a, b], {"k": k, "n": n})
        middle_expected[:n] = source[:n] * 3 + k
        np.testing.assert_array_equal(middle.numpy(), middle_expected)
        # every kernel over k takes the call's k (the third one's launch size stays its own: it has no n)
        np.testing.assert_array_equal(b.numpy(), -(middle_expected * 2) + k)
    # the two nodes touching inputs or variables are updated, the middle one is not; nothing launched one by one
    assert fake.calls == (["cuGraphExecKernelNodeSetParams"] * 2 + ["cuGraphLaunch"]) * 2
    assert len(fake.launches) == launches
    batch.close()
    assert fake.calls[-3:] == ["cuGraphExecDestroy", "cuGraphDestroy", "cuStreamDestroy"]
    assert not fake.graphs and not fake.executables and not fake.streams
    batch.close()  # idempotent


def test_replays_check_variables_and_steps_are_checked(fake: FakeGraphLibcuda) -> None:
    first = runner_of(fake, affine("first", 3, limit=SIZE))
    out, source = Buffer("GRAPHCUDA", SIZE, dtypes.int32), Buffer("GRAPHCUDA", SIZE, dtypes.int32)
    batch = CUDAGraphBatch(Device["GRAPHCUDA"], [Step(first, [out, source], ((1, 0),), {"k": 1, "n": 4})])
    with pytest.raises(ValueError, match=r"variable 'n' = 99 is outside its bounds \[1, 32\]"):
        batch([source], {"n": 99})
    assert graph_device(Step(first, [out, source])) is None  # variables without captured values
    assert graph_device(Step(None, [out, source])) is None  # a copy
    with pytest.raises(ValueError, match="at least one kernel"):
        CUDAGraphBatch(Device["GRAPHCUDA"], [])
    with pytest.raises(ValueError, match=r"step 0 .* is not a kernel a graph on GRAPHCUDA can take"):
        CUDAGraphBatch(Device["GRAPHCUDA"], [Step(first, [out, source])])


def test_a_driver_without_the_graph_api_is_named() -> None:
    library = FakeLibcuda(gpus=1)
    device = CUDADevice("GRAPHCUDA", DriverAPI(library))  # the device opens without the graph functions
    Device.register("GRAPHCUDA", lambda name: device)  # the buffers below live on it
    Device.forget("GRAPHCUDA")  # not one another test opened under this name
    try:
        program = Program(get_program(doubled("plain"), _GraphRenderer()))
        library.programs[program.binary or b""] = program
        runner = device.load_program(program)
        with pytest.raises(OSError, match="libcuda has no function 'cuStreamCreate'"):
            CUDAGraphBatch(device, [Step(runner, [Buffer("GRAPHCUDA", SIZE, dtypes.int32)] * 2)])
    finally:
        Device.unregister("GRAPHCUDA")  # closes the device too: no later test meets this fake library
    assert ctypes.sizeof(KernelNodeParams) == 72  # cuda.h's CUDA_KERNEL_NODE_PARAMS_v2 on a 64-bit host
