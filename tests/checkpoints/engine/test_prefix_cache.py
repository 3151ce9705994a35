"""Prefix reuse and batched prefill change nothing but speed: for every registered
attention variant (fp32), a prompt prefilled from a cached prefix gives the logits
of an uncached prefill within 1e-4 and the engine's greedy tokens equal uncached
one-at-a-time decoding; short prompts prefilled in one padded batch give what each
gives alone. Also: LRU eviction under a tiny budget, the cache is off for dynamic
NTK, and requests run in reuse order come back in request order."""

from __future__ import annotations

import pytest
import torch

from checkpoints.attention.registry import available_variants
from checkpoints.config import RopeScaling
from checkpoints.engine import Engine, GenerateRequest, LoglikelihoodRequest
from checkpoints.engine.core import default_draft_tokens
from checkpoints.engine.prefix_cache import PrefixCache, foreseen_reuse, reuse_order
from checkpoints.engine.scheduler import Scheduler
from checkpoints.generate import greedy_generate, loglikelihood, prefill
from checkpoints.kv.block_pool import DEFAULT_BLOCK_SIZE, BlockPool
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.tokenizer import ByteTokenizer
from tests.helpers import variant_model as _model

TOK = ByteTokenizer()
HAYSTACK = 70
DEPTHS = (55, 12, 40, 0, 70, 40)  # one repeated: a prompt served whole from the cache


def _needle_prompts(seed: int = 0) -> list[list[int]]:
    """One haystack with a short needle at several depths (a passkey/needle grid in small)."""
    g = torch.Generator().manual_seed(seed)
    hay = torch.randint(3, 259, (HAYSTACK,), generator=g).tolist()
    needle = [7, 8, 9, 10]
    return [[1, *hay[:d], *needle, *hay[d:]] for d in DEPTHS]


def _single(model, req: GenerateRequest):
    return greedy_generate(model, TOK, req.prompt_ids, req.max_new_tokens, stop_at_eos=False)


CASES = [(v, "torch") for v in available_variants()] + [("softmax", "reference"), ("softmax", "triton"),
                                                         ("tda", "triton")]


@pytest.mark.parametrize("variant,backend", CASES, ids=lambda x: str(x))
def test_prefill_from_a_cached_prefix_equals_a_full_prefill(variant, backend):
    model = _model(variant)
    model.backend = backend
    prompts = _needle_prompts()
    pool = BlockPool(len(model.layers), block_size=4)  # small blocks: hits end inside blocks and at their ends
    cache = PrefixCache(1 << 30, pool)
    with torch.inference_mode():
        for ids in prompts:
            kv = cache.load(ids[:-1])  # the cached blocks by reference
            got = prefill(model, ids[kv.length:], kv)
            cache.insert(ids, kv)
            fresh = model.new_cache()
            want = prefill(model, ids, fresh)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
            # The next step reads the cached keys too.
            nxt = torch.tensor([[int(want.argmax())]])
            step_got, _ = model(nxt, kv, logits_for="last")
            step_want, _ = model(nxt, fresh, logits_for="last")
            torch.testing.assert_close(step_got, step_want, atol=1e-4, rtol=1e-4)
            kv.release()
    assert cache.match(prompts[0]) == len(prompts[0])
    cache.clear()
    assert pool.used_blocks == 0  # the last holder gone, every block is back


@pytest.mark.parametrize("variant", available_variants())
def test_cached_engine_generates_what_uncached_decoding_generates(variant):
    model = _model(variant, seed=1)
    model.backend = "torch"
    reqs = [GenerateRequest(p, max_new_tokens=n, stop_at_eos=False)
            for p, n in zip(_needle_prompts(seed=1), (4, 7, 1, 5, 3, 6), strict=True)]
    engine = Engine(model, TOK, max_batch=3, batch_prefill_tokens=0)
    got = engine.generate_until(reqs)
    for req, gen in zip(reqs, got, strict=True):
        assert gen.token_ids == _single(model, req).token_ids
    # Every prompt after the first reuses the haystack up to its needle; the repeated one all but its last token.
    assert engine.stats.reused_tokens >= sum(sorted(DEPTHS)[:-1])
    assert 0 < engine.stats.reused_fraction < 1


