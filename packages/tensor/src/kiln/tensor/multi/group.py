"""One collective API for both ways kiln runs on several devices: `CollectiveGroup`.

A program written for data or model parallelism is written once, for one rank: it holds its own tensors and calls
`group.allreduce`, `group.allgather`, `group.reduce_scatter` and `group.broadcast` (by those names, with the same
arguments) where the ranks must exchange values, reading `group.rank` and `group.size` where it needs to know which
part is its own, and making its tensors on `group.device`. Two groups run such a program:

- `DeviceGroup` (here): the ranks are the devices of this process, each rank's program runs on a thread of its
  own, and a collective is the lazy ring of kiln.tensor.multi.collectives (copies and kernels, with gradients),
  realized in one schedule when every rank has arrived;
- `kiln.tensor.distributed.MPIGroup`: the ranks are MPI processes, and a collective goes through MPI.

Both run a program with `group.run(program, *per_rank_arguments)`: each argument is a sequence with one entry per
rank, and rank r's program is called with the r-th entry of each, so the same call runs unchanged on either group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.multi.collectives import allgather, allreduce, broadcast, reduce_scatter
from kiln.tensor.multi.layout import check_devices, one_device

__all__ = ["CollectiveGroup", "DeviceGroup", "DeviceRank", "RankStopped", "per_rank"]

Result = TypeVar("Result")


class CollectiveGroup(Protocol):
    """What a program sees of the group it runs in: which rank it is, how many there are, and the collectives.

    Every collective must be called by every rank, in the same order, with tensors of one dtype (and of one shape,
    except along `axis` for `allgather`); each returns this rank's result as a new Tensor on this rank's device.
    `op` is one of "sum", "max", "min", "prod" (on bool tensors sum is logical or, prod logical and).
    """

    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def device(self) -> str: ...
    def allreduce(self, tensor: TensorT, op: str = "sum") -> TensorT: ...
    def allgather(self, tensor: TensorT, axis: int = 0) -> TensorT: ...
    def reduce_scatter(self, tensor: TensorT, axis: int = 0, op: str = "sum") -> TensorT: ...
    def broadcast(self, tensor: TensorT, root: int = 0) -> TensorT: ...
    def barrier(self) -> None: ...


def per_rank(size: int, rank: int, arguments: Sequence[Sequence[Any]]) -> list[Any]:
    """The `rank`-th entry of each of `arguments` (each a sequence of one entry per rank); ValueError otherwise."""
    chosen = []
    for index, values in enumerate(arguments):
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) != size:
            raise ValueError(
                f"argument {index} of run() must be a sequence of one value per rank ({size}), got {values!r}"
            )
        chosen.append(values[rank])
    return chosen


class RankStopped(threading.BrokenBarrierError):
    """A rank of a DeviceGroup left a collective because another rank failed or never came."""


class _Exchange:
    """Where the ranks of a DeviceGroup meet for one collective: each puts its tensor in, the last to arrive
    computes every rank's result (in one schedule), and each takes its own out."""

    def __init__(self, size: int, timeout: float) -> None:
        self.size = size
        self.timeout = timeout
        self.inputs: list[Any] = [None] * size
        self.calls: list[tuple[str, tuple[Any, ...]]] = [("", ())] * size
        self.outputs: list[Any] = [None] * size
        self.error: BaseException | None = None
        self.shared_error = [False] * size  # whether a rank's last raise is the collective's error every rank got
        self.barrier = threading.Barrier(size, action=self._compute, timeout=timeout)

    def _compute(self) -> None:
        self.error = None
        try:
            name, options = self.calls[0]
            for rank, (other_name, other_options) in enumerate(self.calls):
                if (other_name, other_options) != (name, options):
                    raise ValueError(
                        f"the ranks called different collectives: rank 0 {name}{options}, rank {rank} "
                        f"{other_name}{other_options}; every rank must call the same collective in the same order"
                    )
            self.outputs = _COLLECTIVES[name](list(self.inputs), *options)
            if name != "barrier":
                type(self.outputs[0]).realize_all(*self.outputs)
        except Exception as error:  # handed to every rank, so all of them raise it
            self.error = error

    def meet(self, rank: int, name: str, tensor: Any, options: tuple[Any, ...]) -> Any:
        self.inputs[rank] = tensor
        self.calls[rank] = (name, options)
        self.shared_error[rank] = False
        self._wait(rank, name)
        error, output = self.error, self.outputs[rank]
        self._wait(rank, name)  # every rank has read its result: the next collective may overwrite them
        if error is not None:
            self.shared_error[rank] = True
            try:
                own = type(error)(*error.args)  # each rank raises its own copy (tracebacks are per raise)
            except Exception:
                own = error
            raise own
        return output

    def _wait(self, rank: int, name: str) -> None:
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise RankStopped(
                f"rank {rank} of {self.size}: {name} did not complete: another rank failed, or did not call it "
                f"within {self.timeout:g} s"
            ) from None


def _allreduce(tensors: list[TensorCore], op: str) -> list[TensorCore]:
    return allreduce(tensors, op)


def _allgather(tensors: list[TensorCore], axis: int) -> list[TensorCore]:
    return allgather(tensors, axis)


def _reduce_scatter(tensors: list[TensorCore], axis: int, op: str) -> list[TensorCore]:
    return reduce_scatter(tensors, axis, op)


