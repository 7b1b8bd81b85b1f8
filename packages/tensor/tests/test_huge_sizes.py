"""Tensors past 2**31 elements run, and tensors past memory raise OutOfMemoryError before any kernel is built
(issue 44).

A run allocates its outputs and temporaries before compiling its kernels (`Engine._run_buffers`), so a size the
device cannot hold fails at once with the allocator's OutOfMemoryError naming the bytes asked for.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kiln.runtime import OutOfMemoryError
from kiln.tensor import Tensor, dtypes
from kiln.tensor.realize import Engine, use_engine

ADDRESS_SPACE_BYTES = 2**48
"""More than x86-64 and AArch64 user space (128 / 256 TiB): no mmap can succeed, whatever the overcommit policy."""


def _host_refuses(nbytes: int) -> bool:
    """Whether the CPU device refuses one allocation of `nbytes`: more than the host's RAM + swap (checked by the
    host allocator before mapping, whatever the overcommit policy), read here from /proc/meminfo."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    except OSError:
        return False
    total = sum(int(fields[key].split()[0]) * 1024 for key in ("MemTotal", "SwapTotal"))
    return nbytes > total


@pytest.mark.parametrize(
    ("make", "nbytes"),
    [
        (lambda: Tensor.rand(ADDRESS_SPACE_BYTES // 4), ADDRESS_SPACE_BYTES),
        (lambda: Tensor.ones(ADDRESS_SPACE_BYTES, dtype=dtypes.uint8) + 1, ADDRESS_SPACE_BYTES),
        (lambda: Tensor.rand(2**40), 2**42),  # the case: 4 TiB of float32
    ],
    ids=["rand", "add", "rand_2_40"],
)
def test_sizes_past_memory_raise_out_of_memory_before_compiling(make: Callable[[], Tensor], nbytes: int) -> None:
    if nbytes < ADDRESS_SPACE_BYTES and not _host_refuses(nbytes):
        pytest.skip(f"this host has {nbytes} bytes of RAM + swap")
    engine = Engine()
    with use_engine(engine):
        tensor = make()
        with pytest.raises(OutOfMemoryError, match=f"could not allocate {nbytes} bytes") as raised:
            tensor.realize()
    assert raised.value.requested == nbytes and raised.value.device == "CPU"
    assert engine.programs_built == 0, "a kernel was compiled before the allocation failed"


@pytest.mark.slow
def test_elementwise_past_2_31_elements_runs() -> None:
    # the issue's `x + 1` on 2**31 + 64 uint8 elements (about 4.3 GB for input and output), checked at positions
    # around and past 2**31 against numpy's arithmetic on the same index
    count = 2**31 + 64
    if os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") < 8 * 2**30:
        pytest.skip("needs about 4.3 GB of memory free (8 GiB of RAM)")
    x = (Tensor.arange(count) % 251).cast(dtypes.uint8).realize()
    y = (x + 1).realize()
    positions = np.array([0, 1, 250, 2**31 - 1, 2**31, 2**31 + 1, 2**31 + 37, count - 1], dtype=np.int64)
    positions = np.concatenate([positions, np.random.default_rng(44).integers(0, count, 8)])
    got = np.array([y[int(k)].item() for k in positions], dtype=np.int64)
    np.testing.assert_array_equal(got, (positions % 251 + 1) % 256)
    assert y.shape == (count,) and y.dtype == dtypes.uint8
