"""Kernel-argument layout and packing, checked against ctypes structures (the C compiler's layout rules)."""

from __future__ import annotations

import ctypes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln.runtime import ArgKind, HCQArgsState, KernelArgLayout

_CTYPES = {ArgKind.POINTER: ctypes.c_uint64, ArgKind.INT32: ctypes.c_int32, ArgKind.INT64: ctypes.c_int64}


def struct_of(kinds: tuple[ArgKind, ...]) -> type[ctypes.Structure]:
    """The C struct a kernel taking these parameters would declare."""
    return type("Args", (ctypes.Structure,), {"_fields_": [(f"f{i}", _CTYPES[kind]) for i, kind in enumerate(kinds)]})


@given(st.lists(st.sampled_from(list(ArgKind)), max_size=12))
def test_layout_matches_a_c_struct(kind_list: list[ArgKind]) -> None:
    kinds = tuple(kind_list)
    layout = KernelArgLayout(kinds)
    c_struct = struct_of(kinds)
    assert layout.offsets == tuple(getattr(c_struct, f"f{i}").offset for i in range(len(kinds)))
    if kinds:
        assert layout.size == ctypes.sizeof(c_struct)


def test_buffers_then_variables_layout_by_hand() -> None:
    layout = KernelArgLayout.buffers_then_variables(3, 3)
    assert layout.offsets == (0, 8, 16, 24, 28, 32)
    assert layout.size == 40  # 36 rounded up to the 8-byte alignment of the pointers
    assert KernelArgLayout.buffers_then_variables(0, 3).size == 12
    wide = KernelArgLayout((ArgKind.INT32, ArgKind.INT64, ArgKind.INT32))
    assert (wide.offsets, wide.size) == ((0, 8, 16), 24)  # the int64 is 8-aligned, the struct padded to 8


@given(
    st.lists(st.sampled_from(list(ArgKind)), max_size=10).flatmap(
        lambda kinds: st.tuples(
            st.just(tuple(kinds)),
            st.lists(
                st.integers(0, 2**64 - 1), min_size=kinds.count(ArgKind.POINTER), max_size=kinds.count(ArgKind.POINTER)
            ),
            st.tuples(
                *(
                    st.integers(-(2**31), 2**31 - 1) if kind is ArgKind.INT32 else st.integers(-(2**63), 2**63 - 1)
                    for kind in kinds
                    if kind is not ArgKind.POINTER
                )
            ),
        )
    )
)
def test_packed_values_read_back_through_a_c_struct(
    case: tuple[tuple[ArgKind, ...], list[int], tuple[int, ...]],
) -> None:
    kinds, addresses, values = case
    layout = KernelArgLayout(kinds)
    memory = bytearray(layout.size + 8)
    state = HCQArgsState(layout, memoryview(memory), addresses, values)
    assert state.buffer_addresses == tuple(addresses) and state.variable_values == tuple(values)
    c_args = struct_of(kinds).from_buffer(memory)
    pointers, ints = iter(addresses), iter(values)
    for index, kind in enumerate(kinds):
        expected = next(pointers) if kind is ArgKind.POINTER else next(ints)
        assert getattr(c_args, f"f{index}") == expected


def test_updates_rewrite_one_parameter() -> None:
    layout = KernelArgLayout((ArgKind.INT32, ArgKind.POINTER, ArgKind.INT32))
    memory = bytearray(layout.size)
    state = HCQArgsState(layout, memoryview(memory), [0x1000], [1, 2])
    state.update_buffer(0, 0xDEAD_BEEF_0000)
    state.update_variable(1, -5)
    c_args = struct_of(layout.kinds).from_buffer(memory)
    assert (c_args.f0, c_args.f1, c_args.f2) == (1, 0xDEAD_BEEF_0000, -5)


def test_bad_arguments_raise() -> None:
    layout = KernelArgLayout.buffers_then_variables(1, 1)
    with pytest.raises(ValueError, match="takes 1 buffer\\(s\\) and 1 variable\\(s\\), got 2 and 1"):
        HCQArgsState(layout, memoryview(bytearray(16)), [1, 2], [3])
    with pytest.raises(ValueError, match="hold 16 bytes, got 8"):
        HCQArgsState(layout, memoryview(bytearray(8)), [1], [3])
    with pytest.raises(ValueError, match="writable"):
        HCQArgsState(layout, memoryview(bytes(16)), [1], [3])
    with pytest.raises(ValueError, match=r"variable value 0 must be an int in \[-2147483648, 2147483647\]"):
        HCQArgsState(layout, memoryview(bytearray(16)), [1], [2**31])
    wide = HCQArgsState(KernelArgLayout((ArgKind.INT64,)), memoryview(bytearray(8)), [], [2**40])
    assert wide.variable_values == (2**40,)
    with pytest.raises(ValueError, match="buffer address 0 must be an int"):
        HCQArgsState(layout, memoryview(bytearray(16)), [-1], [0])
    with pytest.raises(TypeError, match="ArgKind"):
        KernelArgLayout(("pointer",))  # type: ignore[arg-type]


