"""Two-level segregated fit (TLSF): a constant-time allocator of address ranges with immediate coalescing.

Free blocks sit in buckets indexed by (first level, second level): the first level is the power-of-two range of the
block size, the second level splits that range into 16 equal slices. Two bitmaps say which buckets are non-empty, so
finding a bucket whose every block fits a request is a couple of bit tricks, and freeing merges with the two physical
neighbours through a doubly linked list of all blocks. Neither path scans blocks.

Alignment is ABSOLUTE: `alloc(size, align)` returns an address that is a multiple of `align`, whatever `base` is
(tinygrad's allocator aligns relative to its base; page-table rules need absolute alignment).
"""

from __future__ import annotations

from dataclasses import dataclass

_SECOND_LEVEL_LOG = 4
_SECOND_LEVEL_COUNT = 1 << _SECOND_LEVEL_LOG


def _bucket(size: int) -> tuple[int, int]:
    """The (first level, second level) bucket holding blocks of `size` bytes (size >= 1)."""
    if size < _SECOND_LEVEL_COUNT:
        return 0, size  # one bucket per exact small size
    first = size.bit_length() - _SECOND_LEVEL_LOG
    return first, (size >> (first - 1)) - _SECOND_LEVEL_COUNT


def _bucket_granularity(first: int) -> int:
    """Width in bytes of one second-level slice of first level `first`."""
    return 1 if first == 0 else 1 << (first - 1)


def _lowest_bit(mask: int) -> int:
    return (mask & -mask).bit_length() - 1


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class _Block:
    """One range of the allocator's space, free or used, linked to its physical neighbours."""

    __slots__ = ("free", "next", "previous", "size", "start")

    def __init__(self, start: int, size: int, free: bool) -> None:
        self.start = start
        self.size = size
        self.free = free
        self.previous: _Block | None = None
        self.next: _Block | None = None


@dataclass(frozen=True)
class TLSFBlock:
    """A snapshot of one block for inspection: `start` (absolute address), `size` in bytes, `free`."""

    start: int
    size: int
    free: bool


