"""The MPI world kiln talks to: mpi4py imported lazily, the communicator, and collectives that time out.

MPI's blocking collectives wait forever for a rank that never arrives (it raised, or took another path). kiln posts
every collective as a non-blocking request and polls it until `DIST_TIMEOUT` seconds have passed; then it raises
`DistributedTimeout`, naming the rank, the collective and the timeout. `init()` also installs an exception hook:
an uncaught exception on one rank prints the error with its rank and aborts the whole job (MPI_Abort), so the
other ranks stop at once instead of waiting for their timeouts.
"""

from __future__ import annotations

import sys
import time
import traceback
from types import TracebackType
from typing import Any

from kiln.uops import register_knob

__all__ = [
    "DistributedError",
    "DistributedTimeout",
    "World",
    "world",
]

_TIMEOUT = register_knob(
    "DIST_TIMEOUT",
    float,
    300.0,
    "Seconds a kiln.tensor.distributed collective waits for the other ranks before raising DistributedTimeout.",
)


class DistributedError(RuntimeError):
    """kiln.tensor.distributed cannot work: mpi4py is missing, or it is used before `init()`."""


class DistributedTimeout(RuntimeError):
    """A collective did not complete in time: another rank failed or did not call the same collective."""


def _import_mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise DistributedError(
            "kiln.tensor.distributed needs mpi4py and an MPI library: install the 'mpi' extra "
            "(pip install 'kiln-tensor[mpi]', or 'pip install mpi4py') and Open MPI (Debian: openmpi-bin "
            f"libopenmpi-dev); the import failed with: {error}"
        ) from error
    return MPI


class World:
    """The MPI world of this process: rank, size and the communicator, with timed collectives.

    Made by `init()`; kiln keeps one (`world()`), so tests can build another over a sub-communicator.
    """

    def __init__(self, communicator: Any = None, timeout: float | None = None) -> None:
        self.MPI = _import_mpi()
        self.communicator = self.MPI.COMM_WORLD if communicator is None else communicator
        self.rank: int = self.communicator.Get_rank()
        self.size: int = self.communicator.Get_size()
        self.timeout = timeout

    @property
    def seconds(self) -> float:
        """The timeout in use: the one given, else the knob DIST_TIMEOUT."""
        return float(_TIMEOUT.value() if self.timeout is None else self.timeout)

    def wait(self, request: Any, what: str) -> None:
        """Polls `request` until it completes; DistributedTimeout after `seconds`."""
        deadline = time.monotonic() + self.seconds
        pause = 1e-5
        while not request.Test():
            if time.monotonic() > deadline:
                raise DistributedTimeout(
                    f"rank {self.rank} of {self.size}: {what} did not complete within {self.seconds:g} s "
                    "(DIST_TIMEOUT): another rank has failed or did not call the same collective"
                )
            time.sleep(pause)
            pause = min(pause * 2, 1e-2)

    def start(self, name: str, *arguments: Any) -> Any:
        """Posts the non-blocking collective `name` (e.g. "Iallreduce") and returns its request."""
        return getattr(self.communicator, name)(*arguments)

    def run(self, name: str, what: str, *arguments: Any) -> None:
        """Posts the non-blocking collective `name` and waits for it (with the timeout)."""
        self.wait(self.start(name, *arguments), what)

    def barrier(self) -> None:
        """Waits until every rank has reached this barrier (with the timeout)."""
        self.run("Ibarrier", "barrier")

    def abort(self, code: int = 1) -> None:
        """Stops every rank of the job (MPI_Abort)."""
        self.communicator.Abort(code)

    def install_abort_on_error(self) -> None:
        """An uncaught exception prints itself with this rank's number, then aborts the job (when there are
        several ranks), so no rank is left waiting in a collective."""
        previous = sys.excepthook

        def hook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
            message = "".join(traceback.format_exception(kind, error, trace))
            sys.stderr.write(f"kiln.tensor.distributed: rank {self.rank} of {self.size} failed:\n{message}")
            if self.size > 1:
                sys.stderr.write(f"kiln.tensor.distributed: rank {self.rank} aborts all {self.size} ranks\n")
                sys.stderr.flush()
                self.abort(1)
            previous(kind, error, trace)

        sys.excepthook = hook


_world: World | None = None


def set_world(new: World | None) -> None:
    global _world  # module-state: the process's MPI world, one per process as MPI_COMM_WORLD is (init() sets it)
    _world = new


def world() -> World:
    """The world `init()` made; DistributedError before `init()`."""
    if _world is None:
        raise DistributedError("kiln.tensor.distributed is not initialized: call kiln.tensor.distributed.init() first")
    return _world
