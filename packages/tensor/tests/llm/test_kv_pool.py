"""The paged KV pool's bookkeeping (kiln.tensor.llm.kv_pool) against a simulated device memory: each pool row holds
the whole token prefix its keys and values were computed from, so a sequence reading its rows through its block
table must find its own prefixes there, whatever other sequences shared, copied, released or evicted."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor.llm.kv_pool import SCRATCH_BLOCK, BlockCopy, BlockPool, BlockTable, KVPoolExhausted

Memory = dict[int, tuple[int, ...]]  # pool row -> the tokens up to and including the one whose values it holds


def write(memory: Memory, table: BlockTable, tokens: list[int], start: int, new: list[int]) -> None:
    """The device side of a write: the copies first, then each new position's row (what a step stores)."""
    size = table.pool.block_size
    for copy in table.write(start, new):
        for offset in range(copy.rows):
            memory[copy.target * size + offset] = memory[copy.source * size + offset]
    for position in range(start, start + len(new)):
        memory[table.row(position)] = tuple(tokens[: position + 1])


def assert_reads_own(memory: Memory, table: BlockTable, tokens: list[int], window: int | None = None) -> None:
    first = 0 if window is None else max(table.length - window + 1, 0)  # the rows the next query still sees
    for position in range(first, table.length):
        assert memory.get(table.row(position)) == tuple(tokens[: position + 1]), position


def test_two_sequences_sharing_a_system_prompt_store_it_once() -> None:
    pool, memory = BlockPool(blocks=32, block_size=4), Memory()
    system = list(range(100, 110))  # 10 tokens: 2 full blocks and 2 rows of a third
    first_prompt, second_prompt = [*system, 1, 2, 3], [*system, 7, 8]
    first, reused = pool.open(first_prompt, 20)
    assert reused == 0
    write(memory, first, first_prompt, 0, first_prompt)
    assert pool.held == 4  # ceil(13 / 4)
    second, reused = pool.open(second_prompt, 20)
    assert reused == len(system)
    assert second.blocks[:2] == first.blocks[:2] and second.blocks[2] == first.blocks[2]
    copies = second.write(reused, second_prompt[reused:])
    # the third block is shared and written after its 2 system rows: copied first, the two full blocks stay shared
    shared, copied = first.blocks[2], second.blocks[2]
    assert shared is not None and copied is not None and copies == [BlockCopy(shared, copied, 2)]
    for copy in copies:
        for offset in range(copy.rows):
            memory[copy.target * 4 + offset] = memory[copy.source * 4 + offset]
    for position in range(reused, len(second_prompt)):
        memory[second.row(position)] = tuple(second_prompt[: position + 1])
    assert pool.held == 4 + 1  # the system prompt's 2 full blocks once; a third block each
    assert [pool.references[block] for block in first.blocks[:2] if block is not None] == [2, 2]
    assert_reads_own(memory, first, first_prompt)
    assert_reads_own(memory, second, second_prompt)


def test_a_block_its_holder_still_writes_into_is_not_shared() -> None:
    """A prompt arriving while another sequence is between two chunks of its prefill (or decoding) takes its full
    blocks, not the one it is writing: that sequence was promised no copy of its own block."""
    pool, memory = BlockPool(blocks=8, block_size=4), Memory()
    first_tokens = [1, 2, 3, 4, 5, 6]  # a full block and 2 rows of a second
    first, _ = pool.open(first_tokens, 8)
    write(memory, first, first_tokens, 0, first_tokens)
    second_tokens = [1, 2, 3, 4, 5, 6, 9]
    second, reused = pool.open(second_tokens, 8)
    assert reused == 4 and second.blocks == first.blocks[:1]
    write(memory, second, second_tokens, reused, second_tokens[reused:])
    first_tokens += [7, 8]
    write(memory, first, first_tokens, 6, [7, 8])  # its own block still: no copy, within its promise
    assert_reads_own(memory, first, first_tokens)
    assert_reads_own(memory, second, second_tokens)
    first.close()
    third_tokens = [1, 2, 3, 4, 5, 6, 7, 0]
    _, reused = pool.open(third_tokens, 9)  # nobody holds the second block now: it is taken whole
    assert reused == 7


def test_the_second_turn_reuses_the_conversation() -> None:
    pool, memory = BlockPool(blocks=16, block_size=4), Memory()
    prompt, answer = [5, 6, 7, 8, 9, 10], [11, 12, 13]
    turn, _ = pool.open(prompt, 32)
    conversation = [*prompt, *answer]
    write(memory, turn, conversation, 0, prompt)
    for position in range(len(prompt), len(conversation) - 1):  # the last answer token is never fed back
        write(memory, turn, conversation, position, [conversation[position]])
    turn.close()
    assert pool.held == 0 and len(pool.cached) == 2
    second_prompt = [*conversation, 20, 21]
    second, reused = pool.open(second_prompt, 32)
    assert reused == len(conversation) - 1  # every row the first turn wrote
    write(memory, second, second_prompt, reused, second_prompt[reused:])
    assert_reads_own(memory, second, second_prompt)
    assert pool.held == 3


