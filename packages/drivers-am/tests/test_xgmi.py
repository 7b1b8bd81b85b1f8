"""XGMI placement decoded from, and encoded into, the MC_VM_XGMI_LFB registers (hand-computed values)."""

from __future__ import annotations

import pytest

from kiln.drivers.am.xgmi import XgmiNode


def test_from_registers() -> None:
    # LFB_CNTL: region (node id) 3:0 = 2, max region 7:4 = 3 (four nodes); LFB_SIZE 16:0 = 0x1000 units of 16 MiB.
    node = XgmiNode.from_registers(0x32, 0x1000)
    assert (node.node_id, node.node_count, node.segment_size) == (2, 4, 64 << 30)
    assert node.in_hive and node.fabric_base == 128 << 30
    assert node.to_registers() == (0x32, 0x1000)


def test_single_node_is_not_a_hive() -> None:
    node = XgmiNode.from_registers(0x0, 0x400)  # a size but max region 0: XGMI off
    assert not node.in_hive and node.fabric_base == 0 and node.segment_size == 16 << 30
    assert XgmiNode().fabric_base == 0


@pytest.mark.parametrize(
    ("node_id", "node_count", "segment_size", "message"),
    [(2, 2, 1 << 30, "outside"), (0, 17, 1 << 30, "1..16"), (0, 2, (1 << 30) + 4096, "16 MiB")],
)
def test_rejects_bad_geometry(node_id: int, node_count: int, segment_size: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        XgmiNode(node_id, node_count, segment_size)
