"""CorePool: every core of a launch runs exactly once, really in parallel, and errors reach the launching thread."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections import Counter

import pytest

from kiln.renderers import CoreLauncher, HostCompiler, core_launcher_for, launcher_supported
from kiln.runtime import CorePool
from kiln.uops import Context


def test_every_core_runs_once_at_the_same_time() -> None:
    pool = CorePool("test", workers=3)
    cores: Counter[int] = Counter()
    threads: set[int] = set()
    lock = threading.Lock()
    # all four calls must be inside the function at once to pass the barrier: they run in parallel
    meeting = threading.Barrier(4, timeout=10)

    def work(core: int) -> None:
        meeting.wait()
        with lock:
            cores[core] += 1
            threads.add(threading.get_ident())

    for _ in range(5):
        meeting.reset()
        pool.run(work, 4)
    assert cores == Counter({core: 5 for core in range(4)})
    assert threading.get_ident() in threads and len(threads) == 4  # the launching thread runs core 0
    pool.close()


def test_more_cores_than_workers_still_run_each_once() -> None:
    pool = CorePool("test", workers=2)
    seen: list[int] = []
    lock = threading.Lock()

    def work(core: int) -> None:
        with lock:
            seen.append(core)

    pool.run(work, 13)
    assert sorted(seen) == list(range(13))
    pool.close()


def test_an_error_in_any_core_reaches_the_caller_after_all_cores_finish() -> None:
    pool = CorePool("test", workers=2)
    finished: list[int] = []

    def work(core: int) -> None:
        if core == 2:
            raise ArithmeticError("core 2 failed")
        finished.append(core)

    with pytest.raises(ArithmeticError, match="core 2 failed"):
        pool.run(work, 5)
    assert sorted(finished) == [0, 1, 3, 4]
    pool.run(lambda core: finished.append(10 + core), 2)  # the pool still works
    assert sorted(finished)[-2:] == [10, 11]
    pool.close()


def test_without_workers_cores_run_in_order_on_the_caller() -> None:
    seen: list[tuple[int, int]] = []
    CorePool("serial", workers=0).run(lambda core: seen.append((core, threading.get_ident())), 3)
    assert seen == [(core, threading.get_ident()) for core in range(3)]
    with pytest.raises(ValueError, match="non-negative number of workers"):
        CorePool("bad", workers=-1)


def test_the_launching_thread_runs_the_cores_a_busy_worker_has_not_claimed() -> None:
    # The only worker is held inside an earlier launch; a second launch must not wait for it: its launching thread
    # claims every core itself (before, each core was queued for one worker, and this launch waited for the first).
    pool = CorePool("test", workers=1)
    release = threading.Event()
    inside = threading.Barrier(3, timeout=10)  # both cores of the first launch, and this thread

    def hold(core: int) -> None:
        inside.wait()
        release.wait(10)

    first = threading.Thread(target=pool.run, args=(hold, 2))
    first.start()
    inside.wait()  # the first launch's launcher and the worker are both inside `hold` now
    runners: list[tuple[int, int]] = []
    second = threading.Thread(target=pool.run, args=(lambda core: runners.append((core, threading.get_ident())), 3))
    second.start()
    second.join(10)
    finished_alone = not second.is_alive()
    release.set()
    first.join(10)
    second.join(10)
    assert finished_alone, "the second launch waited for the busy worker"
    assert sorted(core for core, _ in runners) == [0, 1, 2]
    assert {ident for _, ident in runners} == {second.ident}
    pool.close()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="thread affinity is Linux-only")
@pytest.mark.parametrize("pin", [True, False])
def test_workers_are_pinned_one_core_each_unless_cpu_pin_is_off(pin: bool) -> None:
    available = sorted(os.sched_getaffinity(0))
    with Context(CPU_PIN=int(pin)):
        pool = CorePool("test", workers=3)  # the knob is read when the pool is made
    pool.run(lambda core: None, 4)  # starts the workers
    affinities = [os.sched_getaffinity(thread.native_id or 0) for thread in pool._threads]
    if pin:
        assert affinities == [{available[k % len(available)]} for k in (0, 1, 2)]
    else:
        assert affinities == [set(available)] * 3
    pool.close()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="thread affinity is Linux-only")
def test_a_pool_on_given_cores_pins_its_workers_inside_them() -> None:
    available = sorted(os.sched_getaffinity(0))
    cores = tuple(available[-1:] * 3)  # one real core named three times: three pinned workers share it
    with Context(CPU_PIN=1):  # the default, set here so the test holds under any environment
        pool = CorePool("test", cores=cores)
    assert pool.workers == 3  # pinned: one per core, so every core but the launching thread's has a worker
    pool.run(lambda core: None, 3)
    assert [os.sched_getaffinity(thread.native_id or 0) for thread in pool._threads] == [{available[-1]}] * 3
    pool.close()
    with Context(CPU_PIN=0):
        unpinned = CorePool("test", cores=available)
        assert unpinned.workers == len(available) - 1  # the launching thread works too
        unpinned.run(lambda core: None, 2)
        assert all(os.sched_getaffinity(t.native_id or 0) == set(available) for t in unpinned._threads)
        unpinned.close()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="thread affinity is Linux-only")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_launch_wakes_the_worker_of_another_core_than_the_launching_threads() -> None:
    # the launching thread runs on core A: the worker it wakes must be pinned elsewhere, or the two halves of the
    # launch would share core A (both must be inside `work` at once to pass the barrier, then report their cores)
    available = sorted(os.sched_getaffinity(0))
    libc = ctypes.CDLL(None)
    with Context(CPU_PIN=1):
        pool = CorePool("test")
    meeting = threading.Barrier(2, timeout=10)
    seen: dict[int, int] = {}

    def work(core: int) -> None:
        meeting.wait()
        seen[core] = libc.sched_getcpu()

    def launch_from(core: int) -> None:
        os.sched_setaffinity(0, {core})
        pool.run(work, 2)

    for launcher_core in available[:2]:
        seen.clear()
        meeting.reset()
        thread = threading.Thread(target=launch_from, args=(launcher_core,))
        thread.start()
        thread.join(10)
        assert sorted(seen) == [0, 1] and len(set(seen.values())) == 2, seen
        assert launcher_core in seen.values()
    pool.close()


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt (a BaseException raised by a signal handler) without stopping pytest."""


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs POSIX signals")
def test_an_interrupted_launch_returns_only_after_the_workers_cores_finish() -> None:
    # A signal handler raises in the launching (main) thread while a worker still runs a core of the launch: the
    # interrupt must reach the caller only after that core is done, or the worker would go on writing into buffers
    # the caller frees and hands out again
    assert threading.current_thread() is threading.main_thread()
    pool = CorePool("test", workers=1)
    worker_started = threading.Event()
    worker_done = threading.Event()

    def work(core: int) -> None:
        if threading.current_thread() is threading.main_thread():
            worker_started.wait(5)  # the launcher's core ends once the worker holds the other one
        else:
            worker_started.set()
            time.sleep(0.3)
            worker_done.set()

    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupt()

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(_Interrupt):
            pool.run(work, 2)
        assert worker_done.is_set(), "the launch returned while its worker was still running a core"
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    ran: list[int] = []
    pool.run(ran.append, 3)  # the pool still works
    assert sorted(ran) == [0, 1, 2]
    pool.close()