def _broadcast(tensors: list[TensorCore], root: int) -> list[TensorCore]:
    first = tensors[0]
    for rank, tensor in enumerate(tensors):
        if tensor.shape != first.shape or tensor.dtype != first.dtype:
            raise ValueError(
                f"broadcast needs the same dtype and shape on every rank: rank 0 has {first.dtype!r} {first.shape}, "
                f"rank {rank} has {tensor.dtype!r} {tensor.shape}"
            )
    return broadcast(tensors[root], [one_device(tensor) for tensor in tensors])


def _barrier(tensors: list[None]) -> list[None]:
    return list(tensors)


_COLLECTIVES: dict[str, Callable[..., list[Any]]] = {
    "allreduce": _allreduce,
    "allgather": _allgather,
    "reduce_scatter": _reduce_scatter,
    "broadcast": _broadcast,
    "barrier": _barrier,
}
"""The in-process collective behind each name of the API (one tensor per rank in, one per rank out)."""


class DeviceGroup:
    """The devices of this process as the ranks of a `CollectiveGroup`: rank r is `devices[r]`.

    Args:
        devices: distinct device names, one per rank (e.g. ["CPU:0", "CPU:1"]).
        timeout: seconds a rank waits in a collective for the others before raising TimeoutError.

    Example:
        >>> def step(group, x):
        ...     return group.allreduce(x * (group.rank + 1)).numpy()
        >>> DeviceGroup(["CPU:0", "CPU:1"]).run(step, [Tensor([1.0]), Tensor([1.0]).to("CPU:1")])
        [array([3.], dtype=float32), array([3.], dtype=float32)]
    """

    def __init__(self, devices: Sequence[str], timeout: float = 300.0) -> None:
        self.devices = check_devices(devices)
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)

    @property
    def size(self) -> int:
        """The number of ranks (devices)."""
        return len(self.devices)

    def run(self, program: Callable[..., Result], *arguments: Sequence[Any]) -> list[Result]:
        """`program(rank_group, *rank_arguments)` on every rank at once (one thread per device); the results in
        rank order. `rank_group` is the `DeviceRank` of that rank; each of `arguments` holds one value per rank.

        An exception on one rank stops the others at their next collective; the first one raised is raised here.
        """
        chosen = [per_rank(self.size, rank, arguments) for rank in range(self.size)]
        exchange = _Exchange(self.size, self.timeout)
        results: list[Any] = [None] * self.size
        errors: list[BaseException] = []

        def work(rank: int) -> None:
            try:
                results[rank] = program(DeviceRank(self, rank, exchange), *chosen[rank])
            except BaseException as error:
                errors.append(error)
                if not exchange.shared_error[rank]:  # the others did not get it: they leave their collective
                    exchange.barrier.abort()

        threads = [threading.Thread(target=work, args=(rank,), name=f"kiln rank {rank}") for rank in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        first = next((error for error in errors if not isinstance(error, threading.BrokenBarrierError)), None)
        if first is not None:
            raise first
        if errors:  # no rank failed: they waited for one another too long
            raise TimeoutError(str(errors[0]))
        return results


class DeviceRank:
    """One rank of a `DeviceGroup`, as its program sees it (a `CollectiveGroup`): `device` is its device."""

    def __init__(self, group: DeviceGroup, rank: int, exchange: _Exchange) -> None:
        self.group = group
        self._rank = rank
        self._exchange = exchange

    @property
    def rank(self) -> int:
        """This rank's number, 0 .. size - 1."""
        return self._rank

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self.group.size

    @property
    def device(self) -> str:
        """The device this rank computes on."""
        return self.group.devices[self._rank]

    def _meet(self, name: str, tensor: TensorT, *options: Any) -> TensorT:
        if not isinstance(tensor, TensorCore):
            raise TypeError(f"{name} takes a Tensor, got {type(tensor).__name__}")
        if tensor.device != self.device:
            raise ValueError(
                f"rank {self._rank}: {name} of a tensor on {tensor.device!r}; this rank's tensors live on "
                f"{self.device!r} (move it with .to(group.device))"
            )
        result: TensorT = self._exchange.meet(self._rank, name, tensor, options)
        return result

    def allreduce(self, tensor: TensorT, op: str = "sum") -> TensorT:
        """The elementwise reduction (`op`) of every rank's `tensor`, on this rank's device."""
        return self._meet("allreduce", tensor, op)

    def allgather(self, tensor: TensorT, axis: int = 0) -> TensorT:
        """Every rank's `tensor` joined along `axis` in rank order (sizes along `axis` may differ)."""
        return self._meet("allgather", tensor, axis)

    def reduce_scatter(self, tensor: TensorT, axis: int = 0, op: str = "sum") -> TensorT:
        """This rank's part (balanced parts along `axis`, in rank order) of the reduction of every rank's tensor."""
        return self._meet("reduce_scatter", tensor, axis, op)

    def broadcast(self, tensor: TensorT, root: int = 0) -> TensorT:
        """Rank `root`'s `tensor` (each rank passes one of the same shape and dtype)."""
        if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < self.size:
            raise ValueError(f"broadcast root must be a rank in 0..{self.size - 1}, got {root!r}")
        return self._meet("broadcast", tensor, root)

    def barrier(self) -> None:
        """Waits until every rank has called barrier()."""
        self._exchange.meet(self._rank, "barrier", None, ())