@pytest.mark.parametrize("variant", available_variants())
def test_batched_prefill_equals_one_at_a_time(variant):
    model = _model(variant, seed=2)
    model.backend = "torch"
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 259, (n,), generator=g).tolist() for n in (5, 23, 1, 17, 23, 9)]
    reqs = [GenerateRequest(p, max_new_tokens=4, stop_at_eos=False) for p in prompts]
    engine = Engine(model, TOK, prefix_cache=False, batch_prefill_tokens=32)
    for req, gen in zip(reqs, engine.generate_until(reqs), strict=True):
        assert gen.token_ids == _single(model, req).token_ids
    ll = [LoglikelihoodRequest(p, q) for p, q in zip(prompts, prompts[1:] + prompts[:1], strict=True) if q]
    for req, (lp, greedy) in zip(ll, engine.loglikelihood(ll), strict=True):
        want_lp, want_greedy = loglikelihood(model, req.context_ids, req.continuation_ids)
        assert lp == pytest.approx(want_lp, abs=1e-4) and greedy == want_greedy


def test_cached_loglikelihood_equals_the_single_function():
    model = _model("softmax", seed=4)
    prompts = _needle_prompts(seed=4)
    reqs = [LoglikelihoodRequest(p[:-5], p[-5:]) for p in prompts] + [LoglikelihoodRequest(prompts[0][:-5], (3, 4))]
    engine = Engine(model, TOK, batch_prefill_tokens=0)
    for req, (lp, greedy) in zip(reqs, engine.loglikelihood(reqs), strict=True):
        want_lp, want_greedy = loglikelihood(model, req.context_ids, req.continuation_ids)
        assert lp == pytest.approx(want_lp, abs=1e-4) and greedy == want_greedy
    assert engine.stats.reused_tokens > 0


def test_lru_eviction_keeps_recent_prefixes_under_the_budget():
    model = _model("softmax")
    a, b, c = _needle_prompts()[:3]
    pool = BlockPool(len(model.layers), block_size=1)  # blocks of one token: the budget counts tokens
    with torch.inference_mode():
        kvs = {}
        for name, ids in (("a", a), ("b", b), ("c", c)):
            kvs[name] = PagedSeq(pool)
            prefill(model, ids, kvs[name])
    one = pool.bytes_per_token()
    cache = PrefixCache(len(a) * one + 5 * one, pool)  # a whole prompt and a little more
    cache.insert(a, kvs["a"])
    cache.insert(b, kvs["b"])  # shares a's first tokens, then over budget: a's tail (older) goes
    assert cache.nbytes <= cache.capacity
    assert cache.match(b) == len(b) and cache.match(a) < len(a)
    cache.load(b).release()  # b used again
    cache.insert(c, kvs["c"])
    assert cache.nbytes <= cache.capacity and cache.match(c) == len(c)
    cache.insert(a, kvs["a"], limit=0)
    assert cache.nbytes == 0 and cache.match(a) == 0
    for kv in kvs.values():
        kv.release()
    assert pool.used_blocks == 0


def test_tiny_budget_evicts_but_changes_no_output():
    model = _model("softmax", seed=5)
    reqs = [GenerateRequest(p, max_new_tokens=5, stop_at_eos=False) for p in _needle_prompts(seed=5)]
    want = [g.token_ids for g in Engine(model, TOK, prefix_cache=False).generate_until(reqs)]
    probe = model.new_cache()
    with torch.inference_mode():
        prefill(model, [1], probe)
    budget = 3 * (HAYSTACK + 12) * probe.bytes_per_token()  # the prefix cache holds ~1.5 prompts
    engine = Engine(model, TOK, memory_budget=budget, batch_prefill_tokens=0)
    assert [g.token_ids for g in engine.generate_until(reqs)] == want
    assert engine.prefix.nbytes <= engine.prefix.capacity
    assert engine.prefix.cached_tokens < sum(map(len, _needle_prompts(seed=5)))


