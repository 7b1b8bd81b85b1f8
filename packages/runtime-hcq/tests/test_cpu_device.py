"""The CPU device: multi-core kernels give the bits of single-core ones, binaries load through the compiler their
program's signature names (the binary is not read to choose it), and loading problems raise clear errors."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import pytest
from corpus import CASES_BY_NAME, KernelCase, to_storage

from kiln.codegen import (
    Compiler,
    KernelInfo,
    KernelSignature,
    Opt,
    OptOps,
    Program,
    Renderer,
    VariableParameter,
    get_program,
)
from kiln.renderers import CCompiler, CoreLauncher, CRenderer, HostKernel, LLVMRenderer, cpu_renderers
from kiln.runtime import Buffer, CPUDevice, Device
from kiln.runtime.cpu_device import CPUProgramRunner
from kiln.runtime.native_kernel import check_parameters
from kiln.runtime.program_runner import VariableSpec
from kiln.runtime.thread_engine import ThreadQueueEngine
from kiln.uops import Context, Ops, UOp, dtypes

CPU_RENDERERS = [CRenderer, LLVMRenderer]


def run_raw(case: KernelCase, program: Program, seed: int = 0) -> list[np.ndarray]:
    """The case's outputs (raw storage) after running `program` on the CPU device."""
    inputs = case.inputs(np.random.default_rng(seed))
    buffers = [Buffer("CPU", size, dtype) for dtype, size in case.buffers]
    for buffer, values, (dtype, _) in zip(buffers[case.outputs :], inputs, case.buffers[case.outputs :]):
        buffer.copyin(np.ascontiguousarray(to_storage(values, dtype)))
    for buffer in buffers[: case.outputs]:
        buffer.copyin(np.zeros(buffer.nbytes, np.uint8))
    Device["CPU"].runtime(program)(buffers, case.var_vals, wait=True)
    results = []
    for buffer in buffers[: case.outputs]:
        raw = np.empty(buffer.nbytes, np.uint8)
        buffer.copyout(raw)
        results.append(raw)
    return results


@pytest.mark.parametrize(
    ("case_name", "cores"),
    [
        ("matmul", 2),
        ("matmul", 8),
        ("softmax", 4),
        ("conv2d", 2),
        ("transcendental_mix", 8),
        ("elementwise_float16", 3),
    ],
)
@pytest.mark.parametrize("renderer_class", CPU_RENDERERS, ids=lambda r: r.__name__)
def test_multi_core_kernels_give_the_bits_of_single_core_ones(
    renderer_class: type[Renderer], case_name: str, cores: int
) -> None:
    case = CASES_BY_NAME[case_name]
    renderer = renderer_class()
    renderer.thread_max = 8  # more cores than this machine has: the pool queues the extra calls
    single = Program(get_program(case.sink, renderer, []))
    threaded = Program(get_program(case.sink, renderer, [Opt(OptOps.THREAD, 0, cores)]))
    assert single.global_size == (1, 1, 1) and threaded.global_size == (cores, 1, 1)
    runner = Device["CPU"].runtime(threaded)
    assert runner.takes_core_id  # type: ignore[attr-defined]
    for expected, got in zip(run_raw(case, single), run_raw(case, threaded)):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("case_name", "opts"),
    [
        ("matmul", [Opt(OptOps.BLOCK, 2, 4)]),
        (
            "matmul",
            [Opt(OptOps.BLOCK, 2, 6), Opt(OptOps.THREAD, 0, 2), Opt(OptOps.UPCAST, 1, 5), Opt(OptOps.UNROLL, 2, 2)],
        ),
        (
            "conv2d",
            [Opt(OptOps.PADTO, 4, 4), Opt(OptOps.BLOCK, 4, 2), Opt(OptOps.THREAD, 1, 4), Opt(OptOps.UPCAST, 3, 4)],
        ),
        ("max_axis1", [Opt(OptOps.BLOCK, 1, 4), Opt(OptOps.UNROLL, 1, 4)]),
        ("row_mean", [Opt(OptOps.BLOCK, 1, 2), Opt(OptOps.UPCAST, 0, 5)]),
        ("subtract_row_sum", [Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.UPCAST, 1, 4)]),
    ],
)
@pytest.mark.parametrize("renderer_class", CPU_RENDERERS, ids=lambda r: r.__name__)
def test_reduce_blocked_kernels_match_numpy(renderer_class: type[Renderer], case_name: str, opts: list[Opt]) -> None:
    # BLOCK (reduce blocking) compiled by a real toolchain: the partial results carried through the output buffer
    case = CASES_BY_NAME[case_name]
    renderer = renderer_class()
    renderer.thread_max = 8
    program = Program(get_program(case.sink, renderer, opts))
    (raw,) = run_raw(case, program)
    (expected,) = case.reference(case.inputs(np.random.default_rng(0)), {})
    np.testing.assert_allclose(raw.view(np.float32), expected, rtol=1e-6)


