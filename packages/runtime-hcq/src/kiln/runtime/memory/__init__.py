"""Generic memory management for user-space drivers: TLSF allocators, page-table walking, virtual mappings.

A driver supplies a `PageTableFormat` (its real entry bit layout) and a `PhysicalMemory` (its VRAM); `MemoryManager`
does the rest: physical allocation, building / freeing page tables with the largest pages alignment allows, and
checked, atomic map / unmap.
"""

from kiln.runtime.memory.address_space import AddrSpace, MappingError, VirtMapping
from kiln.runtime.memory.fragment import aligned_blocks, fragment_runs
from kiln.runtime.memory.mapped_allocator import MappedAllocation, MappedAllocator, MappedBuffer
from kiln.runtime.memory.memory_manager import MemoryManager, Translation
from kiln.runtime.memory.page_table_format import DecodedEntry, PageTableFormat, ReferencePageTableFormat
from kiln.runtime.memory.physical_memory import PhysicalMemory, SparseMemory
from kiln.runtime.memory.tlsf import TLSFAllocator, TLSFBlock
from kiln.runtime.memory.walker import PageTableWalker, WalkRun

__all__ = [
    "AddrSpace",
    "DecodedEntry",
    "MappedAllocation",
    "MappedAllocator",
    "MappedBuffer",
    "MappingError",
    "MemoryManager",
    "PageTableFormat",
    "PageTableWalker",
    "PhysicalMemory",
    "ReferencePageTableFormat",
    "SparseMemory",
    "TLSFAllocator",
    "TLSFBlock",
    "Translation",
    "VirtMapping",
    "WalkRun",
    "aligned_blocks",
    "fragment_runs",
]
