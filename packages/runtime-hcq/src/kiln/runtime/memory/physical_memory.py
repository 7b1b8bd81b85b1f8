"""The device memory a page-table walker reads and writes (PhysicalMemory), and a sparse simulated one."""

from __future__ import annotations

from typing import Protocol

_PAGE_SHIFT = 12
_PAGE_SIZE = 1 << _PAGE_SHIFT
_ZERO_PAGE = bytes(_PAGE_SIZE)


class PhysicalMemory(Protocol):
    """Byte access to the device's VRAM by physical address (a simulation, or a BAR mapping of real VRAM)."""

    def read(self, paddr: int, size: int) -> bytes:
        """Return `size` bytes starting at `paddr`."""
        ...

    def write(self, paddr: int, data: bytes) -> None:
        """Store `data` starting at `paddr`."""
        ...


class SparseMemory:
    """A simulated VRAM of `size` bytes that stores only the 4 KiB pages holding non-zero bytes.

    Never-written bytes read as zero, and a page whose bytes all become zero again is dropped, so a manager over
    hundreds of GiB of simulated VRAM costs memory only for its page tables and the data actually written.
    """

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError(f"SparseMemory size must be positive, got {size:#x}")
        self.size = size
        self._pages: dict[int, bytearray] = {}

    def _check(self, paddr: int, size: int) -> None:
        if paddr < 0 or size < 0 or paddr + size > self.size:
            raise ValueError(f"access [{paddr:#x}, {paddr + size:#x}) is outside the memory [0, {self.size:#x})")

    def read(self, paddr: int, size: int) -> bytes:
        """Return `size` bytes at `paddr`; ValueError when the range leaves the memory."""
        self._check(paddr, size)
        offset = paddr & (_PAGE_SIZE - 1)
        if offset + size <= _PAGE_SIZE:  # the common case: one entry or one table
            page = self._pages.get(paddr >> _PAGE_SHIFT)
            return bytes(size) if page is None else bytes(page[offset : offset + size])
        parts: list[bytes] = []
        end = paddr + size
        while paddr < end:
            offset = paddr & (_PAGE_SIZE - 1)
            length = min(_PAGE_SIZE - offset, end - paddr)
            page = self._pages.get(paddr >> _PAGE_SHIFT)
            parts.append(bytes(length) if page is None else bytes(page[offset : offset + length]))
            paddr += length
        return b"".join(parts)

    def write(self, paddr: int, data: bytes) -> None:
        """Store `data` at `paddr`; ValueError when the range leaves the memory."""
        self._check(paddr, len(data))
        view = memoryview(data)
        position = 0
        while position < len(data):
            offset = (paddr + position) & (_PAGE_SIZE - 1)
            length = min(_PAGE_SIZE - offset, len(data) - position)
            number = (paddr + position) >> _PAGE_SHIFT
            piece = view[position : position + length]
            page = self._pages.get(number)
            all_zero = piece == _ZERO_PAGE[:length]
            if page is None:
                if not all_zero:
                    page = self._pages[number] = bytearray(_PAGE_SIZE)
                    page[offset : offset + length] = piece
            else:
                page[offset : offset + length] = piece
                if all_zero and page == _ZERO_PAGE:
                    del self._pages[number]
            position += length

    def resident_pages(self) -> int:
        """Number of 4 KiB pages currently stored (holding a non-zero byte)."""
        return len(self._pages)

    def stored_page_numbers(self) -> set[int]:
        """The numbers (address >> 12) of the 4 KiB pages currently stored."""
        return set(self._pages)

    def snapshot(self) -> dict[int, bytes]:
        """Page number -> page contents for every stored page (for tests comparing memory before and after)."""
        return {number: bytes(page) for number, page in self._pages.items()}
