"""The CPU device used from several threads: a launch keeps its kernel's code alive, and threads loading and
launching new programs at once get numpy's numbers.

Each scenario runs in a subprocess: a kernel whose code was freed under it kills the process (SIGSEGV), which must
be reported as a failure of the test, not take pytest down.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROGRAM_BUILDER = """
import gc, sys, threading
import numpy as np
from kiln.codegen import KernelInfo, Program, get_program
from kiln.runtime import Buffer, Device
from kiln.runtime.command_queue import ExecCommand
from kiln.uops import Ops, UOp, dtypes

def add_program(size, name, constant, opts=None):
    # out[i] = a[i] + constant
    i = UOp.range(size, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=1)
    stored = out.index(i).store(a.index(i).load() + UOp.const(dtypes.float32, constant)).end(i)
    sink = UOp(Ops.SINK, src=(stored,), arg=KernelInfo(name))
    return Program(get_program(sink, Device["CPU"].renderer, opts))
"""


def run_script(body: str, timeout: float = 120.0) -> str:
    """Runs PROGRAM_BUILDER + `body` in a fresh interpreter; fails naming the signal or the output otherwise."""
    script = PROGRAM_BUILDER + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    killed = f" (killed by signal {-done.returncode})" if done.returncode < 0 else ""
    assert done.returncode == 0, f"exit status {done.returncode}{killed}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.parametrize(
    "meanwhile",
    [
        # loads dispose the engines of dropped kernels and map new code: the launch ran another kernel (+24, not +3)
        'device.load_program(add_program(16 + k, f"other_add_{k}", 5.0 + k))',
        # a compile disposes them too, mapping nothing: the launch jumped into unmapped memory (SIGSEGV)
        'device.renderer.compiler.compile("")',
    ],
    ids=["loads", "compiles"],
)
def test_a_queued_launch_keeps_its_kernel_alive_when_the_runner_is_dropped(meanwhile: str) -> None:
    # The exec command of a launch holds the NativeKernel, not the runner. A runner dropped while its launch waited
    # in the queue (a duplicate runner of a program two threads loaded at once) let the next compile or load on
    # any thread dispose its MCJIT engine under the queued launch.
    output = run_script(f"""
        device = Device["CPU"]
        values = np.arange(16, dtype=np.float32)
        source = Buffer("CPU", 16, dtypes.float32).copyin(values)
        out = Buffer("CPU", 16, dtypes.float32)
        gate = threading.Event()
        # holds the queue's worker, so the launch below waits in the queue
        device.engine.submit_commands([ExecCommand(lambda *args: gate.wait(), None, (1, 1, 1), (1, 1, 1), "gate")])
        runner = device.load_program(add_program(16, "dropped_add", 3.0))  # uncached: only this name holds it
        runner([out, source])
        del runner
        gc.collect()
        for k in range(20):
            {meanwhile}
        gate.set()
        device.synchronize()
        print(out.numpy().tolist())
    """)
    assert output.strip() == str([float(v + 3) for v in range(16)])


def test_threads_loading_and_launching_the_same_new_programs_match_numpy() -> None:
    # 4 threads x 12 rounds: every round, each thread loads (through the device's cache, so two threads may load
    # the same program at once and one of the two runners is dropped) and launches the round's new programs, small
    # ones inline and large ones through the queue
    output = run_script("""
        device = Device["CPU"]
        failures = []

        def work(thread):
            rng = np.random.default_rng(thread)
            try:
                for round_ in range(12):
                    size = (1 << 21) + 8 * round_ if round_ % 3 == 0 else 40 + 8 * round_
                    program = add_program(size, f"add_{round_}", float(round_ + 1))
                    values = rng.standard_normal(size).astype(np.float32)
                    source = Buffer("CPU", size, dtypes.float32).copyin(values)
                    out = Buffer("CPU", size, dtypes.float32)
                    device.runtime(program)([out, source])
                    device.synchronize()
                    if not np.array_equal(out.numpy(), values + np.float32(round_ + 1)):
                        failures.append((thread, round_))
            except BaseException as error:
                failures.append((thread, repr(error)))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(failures)
    """)
    assert output.strip() == "[]"
