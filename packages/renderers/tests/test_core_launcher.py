"""The native core launcher (kiln.renderers.core_launcher), built by each CPU compiler: argument passing for every
parameter count, claiming, parking and waking, checked against Python callbacks (ctypes functions with the
kernels' own parameter types) that record what they were called with."""

from __future__ import annotations

import ctypes
import shutil
import threading
from collections.abc import Iterator

import pytest

from kiln.renderers import CCompiler, CoreLauncher, HostCompiler, LLVMCompiler, core_launcher_for, launcher_supported
from kiln.renderers.core_launcher import c_launcher_source, llvm_ir_launcher_source
from kiln.renderers.toolchain import ToolchainNotFoundError, llvmlite_binding

pytestmark = pytest.mark.skipif(not launcher_supported(), reason="the core launcher is for x86-64 / AArch64 Linux")

L = CoreLauncher


def _compilers() -> Iterator[object]:
    try:
        llvmlite_binding()
        yield pytest.param(LLVMCompiler, id="llvm")
    except ToolchainNotFoundError:
        yield pytest.param(LLVMCompiler, id="llvm", marks=pytest.mark.skip(reason="no llvmlite"))
    has_cc = shutil.which("cc") or shutil.which("clang") or shutil.which("gcc")
    yield pytest.param(CCompiler, id="c", marks=[] if has_cc else pytest.mark.skip(reason="no C compiler"))


@pytest.fixture(params=list(_compilers()))
def launcher(request: pytest.FixtureRequest) -> CoreLauncher:
    compiler: HostCompiler = request.param()
    built = core_launcher_for(compiler)
    assert built is not None
    return built


def _state(workers: int = 0) -> ctypes.Array[ctypes.c_int64]:
    state = CoreLauncher.new_state(workers)
    state[L.EXCLUDE] = -1
    return state


def _set_kernel(state: ctypes.Array[ctypes.c_int64], function: object, arguments: list[int]) -> None:
    state[L.FUNCTION] = ctypes.cast(function, ctypes.c_void_p).value or 0
    state[L.ARGUMENT_COUNT] = len(arguments)
    for index, value in enumerate(arguments):
        state[L.ARGUMENTS + index] = value
    state[L.FINISHED] = 0


@pytest.mark.parametrize("parameters", range(1, CoreLauncher.MAX_ARGUMENTS + 1))
def test_every_core_gets_the_arguments_and_its_core_number(launcher: CoreLauncher, parameters: int) -> None:
    # a kernel's parameters: pointers (64-bit), int32 / int64 variables, then the int32 core id; past six the
    # System V ABI passes them on the stack, where the launcher's 64-bit words must read as int32 too
    kinds = [(ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64)[i % 3] for i in range(parameters - 1)]
    values = []
    for index, kind in enumerate(kinds):
        if kind is ctypes.c_void_p:
            values.append(0x7F00_0000_0000 + 4096 * index)
        elif kind is ctypes.c_int32:
            values.append(-(index + 1) * 1000 if index % 2 else 2**31 - 1 - index)
        else:
            values.append(-(2**40) - index if index % 2 else 2**50 + index)
    calls: list[tuple[int, ...]] = []
    prototype = ctypes.CFUNCTYPE(None, *kinds, ctypes.c_int32)
    callback = prototype(lambda *received: calls.append(tuple(0 if v is None else v for v in received)))
    state = _state()
    _set_kernel(state, callback, values)
    assert launcher.launch(ctypes.addressof(state), (3 << 32) | 5, 5, 0) == 0
    assert sorted(call[-1] for call in calls) == [0, 1, 2, 3, 4]
    assert all(list(call[:-1]) == values for call in calls)
    assert state[L.FINISHED] == 5
    assert state[L.CLAIM] == 3 << 32  # every core claimed


def test_a_parked_worker_is_listed_for_waking_and_the_launch_runs_in_phase_one(launcher: CoreLauncher) -> None:
    ran: list[int] = []
    callback = ctypes.CFUNCTYPE(None, ctypes.c_int32)(ran.append)
    state = _state(workers=3)
    for index, (core, parked) in enumerate(((4, 1), (5, 1), (6, 0))):
        slot = L.HEADER_WORDS + L.WORKER_WORDS * index
        state[slot], state[slot + 1] = core, parked
    state[L.EXCLUDE] = 5  # the launching thread's core: its worker is left asleep
    _set_kernel(state, callback, [])
    address, word = ctypes.addressof(state), (9 << 32) | 3
    # two helpers wanted (3 cores): worker 0 is parked (claimed, listed), worker 1 excluded, worker 2 polling
    assert launcher.launch(address, word, 3, 0) == 1
    wake_list = L.HEADER_WORDS + L.WORKER_WORDS * 3
    assert state[wake_list] == 0
    assert [state[L.HEADER_WORDS + L.WORKER_WORDS * k + 1] for k in range(3)] == [0, 1, 0]
    assert ran == []  # phase 0 with someone to wake only publishes
    assert launcher.launch(address, word, 3, 1) == 0
    assert sorted(ran) == [0, 1, 2]