# -- native launches (kiln.renderers' core launcher) ------------------------------------------------------------


def _native_launcher() -> CoreLauncher:
    from kiln.renderers import CCompiler, LLVMCompiler
    from kiln.renderers.toolchain import ToolchainNotFoundError, llvmlite_binding

    try:
        llvmlite_binding()
        compiler: HostCompiler = LLVMCompiler()
    except ToolchainNotFoundError:
        compiler = CCompiler()
    launcher = core_launcher_for(compiler)
    assert launcher is not None
    return launcher


native = pytest.mark.skipif(not launcher_supported(), reason="the native core launcher is for x86-64 / AArch64 Linux")
CoreFunction = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int32)


def _recording_kernel(meet: bool = False) -> tuple[object, int, list[tuple[int, int, int]]]:
    """A ctypes function with a kernel's shape (one argument, then the core id) that records (argument, core,
    thread); its address, and the records. With `meet`, a core run by the main thread lasts until a core has
    started on another thread (10 s at most), so a launch of two cores fails to use two threads only if no worker
    ever claims a core."""
    records: list[tuple[int, int, int]] = []
    other_started = threading.Event()

    def core(argument: int, number: int) -> None:
        records.append((argument, number, threading.get_ident()))
        if meet and threading.current_thread() is threading.main_thread():
            other_started.wait(10)
            other_started.clear()
        elif meet:
            other_started.set()

    function = CoreFunction(core)
    return function, ctypes.cast(function, ctypes.c_void_p).value or 0, records


@native
def test_a_native_launch_runs_every_core_once_with_its_arguments() -> None:
    with Context(CPU_PIN=1):
        pool = CorePool("test", launcher=_native_launcher)
    function, address, records = _recording_kernel()
    for launch in range(50):
        records.clear()
        count = 1 + launch % 6
        pool.run_kernel(address, function, (launch,), count)  # type: ignore[arg-type]
        assert sorted(core for _, core, _ in records) == list(range(count))
        assert all(argument == launch for argument, _, _ in records)
    assert pool.launcher is not None and pool._state is not None
    pool.close()
    assert not any(thread.is_alive() for thread in pool._threads)


@native
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
@pytest.mark.parametrize("spin", [0, 1000])
def test_native_launches_use_the_workers_whether_they_poll_or_sleep(spin: int) -> None:
    # CPU_SPIN=0: every worker sleeps right after a launch, and the next launch must wake it; with polling, the
    # worker takes its core without being woken. Either way two threads run each launch.
    with Context(CPU_PIN=1, CPU_SPIN=spin):
        pool = CorePool("test", launcher=_native_launcher)
        function, address, records = _recording_kernel(meet=True)
        for _ in range(5):
            records.clear()
            pool.run_kernel(address, function, (7,), 2)  # type: ignore[arg-type]
            assert sorted(core for _, core, _ in records) == [0, 1]
            assert len({ident for _, _, ident in records}) == 2, "a worker took no core"
            time.sleep(0.005)  # with CPU_SPIN=0 the worker is asleep again
    pool.close()