def test_binaries_are_loaded_by_their_renderers_compiler() -> None:
    case = CASES_BY_NAME["outer_product"]
    device = Device["CPU"]
    assert isinstance(device, CPUDevice)
    for renderer_class in (CRenderer, LLVMRenderer):
        program = Program(get_program(case.sink, renderer_class(), None))
        compiler = renderer_class().compiler
        identity = program.signature.compiler
        assert identity is not None and identity.compiler is type(compiler) and identity.version == compiler.identity
        loader = device.loader_for(program)
        assert type(loader) is type(compiler) and device.loader_for(program) is loader  # made once per device
        inputs = case.inputs(np.random.default_rng(0))
        (raw,) = run_raw(case, program)
        np.testing.assert_array_equal(raw.view(np.float32), case.reference(inputs, {})[0])


def test_the_renderer_defaults_to_llvm_and_cpu_renderer_picks_c() -> None:
    device = Device["CPU"]
    assert device.renderers == cpu_renderers() == (LLVMRenderer, CRenderer)  # llvmlite is a dev dependency
    assert device.renderer_class is LLVMRenderer
    with Context(CPU_RENDERER="c"):
        assert device.renderer_class is CRenderer


class BytesCompiler(Compiler):
    """Returns fixed bytes as the "binary" of any source."""

    def __init__(self, binary: bytes) -> None:
        self.binary = binary
        self.identity = f"fixed {binary!r}"

    def compile(self, source: str) -> bytes:
        return self.binary


def program_with_binary(binary: bytes | None) -> Program:
    """A CPU program whose "binary" is `binary` (None: no compiler, so no binary)."""

    class Fixed(CRenderer):
        compiler = BytesCompiler(binary) if binary is not None else None  # type: ignore[assignment]

    return Program(get_program(CASES_BY_NAME["outer_product"].sink, Fixed(), []))


def test_unloadable_programs_raise_clear_errors() -> None:
    with pytest.raises(RuntimeError, match="has no binary: CPU programs must come from a renderer with a compiler"):
        Device["CPU"].runtime(program_with_binary(None))
    # a real shared object, but built by a compiler that cannot load into the process: refused by its identity
    with pytest.raises(RuntimeError, match=r"compiled by .*BytesCompiler \(fixed b'.*'\), which cannot load kernels"):
        Device["CPU"].runtime(program_with_binary(b"\x7fELF\x02\x01\x01" + bytes(9) + (3).to_bytes(2, "little")))


_NOT_ELF = b"kiln test wrapper\x00"


class WrappedCCompiler(CCompiler):
    """The C compiler with its shared objects behind a prefix: binaries no ELF reader would recognize."""

    def toolchain_identity(self) -> str:
        return f"{super().toolchain_identity()} wrapped"  # its own compile-cache entries

    def compile(self, source: str) -> bytes:
        return _NOT_ELF + super().compile(source)

    def load(self, binary: bytes, signature: KernelSignature) -> HostKernel:
        if not binary.startswith(_NOT_ELF):
            raise AssertionError(f"not this compiler's binary: {binary[:24]!r}")
        return super().load(binary[len(_NOT_ELF) :], signature)


def test_the_loader_is_the_compiler_the_signature_names_not_the_binarys_format() -> None:
    class WrappedC(CRenderer):
        def make_compiler(self) -> CCompiler:
            return WrappedCCompiler()

    case = CASES_BY_NAME["outer_product"]
    program = Program(get_program(case.sink, WrappedC(), None))
    assert program.binary is not None and not program.binary.startswith(b"\x7fELF")
    device = Device["CPU"]
    assert isinstance(device, CPUDevice) and type(device.loader_for(program)) is WrappedCCompiler
    inputs = case.inputs(np.random.default_rng(0))
    (raw,) = run_raw(case, program)
    np.testing.assert_array_equal(raw.view(np.float32), case.reference(inputs, {})[0])


