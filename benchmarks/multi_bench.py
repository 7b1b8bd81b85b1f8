"""Multi-device and multi-process benchmarks: allreduce bandwidth between CPU devices of one process and between 2
MPI ranks, next to numpy's copy bandwidth measured in the same run, and data-parallel training steps per second on 1
and 2 ranks.

Run: `uv run python benchmarks/multi_bench.py [--runs N] [--section inprocess|mpi|dp]`

- inprocess: `kiln.tensor.multi.allreduce` (ring, chunked) of a float32 tensor over 2 and 3 CPU devices
  (CPU_SHARES=3 gives each device its share of the cores), realized and timed as one schedule, median of --runs.
- mpi: `kiln.tensor.distributed.all_reduce` of a float32 tensor between 2 ranks (`mpirun -n 2` of this script in
  worker mode), next to mpi4py's own Allreduce of the numpy array (the transport alone).
- overlap: a matmul sharded by rows over CPU:1 and CPU:2, realized as one schedule with PROFILE on: each device's
  kernel interval from the runtime's profiler and how much of the shorter one the other overlaps (the per-device
  kernels run at the same time, each on its device's queue).
- dp: the digits CNN of examples/train_digits.py, one data-parallel training step (forward, backward,
  average_gradients, Adam) on a global batch of 64, steps per second on 1 rank and on 2 ranks (32 images each).

Bandwidth is the allreduce's algorithm bandwidth: the tensor's bytes divided by the time (what one device sends and
receives is about twice that). numpy's copy (np.copyto of the same bytes) is the ceiling of any host-memory move.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

SIZES = (1 << 16, 1 << 20, 1 << 24)  # bytes
HERE = Path(__file__).resolve()


def median_seconds(operation: Callable[[], object], runs: int) -> float:
    """Median wall time of `operation` over `runs` calls, after one warm-up call."""
    operation()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        operation()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def numpy_copy_seconds(nbytes: int, runs: int) -> float:
    source, destination = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)
    return median_seconds(lambda: np.copyto(destination, source), runs)


def gbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e9:8.2f} GB/s"


def inprocess(runs: int) -> None:
    from kiln.tensor import Tensor
    from kiln.tensor.multi import allreduce

    print("allreduce in one process (ring over CPU devices), float32")
    print(f"{'bytes':>10} {'devices':>7} {'kiln allreduce':>16} {'numpy copy':>14}")
    for nbytes in SIZES:
        reference = numpy_copy_seconds(nbytes, runs)
        for count in (2, 3):
            devices = [f"CPU:{index}" for index in range(count)]
            inputs = [
                Tensor(np.full(nbytes // 4, index, np.float32)).to(device) for index, device in enumerate(devices)
            ]
            Tensor.realize_all(*inputs)

            def run(inputs: list[Tensor] = inputs) -> None:
                outputs = allreduce(inputs)
                Tensor.realize_all(*outputs)

            seconds = median_seconds(run, runs)
            print(f"{nbytes:>10} {count:>7} {gbps(nbytes, seconds):>16} {gbps(nbytes, reference):>14}")


def overlap(runs: int) -> None:
    os.environ["PROFILE"] = "1"
    from kiln.runtime import Device, profiler
    from kiln.tensor import Tensor

    devices = ["CPU:1", "CPU:2"]
    rng = np.random.default_rng(0)
    left = Tensor(rng.random((1024, 512), np.float32)).shard(devices, axis=0).realize()
    right = Tensor(rng.random((512, 512), np.float32)).shard(devices).realize()
    print("per-device kernels of one sharded matmul (1024x512 @ 512x512 split by rows), one schedule")
    fractions = []
    for run in range(runs + 1):
        profiler.clear()
        ((left * (run + 1.0)) @ right).realize()  # a new constant each run: the cached kernel takes it as input
        for device in devices:
            Device[device].synchronize()
        events = {event.device: event for event in profiler.events if event.category == "program"}
        if run == 0 or set(events) != set(devices):
            continue  # the first run compiles
        first, second = events[devices[0]], events[devices[1]]
        shared = min(first.end_us, second.end_us) - max(first.start_us, second.start_us)
        fractions.append(max(0.0, shared) / min(first.duration_us, second.duration_us))
        if run == 1:
            for event in (first, second):
                print(
                    f"  {event.device}: {event.name} {event.start_us - first.start_us:9.0f} .. "
                    f"{event.end_us - first.start_us:9.0f} us"
                )
    print(
        f"  overlap of the shorter kernel, median of {len(fractions)} runs: {statistics.median(fractions) * 100:.0f}%"
    )


def mpi_worker(runs: int) -> None:
    from mpi4py import MPI

    from kiln.tensor import Tensor
    from kiln.tensor import distributed as dist

    dist.init()
    communicator = MPI.COMM_WORLD
    lines = []
    for nbytes in SIZES:
        array = np.ones(nbytes // 4, np.float32)
        received = np.empty_like(array)
        tensor = Tensor(array).realize()

        def kiln_all_reduce(tensor: Tensor = tensor) -> None:
            dist.all_reduce(tensor).realize()

        def mpi_allreduce(array: np.ndarray = array, received: np.ndarray = received) -> None:
            communicator.Allreduce(array, received, MPI.SUM)

        communicator.Barrier()
        kiln_seconds = median_seconds(kiln_all_reduce, runs)
        communicator.Barrier()
        mpi_seconds = median_seconds(mpi_allreduce, runs)
        reference = numpy_copy_seconds(nbytes, runs)
        kiln_rate, mpi_rate = gbps(nbytes, kiln_seconds), gbps(nbytes, mpi_seconds)
        lines.append(f"{nbytes:>10} {kiln_rate:>18} {mpi_rate:>18} {gbps(nbytes, reference):>14}")
    if dist.rank() == 0:
        print(f"allreduce between {dist.world_size()} MPI ranks, float32")
        print(f"{'bytes':>10} {'kiln all_reduce':>18} {'mpi4py Allreduce':>18} {'numpy copy':>14}")
        print("\n".join(lines))


def dp_worker(runs: int) -> None:
    sys.path.insert(0, str(HERE.parent.parent / "examples"))
    from train_digits import make_model

    from kiln.tensor import Tensor, optim
    from kiln.tensor import distributed as dist

    dist.init()
    rank, ranks = dist.rank(), dist.world_size()
    local = 64 // ranks
    Tensor.manual_seed(0)
    model = make_model()
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    parallel = dist.DataParallel(model.parameters())
    parallel.sync_parameters()
    rng = np.random.default_rng(rank)
    images = Tensor(rng.uniform(0, 1, (local, 1, 8, 8)).astype(np.float32))
    labels = Tensor(rng.integers(0, 10, local))

    def step() -> None:
        optimizer.zero_grad()
        model(images).cross_entropy(labels).backward()
        parallel.average_gradients()
        optimizer.step()
        Tensor.realize_all(*model.parameters())

    step()
    dist.barrier()
    seconds = median_seconds(step, runs)
    if rank == 0:
        print(f"data-parallel digits CNN, global batch 64: {ranks} rank(s), {1 / seconds:7.1f} steps/s")


def launch(section: str, ranks: int, runs: int) -> None:
    environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    command = ["mpirun", "-n", str(ranks), "--oversubscribe", sys.executable, str(HERE), "--worker", section]
    subprocess.run([*command, "--runs", str(runs)], check=True, env=environment, timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--section", choices=["inprocess", "overlap", "mpi", "dp"], action="append")
    parser.add_argument("--worker", choices=["mpi", "dp"], help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker == "mpi":
        mpi_worker(arguments.runs)
        return
    if arguments.worker == "dp":
        dp_worker(arguments.runs)
        return
    sections = arguments.section or ["inprocess", "overlap", "mpi", "dp"]
    if "inprocess" in sections:
        inprocess(arguments.runs)
    if "overlap" in sections:
        overlap(arguments.runs)
    if "mpi" in sections:
        launch("mpi", 2, arguments.runs)
    if "dp" in sections:
        for ranks in (1, 2):
            launch("dp", ranks, arguments.runs)


if __name__ == "__main__":
    main()