@native
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_worker_that_starts_after_the_first_launch_is_published_still_takes_part() -> None:
    # The lost wake-up behind rare "a worker took no core" failures under CPU load: a new worker's parked flag is
    # clear, so the pool's first launch counts on it polling and wakes nobody; a worker thread that got to run only
    # after that launch was published read the launch's number as already seen and slept through it (the main
    # thread's core then waited 10 s for it). Here every worker starts only once the launch is published.
    with Context(CPU_PIN=1, CPU_SPIN=0):
        pool = CorePool("test", launcher=_native_launcher)
    function, address, records = _recording_kernel(meet=True)

    def pin_once_published(affinity: tuple[int, ...] | None) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (pool._state is None or pool._state[CoreLauncher.CLAIM] >> 32 == 0):
            time.sleep(0.001)
        CorePool._pin(affinity)

    pool._pin = pin_once_published  # type: ignore[method-assign]
    for launch in range(3):
        records.clear()
        pool.run_kernel(address, function, (launch,), 2)  # type: ignore[arg-type]
        assert sorted(core for _, core, _ in records) == [0, 1]
        assert len({ident for _, _, ident in records}) == 2, f"launch {launch}: a worker took no core"
        time.sleep(0.005)
    pool.close()


@native
def test_python_and_native_launches_interleave_without_losing_a_core() -> None:
    with Context(CPU_PIN=1):
        pool = CorePool("test", launcher=_native_launcher)
    function, address, records = _recording_kernel()
    ran: list[int] = []
    lock = threading.Lock()

    def python_core(core: int) -> None:
        with lock:
            ran.append(core)

    for launch in range(300):
        count = 1 + launch % 5
        if launch % 3:
            records.clear()
            pool.run_kernel(address, function, (launch,), count)  # type: ignore[arg-type]
            assert sorted(core for _, core, _ in records) == list(range(count))
        else:
            ran.clear()
            pool.run(python_core, count)
            assert sorted(ran) == list(range(count))
    pool.close()


@native
def test_a_kernel_with_too_many_parameters_for_the_launcher_runs_through_python() -> None:
    with Context(CPU_PIN=1):
        pool = CorePool("test", launcher=_native_launcher)
    calls: list[tuple[int, ...]] = []
    parameters = CoreLauncher.MAX_ARGUMENTS  # with the core id one more than the launcher passes
    prototype = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * parameters), ctypes.c_int32)
    function = prototype(lambda *received: calls.append(received))
    arguments = tuple(range(100, 100 + parameters))
    address = ctypes.cast(function, ctypes.c_void_p).value or 0
    pool.run_kernel(address, function, arguments, 3)  # type: ignore[arg-type]
    assert sorted(call[-1] for call in calls) == [0, 1, 2]
    assert all(call[:-1] == arguments for call in calls)
    assert pool._launches == 0  # never published natively
    pool.close()


@native
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
@pytest.mark.parametrize("where", ["waking", "after phase 0"])
def test_an_interrupted_native_launch_finishes_and_leaves_no_worker_asleep(where: str) -> None:
    # Phase 0 claims a sleeping worker's flag; an interrupt before Python woke it (while waking it, or as phase 0
    # returns, before its count is even stored) must neither leave the launch half run nor leave that worker
    # asleep for good while later launches count on it
    with Context(CPU_PIN=1, CPU_SPIN=0):
        pool = CorePool("test", launcher=_native_launcher)  # a worker on every core: one is on another core
    function, address, records = _recording_kernel(meet=True)
    pool.run_kernel(address, function, (1,), 2)  # type: ignore[arg-type]  # starts the workers
    time.sleep(0.02)  # CPU_SPIN=0: they are asleep now
    real_wake, real_launch = pool._wake, pool._launch_function
    interrupted: list[int] = []

    def wake(woken: int) -> None:
        if not interrupted:
            interrupted.append(woken)
            raise _Interrupt()
        real_wake(woken)

    def launch(state: int, word: int, count: int, phase: int) -> int:
        result = real_launch(state, word, count, phase)
        if phase == 0 and not interrupted:
            interrupted.append(result)
            raise _Interrupt()
        return result

    if where == "waking":
        pool._wake = wake  # type: ignore[method-assign]
    else:
        pool._launch_function = launch
    records.clear()
    with pytest.raises(_Interrupt):
        pool.run_kernel(address, function, (2,), 2)  # type: ignore[arg-type]
    assert interrupted == [1]  # phase 0 had claimed one sleeping worker's flag
    assert sorted(core for _, core, _ in records) == [0, 1]  # the launch ran to the end before the interrupt left
    pool._wake, pool._launch_function = real_wake, real_launch  # type: ignore[method-assign]
    for _ in range(3):
        records.clear()
        time.sleep(0.02)
        pool.run_kernel(address, function, (3,), 2)  # type: ignore[arg-type]
        assert len({ident for _, _, ident in records}) == 2, "the worker was left asleep"
    pool.close()