def test_a_worker_parks_after_its_budget_and_returns_when_poked(launcher: CoreLauncher) -> None:
    state = _state(workers=1)
    state[L.HEADER_WORDS] = -1
    address = ctypes.addressof(state)
    # nothing published: it polls `budget` times, parks (flag set) and says so in the low bit
    assert launcher.worker(address, 0, 0, 0, 100) == 1
    assert state[L.HEADER_WORDS + 1] == 1
    # POKE differs from what the caller saw: it returns at once, not parked, with the launch it has seen
    state[L.POKE] = 7
    assert launcher.worker(address, 0, 0, 6, 10**12) == 0
    assert state[L.HEADER_WORDS + 1] == 0


def test_a_polling_worker_runs_the_cores_of_each_new_launch(launcher: CoreLauncher) -> None:
    threads: list[int] = []
    lock = threading.Lock()
    worker_started = threading.Event()

    def core(number: int) -> None:
        with lock:
            threads.append(threading.get_ident())
        if threading.current_thread() is threading.main_thread():
            # the launching thread's core lasts until the worker has claimed the other one (however late the OS
            # runs it), so the launching thread cannot take both
            worker_started.wait(10)
        else:
            worker_started.set()

    callback = ctypes.CFUNCTYPE(None, ctypes.c_int32)(core)
    state = _state(workers=1)
    state[L.HEADER_WORDS] = -1
    address = ctypes.addressof(state)
    results: list[int] = []
    worker = threading.Thread(target=lambda: results.append(launcher.worker(address, 0, 0, 0, 10**12)))
    worker.start()
    try:
        for launch in range(1, 6):
            _set_kernel(state, callback, [])
            threads.clear()
            worker_started.clear()
            assert launcher.launch(address, (launch << 32) | 2, 2, 0) == 0  # the worker polls: none to wake
            assert len(threads) == 2
            assert len(set(threads)) == 2, "the polling worker took one core"
    finally:
        state[L.POKE] = 1  # stop the worker
        worker.join(10)
    assert not worker.is_alive()
    assert results == [5 << 1]  # returned because poked, having seen launch 5


def test_a_worker_on_the_launching_threads_core_leaves_the_launch_and_parks(launcher: CoreLauncher) -> None:
    ran: list[int] = []
    callback = ctypes.CFUNCTYPE(None, ctypes.c_int32)(ran.append)
    state = _state(workers=1)
    state[L.HEADER_WORDS] = 3  # the worker's core
    address = ctypes.addressof(state)
    _set_kernel(state, callback, [])
    state[L.EXCLUDE] = 3
    state[L.CLAIM] = (1 << 32) | 2  # published, not claimed
    assert launcher.worker(address, 0, 0, 0, 10**12) == (1 << 1) | 1  # saw launch 1, parked without running it
    assert ran == []
    assert state[L.CLAIM] == (1 << 32) | 2


def test_a_launch_published_while_a_worker_parks_is_not_missed(launcher: CoreLauncher) -> None:
    # the worker finds the launch already there when it starts: it runs the cores instead of parking
    ran: list[int] = []
    callback = ctypes.CFUNCTYPE(None, ctypes.c_int32)(ran.append)
    state = _state(workers=1)
    state[L.HEADER_WORDS] = -1
    _set_kernel(state, callback, [])
    state[L.CLAIM] = (2 << 32) | 3
    result = launcher.worker(ctypes.addressof(state), 0, 1, 0, 0)  # budget 0: would park at the first idle poll
    assert sorted(ran) == [0, 1, 2]
    assert result == (2 << 1) | 1
    assert state[L.FINISHED] == 3


def test_polls_per_microsecond_is_measured_and_plausible(launcher: CoreLauncher) -> None:
    rate = launcher.polls_per_microsecond()
    assert 0.01 < rate < 10_000  # a poll is a PAUSE and a load: nanoseconds, not milliseconds or picoseconds
    assert launcher.polls_per_microsecond() == rate  # measured once


def test_launcher_supported_names_the_platforms() -> None:
    assert launcher_supported("x86_64", "linux")
    assert launcher_supported("aarch64", "linux")
    assert not launcher_supported("arm64", "darwin")  # Apple's arm64 ABI packs stack arguments by their size
    assert not launcher_supported("x86_64", "win32")
    assert not launcher_supported("riscv64", "linux")


def test_the_sources_name_both_functions_and_the_pause_of_each_architecture() -> None:
    c_source = c_launcher_source()
    assert "i64 kiln_core_launch(" in c_source and "i64 kiln_core_worker(" in c_source
    assert "define i64 @kiln_core_launch(" in llvm_ir_launcher_source("x86_64")
    assert "llvm.x86.sse2.pause" in llvm_ir_launcher_source("x86_64")
    assert "llvm.aarch64.hint(i32 1)" in llvm_ir_launcher_source("aarch64")


def test_a_compiler_without_a_launcher_source_gives_none() -> None:
    class Plain(HostCompiler):
        elf_type = 3

        def compile(self, source: str) -> bytes:
            raise AssertionError("not compiled")

        def load(self, binary: bytes, uops: object) -> object:  # type: ignore[override]
            raise AssertionError("not loaded")

    assert core_launcher_for(Plain()) is None
    with pytest.raises(NotImplementedError, match="Plain cannot load functions"):
        Plain().load_functions(b"", ["f"])
