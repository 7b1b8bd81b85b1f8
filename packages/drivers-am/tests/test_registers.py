"""Register field packing against hand-computed values (field positions from the Linux sh_mask headers)."""

from __future__ import annotations

import pytest

from kiln.drivers.am.registers import context_cntl, invalidate_request


def test_context_cntl() -> None:
    # ENABLE_CONTEXT bit 0, PAGE_TABLE_DEPTH 2:1, PAGE_TABLE_BLOCK_SIZE 7:4
    assert context_cntl(enable=True, depth=3, block_size=0) == 0x7
    assert context_cntl(enable=True, depth=2, block_size=9) == 0x95
    assert context_cntl(enable=False, depth=1, block_size=15) == 0xF2
    with pytest.raises(ValueError, match="depth"):
        context_cntl(enable=True, depth=4, block_size=0)
    with pytest.raises(ValueError, match="block size"):
        context_cntl(enable=True, depth=0, block_size=16)


def test_invalidate_request() -> None:
    # PER_VMID_INVALIDATE_REQ 15:0, FLUSH_TYPE 18:16 = 0, INVALIDATE_L2_PTES/PDE0/PDE1/PDE2 19..22, L1_PTES 23
    assert invalidate_request(0) == 0x00F8_0001
    assert invalidate_request(5) == 0x00F8_0020
    with pytest.raises(ValueError, match="vmid"):
        invalidate_request(16)