class TLSFAllocator:
    """Allocates aligned ranges from `[base, base + size)` in O(1), coalescing freed neighbours immediately.

    Args:
        size: bytes managed.
        base: address of the first managed byte.
        block_size: granularity; requests are rounded up to a multiple of it and a leftover tail smaller than it stays
            inside the allocation instead of becoming a free block.

    Example: `TLSFAllocator(1 << 20, base=0x1000).alloc(0x100, align=0x4000)` returns 0x4000.
    """

    def __init__(self, size: int, base: int = 0, block_size: int = 16) -> None:
        if size <= 0:
            raise ValueError(f"TLSFAllocator size must be positive, got {size:#x}")
        if base < 0:
            raise ValueError(f"TLSFAllocator base must be non-negative, got {base:#x}")
        if block_size <= 0:
            raise ValueError(f"TLSFAllocator block_size must be positive, got {block_size}")
        self.size = size
        self.base = base
        self.block_size = block_size
        first_levels = _bucket(size)[0] + 1
        self._free_lists: list[list[dict[int, _Block]]] = [
            [{} for _ in range(_SECOND_LEVEL_COUNT)] for _ in range(first_levels)
        ]
        self._first_bitmap = 0
        self._second_bitmaps = [0] * first_levels
        self._used: dict[int, _Block] = {}
        self._free_bytes = 0
        self._first_block = _Block(base, size, free=True)
        self._insert_free(self._first_block)

    # ---- inspection ---------------------------------------------------------------------------------------------

    @property
    def free_bytes(self) -> int:
        """Bytes in free blocks."""
        return self._free_bytes

    @property
    def used_bytes(self) -> int:
        """Bytes in allocated blocks (each allocation counts its rounded size)."""
        return self.size - self._free_bytes

    @property
    def largest_free(self) -> int:
        """Size of the largest free block (0 when full)."""
        if self._first_bitmap == 0:
            return 0
        first = self._first_bitmap.bit_length() - 1
        second = self._second_bitmaps[first].bit_length() - 1
        return max(block.size for block in self._free_lists[first][second].values())

    def blocks(self) -> list[TLSFBlock]:
        """Every block, free or used, in address order; together they tile `[base, base + size)`."""
        result: list[TLSFBlock] = []
        block: _Block | None = self._first_block
        while block is not None:
            result.append(TLSFBlock(block.start, block.size, block.free))
            block = block.next
        return result

    def is_allocated(self, addr: int) -> bool:
        """Whether `addr` is the start of a live allocation."""
        return addr in self._used

    def allocation_size(self, addr: int) -> int:
        """Size of the live allocation starting at `addr` (after rounding); ValueError if there is none."""
        block = self._used.get(addr)
        if block is None:
            raise ValueError(f"{addr:#x} is not the start of an allocation of this allocator")
        return block.size

    # ---- alloc / free -------------------------------------------------------------------------------------------

    def alloc(self, size: int, align: int = 1) -> int:
        """Allocate `size` bytes at an address that is a multiple of `align` (a power of two); returns the address.

        Raises MemoryError (naming the request, free bytes and largest free block) when no free block can hold it.
        """
        if size <= 0:
            raise ValueError(f"allocation size must be positive, got {size:#x}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"alignment must be a power of two, got {align:#x}")
        size = _round_up(size, self.block_size)
        block = self._find_good_fit(size + align - 1)
        if block is None:
            # Near-full fallback: some block smaller than the worst-case padding may still fit after alignment.
            block = self._find_exact_fit(size, align)
        if block is None:
            raise MemoryError(
                f"cannot allocate {size:#x} bytes aligned to {align:#x} in [{self.base:#x}, {self.base + self.size:#x})"
                f": {self._free_bytes:#x} bytes free, largest free block {self.largest_free:#x}"
            )
        self._remove_free(block)
        start = _round_up(block.start, align)
        if start > block.start:  # the unaligned head stays free; the allocation is a new block after it
            head = block
            block = _Block(start, head.start + head.size - start, free=False)
            head.size = start - head.start
            self._link_after(head, block)
            self._insert_free(head)
        tail_size = block.size - size
        if tail_size >= self.block_size:
            block.size = size
            tail = _Block(start + size, tail_size, free=True)
            self._link_after(block, tail)
            self._insert_free(tail)
        block.free = False
        self._used[start] = block
        return start

    def free(self, addr: int) -> None:
        """Free the allocation starting at `addr`; ValueError on a double free or an address never returned."""
        block = self._used.pop(addr, None)
        if block is None:
            raise ValueError(
                f"cannot free {addr:#x}: not the start of a live allocation (double free or foreign address)"
            )
        block.free = True
        previous = block.previous
        if previous is not None and previous.free:
            self._remove_free(previous)
            previous.size += block.size
            self._unlink(block)
            block = previous
        following = block.next
        if following is not None and following.free:
            self._remove_free(following)
            block.size += following.size
            self._unlink(following)
        self._insert_free(block)

    # ---- internals ----------------------------------------------------------------------------------------------

    def _find_good_fit(self, size: int) -> _Block | None:
        """O(1): the first block of the first non-empty bucket whose every block is at least `size` bytes."""
        first, second = _bucket(size)
        first, second = _bucket(size + _bucket_granularity(first) - 1)
        if first >= len(self._second_bitmaps):
            return None
        mask = self._second_bitmaps[first] & (-1 << second)
        if mask == 0:
            first_mask = self._first_bitmap & (-1 << (first + 1))
            if first_mask == 0:
                return None
            first = _lowest_bit(first_mask)
            mask = self._second_bitmaps[first]
        bucket = self._free_lists[first][_lowest_bit(mask)]
        return next(iter(bucket.values()))

    def _find_exact_fit(self, size: int, align: int) -> _Block | None:
        """Slow path, only after the O(1) path failed: scan the buckets that may hold a block of >= `size` bytes."""
        first, second = _bucket(size)
        if first >= len(self._second_bitmaps):
            return None
        while True:
            mask = self._second_bitmaps[first] & (-1 << second)
            while mask:
                bit = _lowest_bit(mask)
                for block in self._free_lists[first][bit].values():
                    if _round_up(block.start, align) + size <= block.start + block.size:
                        return block
                mask &= mask - 1
            first_mask = self._first_bitmap & (-1 << (first + 1))
            if first_mask == 0:
                return None
            first, second = _lowest_bit(first_mask), 0

    def _insert_free(self, block: _Block) -> None:
        first, second = _bucket(block.size)
        self._free_lists[first][second][block.start] = block
        self._second_bitmaps[first] |= 1 << second
        self._first_bitmap |= 1 << first
        self._free_bytes += block.size

    def _remove_free(self, block: _Block) -> None:
        first, second = _bucket(block.size)
        bucket = self._free_lists[first][second]
        del bucket[block.start]
        if not bucket:
            self._second_bitmaps[first] &= ~(1 << second)
            if self._second_bitmaps[first] == 0:
                self._first_bitmap &= ~(1 << first)
        self._free_bytes -= block.size

    @staticmethod
    def _link_after(block: _Block, new: _Block) -> None:
        new.previous = block
        new.next = block.next
        if block.next is not None:
            block.next.previous = new
        block.next = new

    @staticmethod
    def _unlink(block: _Block) -> None:
        # Never the first block: only a block with a free predecessor, or a successor, is unlinked.
        assert block.previous is not None
        block.previous.next = block.next
        if block.next is not None:
            block.next.previous = block.previous
