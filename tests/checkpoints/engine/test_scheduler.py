"""checkpoints/engine/scheduler.py without a model: the run order, admission within the row cap
and the memory budget, padded groups of short prompts within their token bound."""

from __future__ import annotations

from checkpoints.engine.scheduler import BATCH_PREFILL_MAX_TOKENS, Scheduler
from checkpoints.kv.block_pool import BlockPool
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.requests import GenerateRequest


def reqs(*lengths: int, new: int = 4) -> list[GenerateRequest]:
    return [GenerateRequest(prompt_ids=tuple(range(1, n + 1)), max_new_tokens=new) for n in lengths]


def test_without_a_prefix_cache_long_prompts_run_first_and_short_ones_last_in_groups() -> None:
    s = Scheduler(memory_budget=1 << 30, max_batch=8, prefix=None, batch_prefill_tokens=16)
    requests = reqs(10, 100, 12, 50, 3)
    plan = s.plan([r.prompt_ids for r in requests])
    assert list(plan.waiting) == [1, 3, 2, 0, 4] and plan.batched == {0, 2, 4}
    first, reserved = s.next_group(plan, requests, rows=0, reserved=0, bytes_per_token=1)
    assert first == [1] and reserved == 104  # a long prompt prefills alone
    group, reserved = s.next_group(plan, requests, rows=1, reserved=104, bytes_per_token=1)
    assert group == [3] and reserved == 104 + 54  # each row reserves its own length, not the widest
    assert s.next_group(plan, requests, rows=2, reserved=158, bytes_per_token=1) == ([2, 0, 4], 158 + 16 + 14 + 7)


def test_admission_stops_at_the_row_cap_and_at_the_memory_budget() -> None:
    requests = reqs(100, 100, 100, 100)
    capped = Scheduler(memory_budget=1 << 30, max_batch=2, prefix=None, batch_prefill_tokens=0)
    plan = capped.plan([r.prompt_ids for r in requests])
    assert capped.next_group(plan, requests, rows=2, reserved=208, bytes_per_token=1) == ([], 208)
    # 3 rows of 104 tokens at 10 bytes a token fit 3,200 bytes; a fourth does not
    tight = Scheduler(memory_budget=3200, max_batch=8, prefix=None, batch_prefill_tokens=0)
    plan = tight.plan([r.prompt_ids for r in requests])
    assert tight.next_group(plan, requests, rows=2, reserved=208, bytes_per_token=10)[0] == [0]
    assert tight.next_group(plan, requests, rows=3, reserved=312, bytes_per_token=10)[0] == []
    assert len(plan.waiting) == 3  # what was not admitted waits


def test_rows_reserve_whole_blocks_of_their_own_length() -> None:
    s = Scheduler(memory_budget=1 << 30, max_batch=8, prefix=None, batch_prefill_tokens=0, block_size=16)
    assert [s.reserve(r) for r in reqs(1, 12, 13, 100)] == [16, 16, 32, 112]


def test_an_admitted_row_takes_its_reserve_from_the_pool_in_one_call() -> None:
    """`allocate` hands a row at its prefill the blocks admission counted for it (`reserve`,
    a verifying step's overrun included), from the pool the rows live in."""
    pool = BlockPool(1, block_size=16)
    s = Scheduler(memory_budget=1 << 30, max_batch=8, prefix=None, batch_prefill_tokens=0, block_size=16,
                  draft_tokens=5)
    for req in reqs(1, 20, 27, 100):
        seq = s.allocate(PagedSeq(pool), req)
        assert len(seq.table.blocks) * pool.block_size == s.reserve(req) >= len(req.prompt_ids) + 4 + 5
        seq.release()
    assert pool.used_blocks == 0


def test_short_groups_stay_within_the_padded_token_bound() -> None:
    s = Scheduler(memory_budget=1 << 30, max_batch=64, prefix=None, batch_prefill_tokens=4096)
    sizes = [4000, 3000, 3000, 2000, 10, 10]
    groups = s.short_groups(sizes)
    assert [i for g in groups for i in g] == list(range(len(sizes)))
    for g in groups:
        assert len(g) * max(sizes[i] for i in g) <= BATCH_PREFILL_MAX_TOKENS
    assert groups[0] == [0, 1, 2, 3]  # 4 rows x 4,000 tokens = 16,000: one forward
