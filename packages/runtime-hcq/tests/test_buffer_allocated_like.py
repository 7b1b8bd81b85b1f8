"""`Buffer.allocated_like`: a new allocated base buffer of another's spec (the eager lane's outputs), with its own
memory, freed to the allocator's cache like any buffer; an unallocated template raises."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.runtime import Buffer
from kiln.uops import dtypes


def test_a_buffer_made_like_another_has_its_spec_and_its_own_memory() -> None:
    template = Buffer("CPU", 24, dtypes.float32).allocate()
    template.copyin(np.arange(24, dtype=np.float32).view(np.uint8))
    made = Buffer.allocated_like(template)
    assert (made.device, made.size, made.dtype, made.nbytes, made.options) == (
        template.device,
        template.size,
        template.dtype,
        template.nbytes,
        template.options,
    )
    assert made.is_allocated and made.base is made and made.offset == 0
    assert made.opaque.address != template.opaque.address
    made.copyin(np.full(24, 7, np.float32).view(np.uint8))
    out = np.empty(template.nbytes, np.uint8)
    template.copyout(out)
    np.testing.assert_array_equal(out.view(np.float32), np.arange(24, dtype=np.float32))
    made.copyout(out)
    np.testing.assert_array_equal(out.view(np.float32), np.full(24, 7, np.float32))


def test_a_view_template_gives_a_base_of_the_views_size() -> None:
    base = Buffer("CPU", 32, dtypes.int32).allocate()
    view = base.view(8, dtypes.int32, offset=16)
    view.allocate()
    made = Buffer.allocated_like(view)
    assert made.base is made and made.size == 8 and made.nbytes == 32


def test_an_unallocated_template_raises() -> None:
    with pytest.raises(RuntimeError, match="allocated buffer"):
        Buffer.allocated_like(Buffer("CPU", 4, dtypes.float32))