class Parameter:
    def __init__(self, kind: str, name: str, ctype: object) -> None:
        self.kind, self.name, self.ctype = kind, name, ctype


def test_a_kernel_whose_parameters_disagree_with_the_program_is_refused() -> None:
    import ctypes

    variable = VariableSpec(VariableParameter("n", dtypes.int32, 1, 10))
    good = [Parameter("buffer", "0", ctypes.c_void_p), Parameter("variable", "n", ctypes.c_int32)]
    check_parameters("k", good, (0,), (variable,), core_id=False)
    with pytest.raises(RuntimeError, match=r"'k': the loaded kernel takes .* but the runtime passes"):
        check_parameters("k", good, (0,), (variable,), core_id=True)
    wide = [Parameter("buffer", "0", ctypes.c_void_p), Parameter("variable", "n", ctypes.c_int64)]
    with pytest.raises(RuntimeError, match="calling convention"):
        check_parameters("k", wide, (0,), (variable,), core_id=False)


# -- the launch fast path: per-runner argument checks, inline tiny kernels ---------------------------------------


def add_one_program(size: int, name: str, opts: list[Opt] | None = None) -> Program:
    """out[i] = a[i] + 1 over `size` float32 elements, built with the CPU device's renderer (its heuristic's opts
    unless `opts` is given)."""
    i = UOp.range(size, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=1)
    stored = out.index(i).store(a.index(i).load() + UOp.const(dtypes.float32, 1.0)).end(i)
    sink = UOp(Ops.SINK, src=(stored,), arg=KernelInfo(name))
    return Program(get_program(sink, Device["CPU"].renderer, opts))


def test_small_programs_launch_inline_and_big_ones_queue() -> None:
    tiny = Device["CPU"].runtime(add_one_program(16, "tiny_add_one"))
    middle = Device["CPU"].runtime(add_one_program(1 << 16, "middle_add_one"))
    big = Device["CPU"].runtime(add_one_program(1 << 23, "big_add_one", opts=[]))
    # estimated work (adds + bytes): 144, ~0.6 Mi and 72 Mi against the device's limit of 64 Mi
    assert Device["CPU"].inline_work_limit == 1 << 26  # type: ignore[attr-defined]
    assert tiny.inline and middle.inline and not big.inline  # type: ignore[attr-defined]


def test_multi_core_programs_launch_inline_whatever_their_size() -> None:
    # a multi-core kernel keeps the launching thread busy too: from the queue's thread it would only add handoffs
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no multi-core kernels")
    multi = add_one_program(1 << 23, "big_add_one_threads")
    assert multi.uses_core_id  # the heuristic splits 8 Mi elements over the cores
    assert Device["CPU"].runtime(multi).inline  # type: ignore[attr-defined]
    assert not Device["CPU"].runtime(add_one_program(1 << 23, "big_add_one_single", opts=[])).inline  # type: ignore[attr-defined]


def test_with_cpu_shares_multi_core_programs_keep_the_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no multi-core kernels")
    monkeypatch.setenv("CPU_SHARES", "2")
    device = CPUDevice("CPU:1")
    multi = add_one_program(1 << 23, "big_add_one_threads")
    assert multi.uses_core_id and device.inline_multicore_limit == 1 << 16
    assert not CPUProgramRunner(device, multi).inline


def test_devices_sharing_the_cores_out_run_only_tiny_programs_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    # with CPU_SHARES the devices run side by side: a caller thread running mid-size kernels of several devices
    # would serialize them, so only ~10 us launches run in the caller's thread
    monkeypatch.setenv("CPU_SHARES", "2")
    device = CPUDevice("CPU:1")
    assert device.inline_work_limit == 1 << 16
    tiny = CPUProgramRunner(device, add_one_program(16, "tiny_add_one"))
    middle = CPUProgramRunner(device, add_one_program(1 << 16, "middle_add_one"))
    assert tiny.inline and not middle.inline


