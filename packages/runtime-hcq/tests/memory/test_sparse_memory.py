"""SparseMemory against a flat bytearray model."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from kiln.runtime.memory import SparseMemory

SIZE = 1 << 16


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, SIZE - 1), st.binary(min_size=0, max_size=9000), st.booleans()),
        max_size=30,
    )
)
def test_reads_and_writes_match_a_flat_model(operations: list[tuple[int, bytes, bool]]) -> None:
    memory, model = SparseMemory(SIZE), bytearray(SIZE)
    for address, data, zeros in operations:
        data = data[: SIZE - address]
        if zeros:
            data = bytes(len(data))
        memory.write(address, data)
        model[address : address + len(data)] = data
        length = min(len(data) + 100, SIZE - address)
        assert memory.read(address, length) == bytes(model[address : address + length])
    assert memory.read(0, SIZE) == bytes(model)
    nonzero_pages = {index // 4096 for index, byte in enumerate(model) if byte}
    assert memory.resident_pages() == len(nonzero_pages), "only pages holding a non-zero byte are stored"
    assert set(memory.snapshot()) == nonzero_pages


def test_never_written_reads_zero_and_bounds_are_checked() -> None:
    memory = SparseMemory(1 << 40)
    assert memory.read((1 << 40) - 16, 16) == bytes(16)
    with pytest.raises(ValueError, match="outside the memory"):
        memory.read((1 << 40) - 8, 16)
    with pytest.raises(ValueError, match="outside the memory"):
        memory.write(-1, b"x")


def test_stored_page_numbers_are_the_pages_holding_a_non_zero_byte() -> None:
    memory = SparseMemory(1 << 20)
    memory.write(0x1FFE, b"\x01\x02\x03\x04")  # bytes in pages 1 and 2
    memory.write(0x5000, bytes(16))  # zeros only: nothing stored
    assert memory.stored_page_numbers() == {1, 2}
    memory.write(0x1FFE, bytes(2))  # page 1 all zero again
    assert memory.stored_page_numbers() == {2}