def test_a_pool_smaller_than_the_demand_refuses_then_admits() -> None:
    pool = BlockPool(blocks=9, block_size=4)  # 8 usable blocks
    first, _ = pool.open([1, 2, 3], most_tokens=20)  # promised 5 blocks
    with pytest.raises(KVPoolExhausted, match=r"needs 4 more blocks of 4 rows, 3 of 8 are free"):
        pool.open([4, 5, 6], most_tokens=16)
    first.close()
    second, _ = pool.open([4, 5, 6], most_tokens=16)
    assert pool.available == 8 - 4
    with pytest.raises(KVPoolExhausted, match="promised"):
        second.write(0, list(range(17)))


def test_a_sliding_window_frees_the_blocks_behind_it() -> None:
    pool, memory = BlockPool(blocks=8, block_size=4), Memory()
    tokens = list(range(1, 41))
    table, _ = pool.open(tokens[:1], most_tokens=40, window=6)
    assert table.reserved == 3  # ceil(6 / 4) + 1: the window spans at most 3 blocks
    for position in range(40):
        write(memory, table, tokens, position, [tokens[position]])
        table.slide(position + 1, 6)  # the next query sits at position + 1
        assert pool.held <= 3
        assert_reads_own(memory, table, tokens, window=6)
    assert sum(block is None for block in table.blocks) == 8  # 10 blocks written, 8 wholly behind the window
    assert pool.held == 2


def test_a_sliding_window_prompt_takes_only_the_blocks_its_window_sees() -> None:
    """The second turn of a sliding-window conversation reuses the cached blocks the window of its next position
    sees; the blocks before them are not needed (here the first one is even evicted: a full-attention match would
    find nothing)."""
    pool, memory = BlockPool(blocks=8, block_size=4), Memory()  # 7 usable blocks
    tokens, window = list(range(1, 31)), 6
    first, reused = pool.open(tokens[:20], most_tokens=20, window=window, largest_write=4)
    for start in range(0, 20, 4):  # a prefill in chunks of 4, sliding after each
        write(memory, first, tokens, start, tokens[start : start + 4])
        first.slide(start + 4, window)
    assert reused == 0 and first.blocks[:3] == [None, None, None]
    first.close()
    other_tokens = [90, 91, 92, 93, 94, 95, 96, 97, 98]
    other, _ = pool.open(other_tokens, most_tokens=12)  # takes the 2 unused blocks, then evicts the oldest cached
    write(memory, other, other_tokens, 0, other_tokens)
    assert pool.match(tokens[:26])[1] == 0  # from the start: the first block is gone
    second, reused = pool.open(tokens[:26], most_tokens=30, window=window, largest_write=4)
    assert reused == 20  # positions 15 .. 19 are what position 20 sees: blocks 3 and 4
    assert second.blocks[:3] == [None, None, None] and second.blocks[3:] == first_blocks(pool, tokens, 3, 5)
    for start in range(20, 30, 4):
        write(memory, second, tokens, start, tokens[start : min(start + 4, 30)])
        second.slide(min(start + 4, 30), window)
        assert_reads_own(memory, second, tokens, window=window)
    assert_reads_own(memory, other, other_tokens)


def first_blocks(pool: BlockPool, tokens: list[int], begin: int, end: int) -> list[int]:
    """The cached blocks holding blocks begin .. end - 1 of `tokens` (by their tokens: every block is full)."""
    size = pool.block_size
    wanted = [tokens[index * size : (index + 1) * size] for index in range(begin, end)]
    return [next(block for block in range(pool.blocks) if pool.tokens[block] == want) for want in wanted]


def test_cached_blocks_are_evicted_least_recently_used_first() -> None:
    pool = BlockPool(blocks=4, block_size=2)  # 3 usable blocks
    for prompt in ([1, 2, 9], [3, 4, 9], [5, 6, 9]):
        table, _ = pool.open(prompt, 3)
        table.write(0, prompt[:2])
        table.close()
    table, reused = pool.open([1, 2, 7], 3)  # takes [1, 2]'s block again: it becomes the most recent
    assert reused == 2
    table.close()
    table, _ = pool.open([8, 8, 8, 8, 8], 5)
    table.write(0, [8, 8, 8, 8])  # needs 2 blocks: [3, 4]'s and [5, 6]'s go, [1, 2]'s stays
    assert [pool.match(p)[1] for p in ([1, 2, 0], [3, 4, 0], [5, 6, 0])] == [2, 0, 0]