def test_repeated_launches_on_other_buffers_match_numpy() -> None:
    runner = Device["CPU"].runtime(add_one_program(16, "tiny_add_one"))
    rng = np.random.default_rng(5)
    launches = []
    for step in range(40):
        # plain buffers, larger buffers and aligned views of a shared base: each launch gets its own
        values = rng.standard_normal(16 + step % 3).astype(np.float32)
        source = Buffer("CPU", values.size, dtypes.float32).copyin(values)
        if step % 4 == 3:
            base = Buffer("CPU", 64, dtypes.float32).allocate()
            out = base.view(16, dtypes.float32, offset=64 * (step % 3))  # the kernel reads 64-byte vectors
        else:
            out = Buffer("CPU", 16 + step % 2, dtypes.float32)
        runner([out, source])
        launches.append((out, values))
    Device["CPU"].synchronize()
    for out, values in launches:
        np.testing.assert_array_equal(out.numpy()[:16], values[:16] + np.float32(1))


def test_inline_launches_on_repeated_addresses_run_on_each_launchs_buffers() -> None:
    # an inline launch reuses the argument block of earlier launches on the same addresses (kept per runner, at
    # most 64): every launch must still read and write its own buffers
    runner = Device["CPU"].runtime(add_one_program(16, "tiny_add_one"))
    rng = np.random.default_rng(11)
    values = [rng.standard_normal(16).astype(np.float32) for _ in range(3)]
    sources = [Buffer("CPU", 16, dtypes.float32).copyin(v) for v in values]
    outputs = [Buffer("CPU", 16, dtypes.float32) for _ in range(2)]
    for step in range(12):
        runner([outputs[step % 2], sources[step % 3]])
        np.testing.assert_array_equal(outputs[step % 2].numpy(), values[step % 3] + np.float32(1))
    many = [Buffer("CPU", 16, dtypes.float32) for _ in range(100)]
    for out in many:
        runner([out, sources[0]])
    assert len(runner._inline_blocks) <= 64  # type: ignore[attr-defined]
    for out in many:
        np.testing.assert_array_equal(out.numpy(), values[0] + np.float32(1))


def test_wrong_buffers_are_refused_after_good_launches() -> None:
    runner = Device["CPU"].runtime(add_one_program(16, "tiny_add_one"))
    good = [Buffer("CPU", 16, dtypes.float32), Buffer("CPU", 16, dtypes.float32).copyin(np.zeros(16, np.float32))]
    for _ in range(3):  # the checks of these buffers are remembered; other buffers must still be checked
        runner(good)
    source = good[1]
    cases: list[tuple[list[object], type[Exception], str]] = [
        ([Buffer("CPU", 8, dtypes.float32), source], ValueError, r"buffer 0 holds 32 bytes .* accesses 64 bytes"),
        ([Buffer("CPU", 16, dtypes.int16), source], TypeError, r"buffer 0 holds dtypes.int16, the kernel reads"),
        ([Buffer("PYTHON", 16, dtypes.float32), source], ValueError, r"buffer 0 is on 'PYTHON'"),
        (["not a buffer", source], TypeError, r"buffer 0 must be a kiln.runtime Buffer, got str"),
        ([good[0]], ValueError, r"takes 2 buffers \(slots 0..1\), got 1"),
        ([good[0], Buffer("CPU", 15, dtypes.float32)], ValueError, r"buffer 1 holds 60 bytes"),
    ]
    for arguments, error, message in cases:
        with pytest.raises(error, match=message):
            runner(arguments)  # type: ignore[arg-type]
    np.testing.assert_array_equal(good[0].numpy(), np.ones(16, np.float32))  # the good launches ran


def test_inline_launches_wait_for_queued_big_kernels() -> None:
    size = 1 << 23  # several milliseconds of work: queued on the device's worker
    big = Device["CPU"].runtime(add_one_program(size, "big_add_one_4m"))
    tiny = Device["CPU"].runtime(add_one_program(16, "tiny_add_one"))
    values = np.arange(size, dtype=np.float32)
    source = Buffer("CPU", size, dtypes.float32).copyin(values)
    middle = Buffer("CPU", size, dtypes.float32)
    results = []
    for _ in range(3):
        big([middle, source])
        # reads what the queued big kernel writes: it must run after it, wherever it runs
        out = Buffer("CPU", 16, dtypes.float32)
        tiny([out, middle.view(16, dtypes.float32, offset=4 * (size - 16))])
        results.append(out)
    Device["CPU"].synchronize()
    for out in results:
        np.testing.assert_array_equal(out.numpy(), values[-16:] + np.float32(2))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no multi-core kernels")
