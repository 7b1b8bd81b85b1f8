"""kiln used from several threads: each thread's own tensors give numpy's numbers while the others build, realize,
write and compile at the same time, and writes into one shared tensor are serialized (each lands once) or refused
with a clear RuntimeError, never a crash or a bare AssertionError (see the README's "Threads" section).

Every scenario runs in a fresh interpreter: a fault in compiled code kills the process, which is then reported as
this test's failure (naming the signal) instead of taking pytest down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

PRELUDE = """
import json, sys, threading
import numpy as np
from kiln.tensor import Tensor

def run_threads(work, count):
    # runs work(thread) on `count` threads; an exception is kept as its type name and message
    errors = []
    def guarded(thread):
        try:
            work(thread)
        except BaseException as error:
            errors.append(f"{type(error).__name__}: {error}"[:300])
    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
"""


def run_scenario(body: str, timeout: float = 120.0, environment: dict[str, str] | None = None) -> Any:
    """Runs PRELUDE + `body` in a fresh interpreter (with `environment` added to this one's) and returns the JSON it
    prints last; fails naming the signal or the exit status and the end of stderr otherwise."""
    script = PRELUDE + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(environment or {})},
    )
    killed = f" (killed by signal {-done.returncode})" if done.returncode < 0 else ""
    assert done.returncode == 0, f"exit status {done.returncode}{killed}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_threads_compiling_and_realizing_their_own_tensors_match_numpy() -> None:
    # the stress test of the issue, in its bounded form: 50 rounds of 4 threads; each round has a new size, so its
    # kernels are compiled while the other threads load and run theirs (the threads of a round build the same
    # kernels: two threads may load one program at once), a third of the rounds large enough for multi-core kernels
    report = run_scenario(
        """
        ROUNDS = 50
        mismatches = []

        def work(thread):
            rng = np.random.default_rng(thread)
            for round_ in range(ROUNDS):
                size = 5 + 3 * round_ + (1 << 17) * (round_ % 3 == 0)
                a = rng.standard_normal(size).astype(np.float32)
                b = rng.standard_normal(size).astype(np.float32)
                x, y = Tensor(a), Tensor(b)
                scale = float(thread + 2)
                got = ((x * scale + y).maximum(0.0) - y * float(round_)).sum().numpy()
                want = (np.maximum(a * np.float32(scale) + b, 0) - b * np.float32(round_)).astype(np.float64).sum()
                if not np.isclose(float(got), want, rtol=1e-4, atol=1e-3):
                    mismatches.append([thread, round_, float(got), float(want)])
                y.assign(x + 1.0)  # each thread writes its own tensor: the others are never touched
                if not np.array_equal(y.numpy(), a + np.float32(1)):
                    mismatches.append([thread, round_, "write"])

        errors = run_threads(work, 4)
        print(json.dumps({"errors": errors, "mismatches": mismatches[:5]}))
    """,
        environment={"DISABLE_COMPILER_CACHE": "1"},
    )  # every round compiles, not only loads from the disk cache
    assert report == {"errors": [], "mismatches": []}


def test_values_written_into_one_tensor_by_two_threads_keep_their_own_values() -> None:
    # each written value's tensor is recorded as realized into the shared buffer (copy on write) and must keep its
    # values through the other thread's writes. Unserialized, the writes interleaved: values read another write's
    # numbers (1000.0 for 0), a sweep lost a tracked tensor (KeyError), or a bare AssertionError (mutation.py)
    report = run_scenario("""
        shared = Tensor(np.zeros(64, np.float32)).realize()
        wrong = []

        def work(thread):
            kept = []
            for step in range(100):
                number = thread * 1000 + step
                value = Tensor(np.full(64, number, np.float32)) * 1.0  # lazy, reads a buffer of its own
                shared.assign(value)
                kept.append((value, number))
                if len(kept) > 3:
                    old, expected = kept.pop(0)
                    if not (old.numpy() == expected).all():
                        wrong.append([thread, step, float(old.numpy()[0]), expected])

        errors = run_threads(work, 2)
        final = shared.numpy()
        print(json.dumps({"errors": errors, "wrong": wrong[:5], "final": sorted(set(final.tolist()))}))
    """)
    assert report["errors"] == [] and report["wrong"] == []
    # the last write of one of the two threads, whole (never a mix of two writes)
    assert report["final"] in ([99.0], [1099.0])


def test_slice_writes_into_one_tensor_from_several_threads_each_land() -> None:
    # four threads write their own slice of one buffer, through the base tensor and through a view of it: the
    # writes are serialized, so every thread's last write is there, and every view sees it
    report = run_scenario("""
        shared = Tensor(np.zeros(32, np.float32)).realize()
        views = [shared[8 * t : 8 * t + 8] for t in range(4)]

        def work(thread):
            for step in range(60):
                value = Tensor(np.full(8, thread * 1000 + step, np.float32))
                if step % 2:
                    shared[8 * thread : 8 * thread + 8] = value
                else:
                    views[thread].assign(value)

        errors = run_threads(work, 4)
        seen = [view.numpy().tolist() for view in views]
        print(json.dumps({"errors": errors, "base": shared.numpy().tolist(), "views": seen}))
    """)
    expected = [[float(t * 1000 + 59)] * 8 for t in range(4)]
    assert report["errors"] == []
    assert [report["base"][8 * t : 8 * t + 8] for t in range(4)] == expected
    assert report["views"] == expected


def test_racing_in_place_updates_of_one_tensor_never_crash_and_with_a_lock_all_land() -> None:
    # `shared += 1` reads the tensor, then writes it: not atomic (as in PyTorch, where two threads' kernels race).
    # Unlocked, an update whose read another thread's write overtook is refused with a RuntimeError naming the
    # in-place modification (it writes nothing), or two threads that read the same value both write value + 1;
    # the tensor stays whole and usable. Under the caller's own lock every update lands once.
    report = run_scenario("""
        shared = Tensor(np.zeros(16, np.float32)).realize()
        guarded = Tensor(np.zeros(16, np.float32)).realize()
        lock = threading.Lock()
        landed = [0, 0, 0]
        refused = []

        def work(thread):
            global shared, guarded
            for _ in range(80):
                with lock:
                    guarded += 1.0
                try:
                    shared += 1.0
                except RuntimeError as error:
                    refused.append(str(error)[:200])
                    continue
                landed[thread] += 1

        errors = run_threads(work, 3)
        print(json.dumps({
            "errors": errors, "landed": landed, "refused": refused[:3], "final": shared.numpy().tolist(),
            "guarded": guarded.numpy().tolist(),
        }))
    """)
    assert report["errors"] == []
    assert report["guarded"] == [240.0] * 16
    final = report["final"]
    assert final == [final[0]] * 16 and max(report["landed"]) <= final[0] <= sum(report["landed"])
    assert all("modified by an in-place operation" in message for message in report["refused"])


def test_a_fork_while_another_thread_realizes_gives_a_working_child() -> None:
    # os.fork() waits until no thread is inside the graph lock: forked while another thread held it, the child
    # found it held by a thread it does not have, and its first realize hung
    report = run_scenario("""
        import os, time
        from kiln.tensor.realize.graph_lock import graph_lock

        (Tensor(np.ones(4, np.float32)) + 1).numpy()  # the device and its queue exist before the fork
        inside = threading.Event()

        def hold():
            with graph_lock:  # what a long realize (a compile) does
                inside.set()
                time.sleep(0.3)

        holder = threading.Thread(target=hold)
        holder.start()
        inside.wait()
        child = os.fork()
        if child == 0:
            values = (Tensor(np.arange(4, dtype=np.float32)) * 2).numpy()
            os._exit(0 if values.tolist() == [0.0, 2.0, 4.0, 6.0] else 3)
        holder.join()
        deadline = time.monotonic() + 30
        while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        if done[0] == 0:
            os.kill(child, 9)
            os.waitpid(child, 0)
        print(json.dumps({"child": "hung" if done[0] == 0 else os.waitstatus_to_exitcode(done[1])}))
    """)
    assert report == {"child": 0}


def test_threads_training_their_own_models_match_numpy() -> None:
    # forward, backward() and an SGD step (under no_grad) on 4 threads at once, each on its own least-squares
    # problem: the weights follow numpy's gradient descent. backward() on one thread used to walk another thread's
    # tensor while it was being made (AttributeError: no attribute 'uop'), and one thread's optimizer step (no_grad)
    # turned gradient recording off for all ("backward() on a tensor which does not require grad")
    report = run_scenario("""
        from kiln.tensor import optim

        gaps = {}

        def work(thread):
            rng = np.random.default_rng(thread)
            features = 4 + thread
            x = rng.standard_normal((32, features)).astype(np.float32)
            y = x @ np.linspace(-1, 1, features, dtype=np.float32)[:, None]
            start = rng.standard_normal((features, 1)).astype(np.float32)
            weights = Tensor(start.copy(), requires_grad=True)
            optimizer = optim.SGD([weights], lr=0.05)
            expected = start.astype(np.float64)
            for _ in range(15):
                optimizer.zero_grad()
                loss = ((Tensor(x) @ weights - Tensor(y)) ** 2).mean()
                loss.backward()
                optimizer.step()
                expected = expected - 0.05 * 2 * x.T @ (x @ expected - y) / 32
            gaps[thread] = float(np.abs(weights.numpy() - expected).max())

        errors = run_threads(work, 4)
        print(json.dumps({"errors": errors, "gaps": [gaps.get(t) for t in range(4)]}))
    """)
    assert report["errors"] == []
    assert all(gap is not None and gap < 1e-4 for gap in report["gaps"]), report["gaps"]


def test_gradient_recording_mode_is_per_thread() -> None:
    # as in PyTorch: no_grad() on one thread leaves recording on for the others (and their own setting to them)
    import threading

    from kiln.tensor import Tensor, is_grad_enabled, no_grad

    inside, built = threading.Event(), threading.Event()
    leaf = Tensor([1.0, 2.0], requires_grad=True)
    seen: dict[str, object] = {}

    def optimizer_thread() -> None:
        with no_grad():
            inside.set()
            built.wait(10)
            seen["off here"] = not is_grad_enabled() and (leaf * 2).requires_grad is None

    worker = threading.Thread(target=optimizer_thread)
    worker.start()
    inside.wait(10)
    seen["on here"] = is_grad_enabled() and (leaf * 3).requires_grad is True
    built.set()
    worker.join()
    assert seen == {"off here": True, "on here": True}
