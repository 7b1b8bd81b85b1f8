"""Where a GPU's VRAM sits in the XGMI fabric address space, read from the hub's XGMI registers.

GPUs of an XGMI hive share one fabric address space: node N's VRAM appears at `N * segment_size`, and every GPU of
the hive reaches any node's memory at that address with the SYSTEM bit clear (Linux `gmc_v9_0_vram_gtt_location`
adds `physical_node_id * node_segment_size` to `vram_base_offset`; `amdgpu_vm_bo_update` maps a hive peer's buffer
with the owner's `vram_base_offset`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.drivers.am.registers import (
    XGMI_LFB_CNTL_MAX_REGION_MASK,
    XGMI_LFB_CNTL_MAX_REGION_SHIFT,
    XGMI_LFB_CNTL_REGION_MASK,
    XGMI_LFB_SIZE_MASK,
    XGMI_LFB_SIZE_UNIT_SHIFT,
)


@dataclass(frozen=True)
class XgmiNode:
    """This GPU's place in an XGMI hive (all zero / one node when XGMI is off).

    Attributes:
        node_id: the physical node id (PF_LFB_REGION).
        node_count: nodes in the hive (PF_MAX_REGION + 1).
        segment_size: bytes of fabric address space per node (PF_LFB_SIZE * 16 MiB).
    """

    node_id: int = 0
    node_count: int = 1
    segment_size: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.node_count <= XGMI_LFB_CNTL_MAX_REGION_MASK + 1:
            raise ValueError(f"an XGMI hive has 1..16 nodes, got node_count={self.node_count}")
        if not 0 <= self.node_id < self.node_count:
            raise ValueError(f"XGMI node id {self.node_id} is outside the hive's 0..{self.node_count - 1}")
        unit = 1 << XGMI_LFB_SIZE_UNIT_SHIFT
        if self.segment_size < 0 or self.segment_size % unit or self.segment_size // unit > XGMI_LFB_SIZE_MASK:
            raise ValueError(f"XGMI segment size {self.segment_size:#x} is not a multiple of 16 MiB in range")

    @property
    def in_hive(self) -> bool:
        """Whether XGMI is on: a segment size and more than one node (single-node parts may program a size only)."""
        return self.segment_size > 0 and self.node_count > 1

    @property
    def fabric_base(self) -> int:
        """Fabric address of this node's VRAM offset 0 (0 when XGMI is off)."""
        return self.node_id * self.segment_size if self.in_hive else 0

    @classmethod
    def from_registers(cls, lfb_cntl: int, lfb_size: int) -> XgmiNode:
        """Decode MC_VM_XGMI_LFB_CNTL and MC_VM_XGMI_LFB_SIZE as `gfxhub_v1_1_get_xgmi_info` does."""
        max_region = (lfb_cntl >> XGMI_LFB_CNTL_MAX_REGION_SHIFT) & XGMI_LFB_CNTL_MAX_REGION_MASK
        segment_size = (lfb_size & XGMI_LFB_SIZE_MASK) << XGMI_LFB_SIZE_UNIT_SHIFT
        node_id = lfb_cntl & XGMI_LFB_CNTL_REGION_MASK
        if max_region == 0:
            return cls(node_id=0, node_count=1, segment_size=segment_size)
        return cls(node_id=node_id, node_count=max_region + 1, segment_size=segment_size)

    def to_registers(self) -> tuple[int, int]:
        """The (MC_VM_XGMI_LFB_CNTL, MC_VM_XGMI_LFB_SIZE) values describing this node (for simulated hardware)."""
        lfb_cntl = self.node_id | (self.node_count - 1) << XGMI_LFB_CNTL_MAX_REGION_SHIFT
        return lfb_cntl, self.segment_size >> XGMI_LFB_SIZE_UNIT_SHIFT