@pytest.mark.parametrize("inputs", [1, 5, 11, 14])
def test_multi_core_kernels_with_many_parameters_and_int32_variables_match_numpy(inputs: int) -> None:
    # out[i] = sum_k a_k[i] * (k + 1) + (p - q) over 4096 elements split over 2 cores: with 11 and more inputs the
    # parameters (buffers, two int32 variables, the core id) go past the registers onto the stack, where the native
    # launcher passes 64-bit words (with 14 inputs: 18 parameters, more than it takes, so the ctypes path runs)
    size = 4096
    i = UOp.range(size, 0)
    p, q = UOp.variable("p", -(2**31), 2**31 - 1, dtypes.int32), UOp.variable("q", -(2**31), 2**31 - 1, dtypes.int32)
    total = (p - q).cast(dtypes.float32)
    for k in range(inputs):
        source = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=k + 1)
        total = total + source.index(i).load() * UOp.const(dtypes.float32, float(k + 1))
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=0)
    sink = UOp(Ops.SINK, src=(out.index(i).store(total).end(i),), arg=KernelInfo(f"many_inputs_{inputs}"))
    program = Program(get_program(sink, Device["CPU"].renderer, [Opt(OptOps.THREAD, 0, 2)]))
    assert program.uses_core_id and program.global_size[0] == 2
    runner = Device["CPU"].runtime(program)
    rng = np.random.default_rng(inputs)
    arrays = [rng.integers(-8, 8, size).astype(np.float32) for _ in range(inputs)]
    pool = Device["CPU"].core_pool  # type: ignore[attr-defined]
    launches_before = pool._launches
    for p_value, q_value in ((3, 10), (-(2**31), -(2**31) + 5), (2**31 - 1, 2**31 - 3)):
        result = Buffer("CPU", size, dtypes.float32)
        runner([result, *(Buffer("CPU", size, dtypes.float32).copyin(a) for a in arrays)], {"p": p_value, "q": q_value})
        Device["CPU"].synchronize()
        expected = np.float32(p_value - q_value) + sum(a * np.float32(k + 1) for k, a in enumerate(arrays))
        np.testing.assert_array_equal(result.numpy(), expected.astype(np.float32))
    native = pool.launcher is not None and inputs + 3 < CoreLauncher.MAX_ARGUMENTS  # buffers + 2 variables < 16
    assert pool._launches - launches_before == (3 if native else 0)


def _in_forked_child(work: Callable[[], None], timeout: float = 60.0) -> int:
    """Runs `work` in a child made by os.fork(); its exit status (0: `work` returned), or -1 when it hung."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_queued_and_multi_core_launches() -> None:
    # the queue's worker thread and the core pool's workers do not survive a fork: before the fork hooks, a queued
    # launch in the child waited forever for a thread that was not there
    device = Device["CPU"]
    big = device.runtime(add_one_program(1 << 23, "fork_big_add_one", opts=[]))  # one core, queued (over the limit)
    assert not big.inline  # type: ignore[attr-defined]
    values = np.arange(1 << 23, dtype=np.float32)
    source = Buffer("CPU", values.size, dtypes.float32).copyin(values)
    result = Buffer("CPU", values.size, dtypes.float32)
    big([result, source])
    device.synchronize()  # the parent has used the queue's thread and (below) the core pool before forking
    multi = device.runtime(add_one_program(1 << 23, "fork_multi_add_one")) if (os.cpu_count() or 1) > 1 else big
    multi([result, source])
    device.synchronize()

    def child() -> None:
        for runner in (big, multi, big):
            out = Buffer("CPU", values.size, dtypes.float32)
            runner([out, source])
            device.synchronize()
            if not np.array_equal(out.numpy(), values + 1):
                raise AssertionError("wrong result in the child")

    assert _in_forked_child(child) == 0
    big([result, source])  # the parent is unaffected
    device.synchronize()
    np.testing.assert_array_equal(result.numpy(), values + 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_an_engine_forked_while_running_a_list_fails_in_the_child_naming_the_fork() -> None:
    engine = ThreadQueueEngine("fork-test")
    engine._run_lock.acquire()  # as if its worker were running a list at the fork
    try:

        def child() -> None:
            if engine.error is None or "forked while a command list was running" not in str(engine.error):
                raise AssertionError(f"expected the fork named in the error, got {engine.error!r}")
            with pytest.raises(RuntimeError, match="forked while a command list was running"):
                engine.check()

        assert _in_forked_child(child) == 0
    finally:
        engine._run_lock.release()
    assert engine.error is None  # the parent's engine is untouched