@given(
    st.integers(0, 4).flatmap(
        lambda pointers: st.tuples(
            st.lists(st.integers(0, 2**64 - 1), min_size=pointers, max_size=pointers),
            st.lists(
                st.one_of(
                    st.tuples(st.just(ArgKind.INT32), st.integers(-(2**31), 2**31 - 1)),
                    st.tuples(st.just(ArgKind.INT64), st.integers(-(2**63), 2**63 - 1)),
                ),
                max_size=4,
            ),
        )
    )
)
def test_one_call_packing_matches_the_parameters_one_by_one(
    case: tuple[list[int], list[tuple[ArgKind, int]]],
) -> None:
    addresses, variables = case
    layout = KernelArgLayout((ArgKind.POINTER,) * len(addresses) + tuple(kind for kind, _ in variables))
    assert layout.pointers_first and layout.packer.size == layout.size
    values = [value for _, value in variables]
    fast = bytearray(layout.size)
    state = HCQArgsState(layout, memoryview(fast), addresses, values)  # pointers first: packed in one call
    slow = bytearray(layout.size)
    reference = HCQArgsState(layout, memoryview(slow), [0] * len(addresses), [0] * len(values))
    for index, address in enumerate(addresses):
        reference.update_buffer(index, address)  # the per-parameter writes
    for index, value in enumerate(values):
        reference.update_variable(index, value)
    assert fast == slow
    assert state.parameter_values() == (*addresses, *values)


def test_one_call_packing_still_refuses_bad_values() -> None:
    layout = KernelArgLayout.buffers_then_variables(1, 1)
    assert layout.pointers_first and not KernelArgLayout((ArgKind.INT32, ArgKind.POINTER)).pointers_first
    with pytest.raises(ValueError, match=r"variable value 0 must be an int .* got True"):
        HCQArgsState(layout, memoryview(bytearray(16)), [1], [True])  # struct would take a bool as 1
    with pytest.raises(ValueError, match=r"buffer address 0 must be an int .* got 2\.0"):
        HCQArgsState(layout, memoryview(bytearray(16)), [2.0], [0])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"buffer address 0 must be an int in \[0, 18446744073709551615\]"):
        HCQArgsState(layout, memoryview(bytearray(16)), [2**64], [0])


@given(
    st.lists(st.sampled_from(list(ArgKind)), max_size=10).flatmap(
        lambda kinds: st.tuples(
            st.just(tuple(kinds)),
            st.lists(
                st.integers(0, 2**64 - 1), min_size=kinds.count(ArgKind.POINTER), max_size=kinds.count(ArgKind.POINTER)
            ),
            st.tuples(
                *(
                    st.integers(-(2**31), 2**31 - 1) if kind is ArgKind.INT32 else st.integers(-(2**63), 2**63 - 1)
                    for kind in kinds
                    if kind is not ArgKind.POINTER
                )
            ),
        )
    )
)
def test_for_launch_blocks_read_back_through_a_c_struct(
    case: tuple[tuple[ArgKind, ...], list[int], tuple[int, ...]],
) -> None:
    # the launch path's block (its own memory, one pack) holds what a C kernel reads, whatever the layout
    kinds, addresses, values = case
    layout = KernelArgLayout(kinds)
    state = HCQArgsState.for_launch(layout, tuple(addresses), values)
    assert state.buffer_addresses == tuple(addresses) and state.variable_values == tuple(values)
    c_args = struct_of(kinds).from_buffer(bytearray(state.memory))
    pointers, ints = iter(addresses), iter(values)
    for index, kind in enumerate(kinds):
        expected = next(pointers) if kind is ArgKind.POINTER else next(ints)
        assert getattr(c_args, f"f{index}") == expected
    if values:  # the block stays writable like any other
        state.update_variable(0, -1)
        assert state.variable_values[0] == -1


def test_for_launch_refuses_bad_values_like_the_constructor() -> None:
    layout = KernelArgLayout.buffers_then_variables(1, 1)
    with pytest.raises(ValueError, match=r"variable value 0 must be an int in \[-2147483648, 2147483647\]"):
        HCQArgsState.for_launch(layout, (0x1000,), (2**31,))
    with pytest.raises(ValueError, match="takes 1 buffer"):
        HCQArgsState.for_launch(layout, (0x1000, 0x2000), (1,))