def test_the_prefix_cache_gives_way_to_the_decoding_batch():
    """A budget of five prompts' widths: the cache (up to half of it) would leave room for two
    decoding rows; it gives way down to the last prompt's entries, so four rows decode together,
    in as few steps as without the cache, and the tokens are the same."""
    model = _model("softmax", seed=6)
    prompts = _needle_prompts(seed=6)[:4]
    reqs = [GenerateRequest(p, max_new_tokens=8, stop_at_eos=False) for p in prompts]
    probe = model.new_cache()
    with torch.inference_mode():
        prefill(model, [1], probe)
    # a row's reserve: prompt, new tokens and a verifying step's overrun, in whole blocks (Scheduler.reserve)
    width = Scheduler(1, 1, None, 0, DEFAULT_BLOCK_SIZE, default_draft_tokens(model)).reserve(
        max(reqs, key=lambda r: len(r.prompt_ids)))
    budget = 5 * width * probe.bytes_per_token()
    steps, step = [0], model.decode_step

    def counted(*args, **kwargs):
        steps[0] += 1
        return step(*args, **kwargs)

    model.decode_step = counted
    try:
        runs = {}
        for cache in (False, True):
            steps[0] = 0
            engine = Engine(model, TOK, memory_budget=budget, batch_prefill_tokens=0, prefix_cache=cache)
            runs[cache] = ([g.token_ids for g in engine.generate_until(reqs)], steps[0], engine.stats.reused_tokens)
    finally:
        del model.decode_step
    assert runs[True][0] == runs[False][0] and runs[True][1] == runs[False][1] == 7  # 4 rows in one batch
    assert runs[True][2] > 0  # and the prompts still shared their haystack


def test_dynamic_ntk_turns_prefix_reuse_and_batched_prefill_off():
    model = _model("softmax", max_position_embeddings=16, rope_scaling=RopeScaling(type="dynamic", factor=2.0))
    engine = Engine(model, TOK, batch_prefill_tokens=64)
    assert engine.prefix is None and engine.batch_prefill_tokens == 0
    reqs = [GenerateRequest(p, max_new_tokens=3, stop_at_eos=False) for p in _needle_prompts()[:3]]
    for req, gen in zip(reqs, engine.generate_until(reqs), strict=True):
        assert gen.token_ids == _single(model, req).token_ids
    assert engine.stats.reused_tokens == 0


def test_reuse_order_runs_shared_prefixes_together_and_results_keep_request_order():
    g = torch.Generator().manual_seed(106)
    other = torch.randint(3, 259, (60,), generator=g).tolist()
    prompts = _needle_prompts(seed=6)
    mixed = [prompts[0], [1, *other], prompts[1], [1, *other[:30], 9], prompts[2]]
    order = reuse_order(mixed)
    assert sorted(order) == list(range(5))
    ranks = sorted(order.index(i) for i in (1, 3))
    assert ranks[1] - ranks[0] == 1  # the two prompts of the other haystack are neighbours
    model = _model("softmax", seed=6)
    reqs = [GenerateRequest(p, max_new_tokens=n, stop_at_eos=False) for p, n in zip(mixed, (2, 5, 3, 1, 4), strict=True)]
    seen: list[int] = []
    got = Engine(model, TOK, max_batch=1, batch_prefill_tokens=0).generate_until(reqs, done=lambda i, _: seen.append(i))
    assert seen == order  # one row at a time: finished in run order
    assert [len(x.token_ids) for x in got] == [2, 5, 3, 1, 4]
    for req, gen in zip(reqs, got, strict=True):
        assert gen.token_ids == _single(model, req).token_ids


def test_turning_the_prefix_cache_off():
    engine = Engine(_model("softmax"), TOK, prefix_cache=False)
    assert engine.prefix is None
    engine.generate_until([GenerateRequest(p, max_new_tokens=1) for p in _needle_prompts()])
    assert engine.stats.reused_tokens == 0 and engine.stats.prompt_tokens == sum(map(len, _needle_prompts()))


