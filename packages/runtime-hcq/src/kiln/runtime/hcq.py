"""`HCQCompiled`: the base class of devices that run work through hardware command queues.

Each device owns a timeline signal. Every submission waits for the previous timeline value and signals the next one,
so the work of one device is totally ordered even across its compute and copy queues, and `synchronize()` is a
single wait for the last value handed out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kiln.runtime.allocator import Allocator
from kiln.runtime.command_queue import (
    ExecCommand,
    HCQCommand,
    HCQQueue,
    LaunchSize,
    MemoryBarrierCommand,
    QueueTarget,
    SignalCommand,
    SymbolicInt,
    TimestampCommand,
    WaitCommand,
)
from kiln.runtime.device import DeviceBase
from kiln.runtime.fork_hooks import renew_after_fork
from kiln.runtime.kernel_args import HCQArgsState
from kiln.runtime.knobs import profiling_enabled
from kiln.runtime.profile import ProfileEvent, profiler
from kiln.runtime.signal import TimelineSignal

__all__ = ["HCQCompiled"]

_BARRIER = MemoryBarrierCommand()  # immutable: one serves every submission


@dataclass(frozen=True)
class _PendingProfile:
    name: str
    category: str
    queue: str
    start: TimelineSignal
    end: TimelineSignal
    args: Mapping[str, object] | None = None


class HCQCompiled(DeviceBase):
    """A device driven through command queues: a compute queue engine and an optional copy queue engine.

    Subclasses provide the allocator, the engines (hardware queues or `ThreadQueueEngine`s) and the ordered
    `renderers` (each owning its compiler; `<KIND>_RENDERER` picks another, see `DeviceBase`).

    Args:
        name: the canonical device name.
        allocator: the device's allocator.
        compute_engine: runs exec commands (and copies when there is no copy engine).
        copy_engine: a separate DMA queue, if the device has one.
    """

    def __init__(
        self,
        name: str,
        allocator: Allocator[Any],
        compute_engine: QueueTarget,
        copy_engine: QueueTarget | None = None,
    ) -> None:
        super().__init__(name, allocator)
        self.compute_engine = compute_engine
        self.copy_engine = copy_engine
        # the engine's way of running a launch in the caller's thread (software engines), looked up once
        self._run_call_inline = getattr(compute_engine, "run_call_inline", None)
        self._run_direct_now = getattr(compute_engine, "run_direct_now", None)
        self.timeline_signal = TimelineSignal(0, name=f"{name} timeline")
        self.timeline_value = 1  # the value the next submission signals
        self._pending_profile: list[_PendingProfile] = []
        # Handing out a timeline value and submitting must be one step, or two host threads could submit out of order.
        self._submit_lock = threading.Lock()
        # in a child of os.fork(): the last timeline value handed out in the parent, while the engines have not yet
        # been restarted to run the work the parent had queued (0: nothing to resume)
        self._resume_after_fork = 0
        self._failed_before_fork = False  # noted by `before_fork`
        # the allocator releases a freed block only once the timeline has passed its last use
        allocator.follow_timeline(self)
        # the allocator's list of blocks waiting for the timeline (one object for the allocator's life), read by
        # `synchronize` without a call: the host synchronizes before every host access
        self._deferred_frees = allocator._deferred
        renew_after_fork(self)  # after the engines (made before this constructor runs), so it sees them renewed

    def submitted_value(self) -> int:
        """The timeline value of the last submission (work handed out so far; `DeviceTimeline`)."""
        return self.timeline_value - 1

    def completed_value(self) -> int:
        """The timeline value the device has reached (`DeviceTimeline`)."""
        return self.timeline_signal.value

    def _engines(self) -> tuple[QueueTarget, ...]:
        return (self.compute_engine,) if self.copy_engine is None else (self.compute_engine, self.copy_engine)

    def after_fork_in_child(self) -> None:
        """Makes this process's copy usable after `os.fork()` (run by `fork_hooks` in the child).

        The locks are new (a thread of the parent may have held one: it does not exist here). Work the parent had
        queued but not started runs in the child once its engines restart (at the next submission or
        `synchronize`). Work that was running at the fork (on a queue's thread, or a launch in another thread of
        the parent) cannot finish here, and an engine that does not renew itself after a fork (a hardware queue)
        keeps none of it: then the timeline fails with an error naming the fork, so every wait on the device's
        work, and every later launch, raises instead of hanging."""
        super().after_fork_in_child()
        launching, self._submit_lock = self._submit_lock.locked(), threading.Lock()
        self._resume_after_fork = 0
        timeline, target = self.timeline_signal, self.timeline_value - 1
        if timeline.value >= target:
            if launching and not self._failed_before_fork:
                # another thread of the parent was launching: everything handed out is done, so what an engine saw
                # running, or keeps queued, is that thread's launch of the next value, which it had not recorded as
                # handed out. Its work is abandoned as if the thread had been interrupted (`_interrupted_at`): the
                # value is used up (a list of it still queued runs first and sets it again), and the engines are
                # not failed for it.
                self._interrupted_at(self.timeline_value)
                for engine in self._engines():
                    if getattr(engine, "error", None) is not None:
                        setattr(engine, "error", None)  # noqa: B010 (QueueTarget declares no `error`)
            return
        if timeline.failure is not None:
            return
        cause = self._engine_error()
        if cause is None and all(callable(getattr(engine, "after_fork_in_child", None)) for engine in self._engines()):
            if launching and not self._failed_before_fork:
                # another thread of the parent was handing out the next value while earlier work is still queued: its
                # list may be kept in a queue or not. The value is used up either way: a list that only signals it
                # after the one before is queued now, ahead of any work of the child, so the child's next value is a
                # new one (reusing it let the parent's kept list signal the child's launch done before it ran)
                value = self.timeline_value
                self.compute_engine.submit_commands([WaitCommand(timeline, value - 1), SignalCommand(timeline, value)])
                self.timeline_value, target = value + 1, value
            self._resume_after_fork = target
            return
        timeline.fail(self._fork_error(target, cause))

    def before_fork(self) -> None:
        """Notes whether an engine had failed already (run by `fork_hooks` in the parent just before a fork)."""
        self._failed_before_fork = self._engine_error() is not None

    def _fork_error(self, target: int, cause: BaseException | None) -> RuntimeError:
        why = f": {cause}" if cause is not None else ": its queue does not survive a fork"
        error = RuntimeError(
            f"device {self.name!r}: the process forked while work up to timeline value {target} was in flight on it "
            f"(done: {self.timeline_signal.value}); that work cannot finish in the child process{why}. Fork when "
            "the device is idle (after synchronize()), or start processes with the 'spawn' method"
        )
        error.__cause__ = cause
        return error

    def _resume_engines(self) -> None:
        """In a child of os.fork(): restarts the engines so they run the work the parent had queued."""
        self._resume_after_fork = 0
        for engine in self._engines():
            engine.submit_commands([])  # an empty list starts a new worker thread, which runs the kept lists first

    def _engine_error(self) -> BaseException | None:
        errors = (getattr(engine, "error", None) for engine in self._engines())
        return next((error for error in errors if error is not None), None)

    def next_timeline(self) -> int:
        """Hands out the next timeline value (call with the submission it belongs to)."""
        value = self.timeline_value
        self.timeline_value += 1
        return value

    def submit_commands(self, commands: Sequence[HCQCommand]) -> None:
        """Submits raw commands to the compute engine (no timeline bookkeeping)."""
        self.compute_engine.submit_commands(commands)

    def synchronize(self, timeout: float | None = None) -> None:
        """Waits for every submission so far; raises TimeoutError, or RuntimeError if a queue failed."""
        # The host synchronizes before every host access to device memory: keep the idle case cheap.
        if self.timeline_signal.value < self.timeline_value - 1:
            if self._resume_after_fork:
                self._resume_engines()
            self.timeline_signal.wait(self.timeline_value - 1, timeout)
        if self._deferred_frees:  # blocks freed while the device worked are released now that it has passed them
            self.allocator.release_passed()
        if self._pending_profile:
            self._collect_profile()

    def _submit_timed(
        self,
        engine: QueueTarget,
        queue_name: str,
        record: tuple[str, str] | tuple[str, str, Mapping[str, object] | None] | None,
        body: Sequence[HCQCommand],
        inline: bool = False,
    ) -> _PendingProfile | None:
        """Submits `body` (resolved commands) between a wait for the previous and a signal of the next timeline value.

        With `inline`, an engine that can (`run_inline`, a software engine) runs the list in the calling thread when
        it is idle and nothing earlier is pending, which is the same order the queue would give, without a handoff.
        """
        pending = None
        timeline = self.timeline_signal
        run_inline = getattr(engine, "run_inline", None) if inline else None
        with self._submit_lock:
            value = self.timeline_value
            # inline only once the previous submission is done: then the leading wait would be a no-op, so it is left
            # out; the engine itself refuses while it still has queued lists (e.g. raw submissions)
            inline_now = run_inline is not None and timeline.value >= value - 1
            if inline_now and record is None:  # the common case (an untimed launch), without building a list
                assert run_inline is not None
                if self._run_here(value, run_inline, (*body, SignalCommand(timeline, value))):
                    return None
                inline_now = False
            commands: list[HCQCommand] = []
            if record is not None:
                name, category = record[0], record[1]
                pending = _PendingProfile(
                    name,
                    category,
                    queue_name,
                    TimelineSignal(name=f"{name} start"),
                    TimelineSignal(name=f"{name} end"),
                    record[2] if len(record) > 2 else None,
                )
                commands.append(TimestampCommand(pending.start))
            commands.extend(body)
            if pending is not None:
                commands.append(TimestampCommand(pending.end))
            commands.append(SignalCommand(timeline, value))
            if not (inline_now and run_inline is not None and self._run_here(value, run_inline, commands)):
                engine.submit_commands([WaitCommand(timeline, value - 1), _BARRIER, *commands])
                self.timeline_value = value + 1
            if pending is not None and profiling_enabled():
                self._pending_profile.append(pending)
        return pending

    def execute(
        self,
        program: object,
        args: HCQArgsState,
        global_size: Sequence[SymbolicInt],
        local_size: Sequence[SymbolicInt] = (1,),
        *,
        var_vals: Mapping[str, int] | None = None,
        name: str | None = None,
        wait: bool = False,
        inline: bool = False,
        profile: Mapping[str, object] | None = None,
    ) -> float | None:
        """Launches `program` after all earlier work of the device.

        Returns the kernel's run time in seconds when `wait` is true (after synchronizing), else None. With PROFILE on
        the launch is recorded as a profile event when the device is next synchronized. `inline` lets a software
        engine run a launch in the calling thread when the device is idle (for tiny kernels, where handing the work
        to the queue's thread costs more than the kernel); the order of work on the device is the same either way.
        """
        body = HCQQueue().exec(program, args, global_size, local_size, name).resolved(var_vals)
        command = body[0]
        assert isinstance(command, ExecCommand)
        if profile is not None:
            command = replace(command, profile=profile)
        return self.launch(command, wait=wait, inline=inline)

    def launch(
        self, command: ExecCommand, *, wait: bool = False, inline: bool = False, profiling: bool | None = None
    ) -> float | None:
        """Launches an exec command whose launch sizes are already concrete and checked (see `execute`).
        `profiling`: PROFILE's value when the caller has just read it (None: read it here)."""
        timed = wait or (profiling_enabled() if profiling is None else profiling)
        if (
            inline
            and not timed
            and self.launch_inline(command.program, command.args, command.global_size, command.local_size, command.name)
        ):
            return None
        pending = self._submit_timed(
            self.compute_engine,
            "compute",
            (command.name, "program", command.profile) if timed else None,
            (command,),
            inline,
        )
        if not wait:
            return None
        self.synchronize()
        assert pending is not None
        return (pending.end.timestamp - pending.start.timestamp) / 1e6

    def launch_inline(
        self, program: object, args: HCQArgsState, global_size: LaunchSize, local_size: LaunchSize, name: str
    ) -> bool:
        """Runs an untimed launch (concrete, checked launch sizes) in the calling thread when the compute engine can
        (a software engine's `run_call_inline`) and everything submitted before is done; returns False, having run
        nothing, otherwise (then `launch` it). The order of work on the device is the same either way, and a failure
        is kept like a queued one. The exec command is never built for a launch that runs here."""
        run_call_inline = self._run_call_inline
        return run_call_inline is not None and self._run_next(
            run_call_inline, program, args, global_size, local_size, name
        )

    def launch_direct(self, function: Callable[..., None], arguments: tuple[int, ...]) -> bool:
        """A native kernel's own entry point run at once: `function(*arguments)` in the calling thread when the
        compute engine can and everything submitted before is done; False, having run nothing, otherwise. The
        launch is done when this returns, so it takes no timeline value (a failing one takes one, failed: seen at
        the next wait, as a queued failure is)."""
        return self.launch_direct_many(((function, arguments),))

    def launch_direct_many(self, calls: Sequence[tuple[Callable[..., None], tuple[int, ...]]]) -> bool:
        """`launch_direct` of several native entry points in order: each `function(*arguments)` of `calls` in the
        calling thread when the compute engine can (`run_direct_now`) and everything submitted before is done;
        False, having run nothing, otherwise.

        Synchronous and after all earlier work, the launch needs no timeline value: waiters of earlier values are
        released already, `synchronize` has nothing more to wait for, and a buffer freed after it is past its last
        use (the allocator compares the values submitted and completed, both unchanged). This skips the signal's
        lock and write of a queued or inline launch (every cached small op and TinyJit replay launches here)."""
        run_direct_now = self._run_direct_now
        if run_direct_now is None:
            return False
        timeline = self.timeline_signal
        with self._submit_lock:
            value = self.timeline_value
            if timeline._memory[0] < value - 1:  # (`timeline.value`) earlier work is still under way
                return False
            outcome = run_direct_now(calls)
            if outcome is True or outcome is False:
                return outcome
            # a call failed (the engine keeps the error): a timeline value fails with it, as a queued launch's would
            self.timeline_value = value + 1
            timeline.fail(outcome)
            return True

    def _run_next(self, run: Callable[..., bool], *arguments: object) -> bool:
        """`run(*arguments, timeline, value)` (an engine's inline run) with the next timeline value when everything
        submitted before is done (`_run_here`); False, having run nothing, otherwise or when the engine refused."""
        timeline = self.timeline_signal
        with self._submit_lock:
            value = self.timeline_value
            # `_run_here` written out: every cached small op launches here (a call more measured ~0.3-0.7 us per op)
            try:
                ran = timeline._memory[0] >= value - 1 and run(*arguments, timeline, value)  # (`timeline.value`)
            except BaseException:
                self._interrupted_at(value)
                raise
            if ran:
                self.timeline_value = value + 1
            return bool(ran)

    def _run_here(
        self, value: int, run_inline: Callable[[Sequence[HCQCommand]], bool], commands: Sequence[HCQCommand]
    ) -> bool:
        """An engine's inline run of a list signalling timeline value `value` (under `_submit_lock`, once value - 1
        was reached): True when it ran (the value is then used), False when the engine refused (nothing ran)."""
        try:
            ran = run_inline(commands)
        except BaseException:
            self._interrupted_at(value)
            raise
        if ran:
            self.timeline_value = value + 1
        return ran

    def _interrupted_at(self, value: int) -> None:
        # The caller's thread was interrupted (KeyboardInterrupt) in an inline run of timeline value `value`: the
        # value is used up. The engine sets it when the interrupt came while the run was under way; if it came
        # before the run started, it is set here, so later work never waits for it.
        if self.timeline_signal.value < value:
            self.timeline_signal.set(value)
        self.timeline_value = value + 1

    def launch_many(self, commands: Sequence[ExecCommand], *, inline: bool = False) -> None:
        """Launches exec commands whose launch sizes are concrete and checked (see `launch`) as one submission after
        all earlier work: one timeline value for the whole list (how TinyJit replays a captured function).
        `inline` as in `execute`."""
        if commands and profiling_enabled():  # one timed submission per launch, so each gets its profile event
            for command in commands:
                record = (command.name, "program", command.profile)
                self._submit_timed(self.compute_engine, "compute", record, (command,), inline)
        elif commands:
            self._submit_timed(self.compute_engine, "compute", None, tuple(commands), inline)

    def copy(self, dest: int, src: int, size: int, name: str = "copy") -> None:
        """Copies `size` bytes between device addresses after all earlier work (on the copy engine if there is one)."""
        engine, queue_name = (
            (self.copy_engine, "copy") if self.copy_engine is not None else (self.compute_engine, "compute")
        )
        record = (f"{name} {size} bytes", "copy") if profiling_enabled() else None
        self._submit_timed(engine, queue_name, record, HCQQueue().copy(dest, src, size).resolved())

    def _collect_profile(self) -> None:
        with self._submit_lock:
            done, self._pending_profile = self._pending_profile, []
        for pending in done:
            profiler.record(
                ProfileEvent(
                    self.name,
                    pending.name,
                    pending.category,
                    pending.start.timestamp,
                    pending.end.timestamp,
                    pending.queue,
                    None if pending.args is None else dict(pending.args),
                )
            )
