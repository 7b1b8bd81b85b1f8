"""A two-rank job that goes wrong on purpose, for mpi_test_failures.py.

mpirun -n 2 python failing_rank.py raise     # rank 1 raises while rank 0 waits in all_reduce
mpirun -n 2 python failing_rank.py timeout   # rank 1 never calls the collective; rank 0 times out
"""

from __future__ import annotations

import sys
import time

from kiln.tensor import Tensor
from kiln.tensor import distributed as dist


def main(mode: str) -> None:
    dist.init(timeout=3, abort_on_error=mode == "raise")
    if dist.rank() == 1:
        if mode == "raise":
            raise ValueError("rank 1 found a bad batch on purpose")
        time.sleep(8)  # skips the collective, then leaves normally
        return
    dist.all_reduce(Tensor([1.0, 2.0]))
    print("rank 0 finished the all_reduce, which it should not have", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