def test_shared_prompts_reuse_the_cache_and_unique_short_ones_prefill_in_a_batch():
    model = _model("gated", seed=7)
    g = torch.Generator().manual_seed(8)
    unique = [torch.randint(3, 259, (n,), generator=g).tolist() for n in (9, 30, 17)]
    prompts = [*_needle_prompts(seed=7), *unique]
    reqs = [GenerateRequest(p, max_new_tokens=3, stop_at_eos=False) for p in prompts]
    engine = Engine(model, TOK, batch_prefill_tokens=100)
    plan = engine.scheduler.plan([r.prompt_ids for r in reqs])
    order, batched = list(plan.waiting), plan.batched
    # Batched: the unique prompts and the needles at depths 0 and 12 (they share under half their
    # tokens); last, longest first. Depths 40, 40, 55 and 70 share more and reuse the cache.
    assert batched == {1, 3, 6, 7, 8} and order[-5:] == [1, 3, 7, 8, 6]
    for req, gen in zip(reqs, engine.generate_until(reqs), strict=True):
        assert gen.token_ids == _single(model, req).token_ids
    assert engine.stats.reused_tokens >= 41 + 56  # the repeated depth-40 prompt and one of 55/70


def test_a_hit_references_the_cached_blocks_and_copies_at_most_a_partial_one():
    """No model: rows of random entries. A prefix hit's table is the cached blocks (one
    more reference each); only a hit ending inside a block copies that block."""
    pool = BlockPool(2, block_size=4)
    cache = PrefixCache(1 << 30, pool)
    g = torch.Generator().manual_seed(0)
    ids = list(range(1, 19))  # 18 tokens: 4 full blocks and a partial one
    row = PagedSeq.from_entries(pool, [{"k": torch.randn(1, 2, 18, 3, generator=g),
                                        "v": torch.randn(1, 2, 18, 3, generator=g)} for _ in range(2)])
    cache.insert(ids, row)
    row.release()
    held = pool.used_blocks
    whole = cache.load(ids[:16])  # ends at a block's end: nothing copied
    assert pool.used_blocks == held and whole.table.blocks == cache.load(ids[:16]).table.blocks
    part = cache.load(ids[:14])  # ends inside block 3: that one block copied
    assert pool.used_blocks == held + 1 and part.table.blocks[:3] == whole.table.blocks[:3]
    assert all(torch.equal(a, b) for x, y in zip(part.entries(), whole.entries(), strict=True)
               for a, b in ((x[n], y[n][:, :, :14]) for n in x))
    other = cache.load([*ids[:6], 99, 98])  # leaves the path inside block 1
    assert other.length == 6 and other.table.blocks[0] == whole.table.blocks[0]


def test_the_engine_gives_every_block_back():
    """After generate_until and loglikelihood only the prefix cache holds blocks; cleared, none."""
    model = _model("softmax", seed=7)
    prompts = _needle_prompts(seed=7)
    engine = Engine(model, TOK, max_batch=3, batch_prefill_tokens=8)
    engine.generate_until([GenerateRequest(p, max_new_tokens=5, stop_at_eos=False) for p in prompts] +
                          [GenerateRequest([5, 6], max_new_tokens=3, stop_at_eos=False)])
    engine.loglikelihood([LoglikelihoodRequest(p[:-3], p[-3:]) for p in prompts])
    held = {b for node in engine.prefix._nodes() for b in node.blocks}
    assert engine.pool.used_blocks == len(held) > 0
    engine.clear_prefix_cache()
    assert engine.pool.used_blocks == 0


def test_foreseen_reuse_counts_what_is_cached_or_shared_with_the_prompt_before():
    """A call's forecast for the ETA: each prompt's longest prefix cached now or shared with the
    prompt run before it, never its last token (it always runs)."""
    cache = PrefixCache(1 << 20, BlockPool(2, block_size=4))  # empty: what the prompts share says it
    a, b, c = [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 9, 9], [7, 7, 7]
    assert foreseen_reuse([a, b, c], [0, 1, 2], cache) == 4  # b shares 1 2 3 4 with a
    assert foreseen_reuse([a, a], [0, 1], cache) == 5  # all of a but its last token
    assert foreseen_reuse([c, a], [0, 1], cache) == 0