def test_a_block_table_maps_released_positions_to_the_scratch_block() -> None:
    pool = BlockPool(blocks=8, block_size=2)
    table, _ = pool.open([1, 2, 3, 4, 5], 6, window=2, largest_write=5)
    table.write(0, [1, 2, 3, 4, 5])
    table.slide(5, 2)
    assert table.blocks[0] is None and table.blocks[1] is None
    assert table.rows(5).tolist()[:4] == [SCRATCH_BLOCK * 2, SCRATCH_BLOCK * 2 + 1] * 2
    with pytest.raises(IndexError, match="released"):
        table.row(0)


def test_bad_pool_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="blocks must be an int >= 2"):
        BlockPool(blocks=1, block_size=4)
    with pytest.raises(ValueError, match="block_size must be an int >= 1"):
        BlockPool(blocks=4, block_size=0)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_every_sequence_reads_its_own_rows(data: st.DataObject) -> None:
    """Random opens (prompts over 3 tokens, so that they share beginnings), decodes and closes: every open
    sequence reads its own prefixes through its table, reference counts equal the tables holding a block, and
    nothing is promised twice."""
    size = data.draw(st.integers(1, 4))
    pool, memory = BlockPool(blocks=data.draw(st.integers(4, 24)), block_size=size), Memory()
    live: list[tuple[BlockTable, list[int], int]] = []  # table, its tokens, its most positions
    for _ in range(data.draw(st.integers(1, 25))):
        action = data.draw(st.sampled_from(["open", "decode", "close"]))
        if action == "open":
            prompt = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=12))
            most = len(prompt) + data.draw(st.integers(0, 6))
            try:
                table, reused = pool.open(prompt, most)
            except KVPoolExhausted:
                continue
            assert reused == pool.match(prompt)[1] or reused <= len(prompt) - 1
            write(memory, table, prompt, reused, prompt[reused:])
            live.append((table, list(prompt), most))
        elif action == "decode" and live:
            table, tokens, most = live[data.draw(st.integers(0, len(live) - 1))]
            if table.length < most:
                tokens.append(data.draw(st.integers(0, 2)))
                write(memory, table, tokens, table.length, tokens[table.length :])
        elif action == "close" and live:
            table, _, _ = live.pop(data.draw(st.integers(0, len(live) - 1)))
            table.close()
        for table, tokens, _ in live:
            assert_reads_own(memory, table, tokens)
        holders = [0] * pool.blocks
        for table, _, _ in live:
            for block in table.blocks:
                assert block is not None
                holders[block] += 1
        assert holders == pool.references
        assert pool.promised == sum(table.reserved for table, _, _ in live) and pool.available >= 0


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_every_sliding_sequence_reads_its_own_window(data: st.DataObject) -> None:
    """As above over a sliding window: tables take the cached blocks their window sees (`match` with the window),
    slide after every write, and every open sequence reads its own prefixes over the positions its next query sees."""
    size, window = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 6))
    pool, memory = BlockPool(blocks=data.draw(st.integers(4, 24)), block_size=size), Memory()
    live: list[tuple[BlockTable, list[int], int]] = []
    for _ in range(data.draw(st.integers(1, 25))):
        action = data.draw(st.sampled_from(["open", "decode", "close"]))
        if action == "open":
            prompt = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=12))
            most = len(prompt) + data.draw(st.integers(0, 6))
            try:
                table, reused = pool.open(prompt, most, window=window, largest_write=len(prompt))
            except KVPoolExhausted:
                continue
            assert reused == pool.match(prompt, window)[1] or reused <= len(prompt) - 1
            write(memory, table, prompt, reused, prompt[reused:])
            table.slide(table.length, window)
            live.append((table, list(prompt), most))
        elif action == "decode" and live:
            table, tokens, most = live[data.draw(st.integers(0, len(live) - 1))]
            if table.length < most:
                tokens.append(data.draw(st.integers(0, 2)))
                write(memory, table, tokens, table.length, tokens[table.length :])
                table.slide(table.length, window)
        elif action == "close" and live:
            table, _, _ = live.pop(data.draw(st.integers(0, len(live) - 1)))
            table.close()
        for table, tokens, _ in live:
            assert_reads_own(memory, table, tokens, window=window)
        holders = [0] * pool.blocks
        for table, _, _ in live:
            for block in table.blocks:
                if block is not None:
                    holders[block] += 1
        assert holders == pool.references
        assert pool.promised == sum(table.reserved for table, _, _ in live) and pool.available >= 0
