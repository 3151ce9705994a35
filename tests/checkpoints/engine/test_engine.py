"""The batched engine gives what one-at-a-time decoding gives: the same greedy
tokens for every attention variant and backend, decode-step logits within 1e-4
(fp32) of single-row steps, the same log-likelihoods; and its scheduling
(memory budget, stop rules, rows leaving and joining) keeps request order."""

from __future__ import annotations

import pytest
import torch

from checkpoints.attention.registry import available_variants
from checkpoints.engine import Engine, GenerateRequest, LoglikelihoodRequest, RollingRequest
from checkpoints.generate import greedy_generate, loglikelihood, prefill, token_logprobs
from checkpoints.kv.block_pool import BlockPool
from checkpoints.kv.paged_batch import PagedBatch
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.model import Decoder
from checkpoints.tokenizer import ByteTokenizer
from tests.helpers import variant_model as _model

TOK = ByteTokenizer()
# Triton models run compiled on a GPU when there is one, interpreted on CPU otherwise.
TRITON_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
PROMPT_LENGTHS = (3, 29, 11, 46, 1, 20)


def _prompts(seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 259, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def _single(model: Decoder, req: GenerateRequest):
    return greedy_generate(model, TOK, req.prompt_ids, req.max_new_tokens, stop=req.stop,
                           stop_at_eos=req.stop_at_eos, min_new_tokens=req.min_new_tokens,
                           suppress_ids=req.suppress_ids, stop_ids=req.stop_ids)


CASES = [(v, "torch", {}) for v in available_variants()] + [
    ("softmax", "reference", {}),
    ("softmax", "torch", {"sliding_window": 8}),
    ("softmax", "torch", {"position": "alibi"}),
    ("ssmax", "torch", {"position": "alibi"}),
    ("entmax", "torch", {"position": "alibi"}),
    ("cog", "torch", {"position": "nape"}),
    # Triton (interpreted on CPU): the decode kernel takes each row's position (softmax, diff,
    # cog with NAPE, a window); ssmax and the non-softmax kernels run row by row.
    ("softmax", "triton", {}),
    ("softmax", "triton", {"sliding_window": 8}),
    ("diff", "triton", {}),
    ("cog", "triton", {"position": "nape"}),
    ("ssmax", "triton", {}),
    ("tda", "triton", {}),
    ("softpick", "triton", {}),
]


def _on_device(model: Decoder, backend: str) -> Decoder:
    model = model.to(TRITON_DEVICE if backend == "triton" else "cpu")
    model.backend = backend
    return model


@pytest.mark.integration  # every variant and backend decoded twice: minutes in all
@pytest.mark.parametrize("variant,backend,config", CASES, ids=lambda x: str(x))
def test_batched_generation_equals_one_at_a_time(variant, backend, config):
    model = _on_device(_model(variant, **dict(config)), backend)
    reqs = [GenerateRequest(p, max_new_tokens=n, stop_at_eos=False)
            for p, n in zip(_prompts(), (3, 5, 1, 4, 6, 2), strict=True)]
    got = Engine(model, TOK, max_batch=4).generate_until(reqs)
    for req, gen in zip(reqs, got, strict=True):
        want = _single(model, req)
        assert gen.token_ids == want.token_ids
        assert gen.stop_reason == want.stop_reason and gen.prompt_tokens == want.prompt_tokens


def _ragged_batch(model: Decoder, prompts: list[list[int]], room: int) -> tuple[list, PagedBatch]:
    """Each prompt prefilled alone, and the engine's decoding batch of forks of them in a paged
    pool (`room` tokens each beyond its prompt; blocks of 8: rows end inside blocks and at their ends)."""
    pool = BlockPool(len(model.layers), model.device, block_size=8)
    singles, batch = [], PagedBatch(pool)
    for p in prompts:
        cache = model.new_cache()
        prefill(model, p, cache)
        singles.append(cache)
        seq = PagedSeq(pool)
        prefill(model, p, seq)
        batch.join(seq.fork(), reach=len(p) + room)
        seq.release()
    return singles, batch


# Interpreted Triton costs seconds a case: every Triton variant's decode step is checked where
# test_verifying_step_logits_match_single_rows ends (one step after rows kept different counts
# of drafted tokens); here softmax's stands for them on a batch straight from its prefills.
DECODE_CASES = [c for c in CASES if c[1] != "triton" or c == ("softmax", "triton", {})]


@pytest.mark.parametrize("variant,backend,config", DECODE_CASES, ids=lambda x: str(x))
def test_decode_step_logits_match_single_rows(variant, backend, config):
    """One step of a ragged batch (rows of different lengths) against each row stepped alone."""
    model = _on_device(_model(variant, **dict(config)), backend)
    prompts = _prompts(seed=2)
    nxt = torch.arange(7, 7 + len(prompts), device=model.device)
    with torch.inference_mode():
        singles, batch = _ragged_batch(model, prompts, room=4)
        logits = model.decode_step(nxt, batch)
        assert batch.lengths.tolist() == [len(p) + 1 for p in prompts]
        for i, cache in enumerate(singles):
            want, _ = model(nxt[i].view(1, 1), cache, logits_for="last")
            torch.testing.assert_close(logits[i], want[0, -1], atol=1e-4, rtol=1e-4)


def test_memory_budget_and_batch_limit_change_nothing_but_speed():
    model = _model("softmax")
    reqs = [GenerateRequest(p, max_new_tokens=6, stop_at_eos=False) for p in _prompts(seed=3)]
    want = [g.token_ids for g in Engine(model, TOK, max_batch=1).generate_until(reqs)]
    assert [g.token_ids for g in Engine(model, TOK, memory_budget=1).generate_until(reqs)] == want
    assert [g.token_ids for g in Engine(model, TOK, max_batch=64).generate_until(reqs)] == want


def test_a_batch_whose_verifying_steps_would_pass_the_memory_budget_is_not_admitted():
    """Issue 62's defect 1: a row holds its prompt, its new tokens and the positions a verifying
    step writes past them (draft_tokens) from its prefill, and admission counted only the
    first two: two rows fitting the budget by that count were admitted and held more of the
    pool than the budget. One count (`Scheduler.reserve`) for both: the second row waits."""
    model = _model("softmax")
    draft, bs = 16, 16
    reqs = [GenerateRequest(tuple(range(3, 3 + 26)), max_new_tokens=6, stop_at_eos=False),
            GenerateRequest(tuple(range(40, 40 + 26)), max_new_tokens=6, stop_at_eos=False)]  # 32 tokens each
    probe = Engine(model, TOK, prefix_cache=False, batch_prefill_tokens=0, draft_tokens=draft)
    want = [g.token_ids for g in probe.generate_until(reqs[:1])] + [g.token_ids for g in probe.generate_until(reqs[1:])]
    per_block = probe.pool.bytes_per_block()
    budget = 2 * (32 // bs) * per_block  # both rows' prompts and new tokens, not their verifying overrun
    engine = Engine(model, TOK, memory_budget=budget, prefix_cache=False, batch_prefill_tokens=0, draft_tokens=draft)
    assert [g.token_ids for g in engine.generate_until(reqs)] == want
    assert engine.pool.peak_blocks * per_block <= budget, (engine.pool.peak_blocks, budget // per_block)
    assert engine.scheduler.reserve(reqs[0]) == 32 + draft  # the count admission sums and the engine takes


def test_stop_strings_min_tokens_suppression_and_eos_per_row():
    model = _model("softmax", seed=4)
    prompts = _prompts(seed=5)
    free = Engine(model, TOK).generate_until([GenerateRequest(p, max_new_tokens=12, stop_at_eos=False)
                                              for p in prompts])
    reqs = []
    for p, g in zip(prompts, free, strict=True):
        text = g.text
        stop = (text[3:5],) if len(text) > 5 and text[3:5] else ()
        first = g.token_ids[0]
        reqs.append(GenerateRequest(p, max_new_tokens=12, stop=stop, min_new_tokens=2, suppress_ids=(first,)))
    for req, gen in zip(reqs, Engine(model, TOK, max_batch=3).generate_until(reqs), strict=True):
        want = _single(model, req)
        assert (gen.text, gen.token_ids, gen.stop_reason) == (want.text, want.token_ids, want.stop_reason)
        assert gen.token_ids[:1] != [req.suppress_ids[0]]


def test_stop_ids_end_a_row_and_are_blocked_before_min_new_tokens():
    """An end token besides EOS (LongBench's samsum: the id of "\n"): the row stops at it,
    leaves it out, and cannot choose it before `min_new_tokens`; batched equals one at a time."""
    model = _model("softmax", seed=4)
    prompts = _prompts(seed=5)
    free = Engine(model, TOK).generate_until([GenerateRequest(p, max_new_tokens=8, stop_at_eos=False)
                                              for p in prompts])
    reqs = [GenerateRequest(p, max_new_tokens=8, stop_at_eos=False, stop_ids=(g.token_ids[k],), min_new_tokens=m)
            for p, g, (k, m) in zip(prompts, free, [(2, 0), (0, 0), (0, 1), (3, 0), (1, 1), (0, 2)], strict=True)]
    for req, gen, g in zip(reqs, Engine(model, TOK, max_batch=3).generate_until(reqs), free, strict=True):
        want = _single(model, req)
        assert (gen.text, gen.token_ids, gen.stop_reason) == (want.text, want.token_ids, want.stop_reason)
        first_stop = g.token_ids.index(req.stop_ids[0])
        if first_stop >= req.min_new_tokens:  # stops where the free run first chose the end token
            assert gen.token_ids == g.token_ids[:first_stop] and gen.stop_reason == "eos"
        assert req.stop_ids[0] not in gen.token_ids[: req.min_new_tokens]


def test_done_callback_reports_every_request_once():
    model = _model("softmax")
    reqs = [GenerateRequest(p, max_new_tokens=k, stop_at_eos=False) for p, k in zip(_prompts(), range(6), strict=True)]
    seen: list[int] = []
    out = Engine(model, TOK, max_batch=2).generate_until(reqs, done=lambda i, gen: seen.append(i))
    assert sorted(seen) == list(range(6))
    assert [len(g.token_ids) for g in out] == list(range(6))


def test_loglikelihood_and_rolling_equal_the_single_functions():
    model = _model("softmax", seed=6)
    prompts = _prompts(seed=7)
    reqs = [LoglikelihoodRequest(prompts[1], prompts[2]), LoglikelihoodRequest(prompts[3], prompts[0]),
            LoglikelihoodRequest(prompts[1], prompts[5]), LoglikelihoodRequest(prompts[4], ()),
            LoglikelihoodRequest(prompts[4], prompts[2])]
    got = Engine(model, TOK).loglikelihood(reqs)
    for req, (lp, greedy) in zip(reqs, got, strict=True):
        want_lp, want_greedy = loglikelihood(model, req.context_ids, req.continuation_ids)
        assert lp == pytest.approx(want_lp, abs=1e-4) and greedy == want_greedy
    rolling = Engine(model, TOK).loglikelihood_rolling([RollingRequest(p) for p in prompts])
    for p, lp in zip(prompts, rolling, strict=True):
        torch.testing.assert_close(lp, token_logprobs(model, p))


def test_bad_requests_are_refused_when_made():
    with pytest.raises(ValueError, match="at least one prompt token"):
        GenerateRequest((), max_new_tokens=3)
    with pytest.raises(ValueError, match=">= 0"):
        GenerateRequest((1,), max_new_tokens=-1)
    with pytest.raises(ValueError, match="context token"):
        LoglikelihoodRequest((), (5,))
    with pytest.raises(ValueError, match="max_batch"):
        Engine(_model("softmax"), TOK, max_batch=0)
    with pytest.raises(ValueError, match="positive number of bytes"):
        Engine(_model("softmax"), TOK, memory_budget=0)


@pytest.mark.parametrize("window,position,softcap", [(None, "rope", None), (4, "rope", None), (None, "alibi", None),
                                                     (3, "nape", None), (4, "rope", 0.7), (None, "alibi", 0.7)])
def test_ragged_sdpa_step_equals_each_row_alone(window, position, softcap):
    """The one-call decode step of a plain softmax against the dense reference per row."""
    from checkpoints.attention.position import alibi_slopes
    from checkpoints.attention.softmax.chunked import ragged_decode_sdpa
    from checkpoints.attention.softmax.reference import softmax_reference

    g = torch.Generator().manual_seed(0)
    positions = torch.tensor([3, 10, 0, 7])
    q = torch.randn(4, 4, 1, 8, generator=g)
    k, v = torch.randn(2, 4, 2, 11, 8, generator=g)
    slopes = alibi_slopes(4, position)
    out = ragged_decode_sdpa(q, k, v, positions, scale=0.3, slopes=slopes, window=window, softcap=softcap)
    for b, p in enumerate(positions.tolist()):
        want, _ = softmax_reference(q[b:b + 1], k[b:b + 1, :, :p + 1], v[b:b + 1, :, :p + 1], p, 0.3, window, slopes,
                                    softcap)
        torch.testing.assert_close(out[b:b + 1], want, atol=1e-5, rtol=1e-5)


def test_a_decided_request_stops_where_its_predicate_first_holds():
    """`GenerateRequest.decided` ends its row at the first step where the decoded text satisfies
    it (stop reason "decided"); the other rows of the batch run on unchanged."""
    model = _model("softmax")
    prompts = _prompts()[:3]
    reqs = [GenerateRequest(p, max_new_tokens=10, stop_at_eos=False) for p in prompts]
    full = Engine(model, TOK, max_batch=4).generate_until(reqs)
    seen: list[str] = []

    def decided(text: str) -> bool:
        seen.append(text)
        return text == TOK.decode(full[1].token_ids[:4])

    reqs[1] = GenerateRequest(prompts[1], max_new_tokens=10, stop_at_eos=False, decided=decided)
    got = Engine(model, TOK, max_batch=4).generate_until(reqs)
    assert got[1].token_ids == full[1].token_ids[:4] and got[1].stop_reason == "decided"
    assert seen == [TOK.decode(full[1].token_ids[:k]) for k in range(1, 5)]
    assert [g.token_ids for g in (got[0], got[2])] == [full[0].token_ids, full[2].token_ids]
    assert {g.stop_reason for g in (got[0], got[2])} == {"length"}


def test_prefill_progress_counts_every_prompt_token_chunk_by_chunk():
    """`on_prefill` hears of each chunk as its layers finish (a long batch is never silent): every
    token once, never more than a chunk at a time, at least once per chunk."""
    model = _model("softmax")
    prompts = _prompts()
    # each prompt on its own, every token prefilled (the prefix cache would serve the loglikelihood context)
    engine = Engine(model, TOK, max_batch=4, chunk_size=8, batch_prefill_tokens=0, prefix_cache=False)
    heard: list[int] = []
    engine.on_prefill = heard.append
    finished: list[int] = []
    engine.generate_until([GenerateRequest(p, max_new_tokens=2) for p in prompts],
                          done=lambda i, _: finished.append(len(heard)))
    assert sum(heard) == sum(PROMPT_LENGTHS) and max(heard) <= 8
    assert len(heard) >= sum(-(-n // 8) for n in PROMPT_LENGTHS)
    assert finished and finished[0] > 1  # chunks were reported before the first request ended
    heard.clear()
    engine.loglikelihood([LoglikelihoodRequest(prompts[3], (5, 6))])
    assert sum(heard) == PROMPT_LENGTHS[3] - 1  # the context but its last token, which scores the continuation
    # Short prompts prefilled together in one padded forward are reported together, all of their tokens.
    batched = Engine(model, TOK, max_batch=4, chunk_size=8, batch_prefill_tokens=max(PROMPT_LENGTHS),
                     prefix_cache=False)
    heard.clear()
    batched.on_prefill = heard.append
    batched.generate_until([GenerateRequest(p, max_new_tokens=2) for p in prompts])
    assert sum(heard) == sum(PROMPT_LENGTHS)
    # Tokens the prefix cache serves count too: a finished task's progress reads all its prompt tokens.
    cached = Engine(model, TOK, max_batch=4, chunk_size=8, batch_prefill_tokens=0, prefix_cache=True)
    heard.clear()
    cached.on_prefill = heard.append
    twice = [p for p in prompts for _ in range(2)]
    cached.generate_until([GenerateRequest(p, max_new_tokens=2) for p in twice])
    assert cached.stats.reused_tokens > 0 and sum(heard) == 2 * sum(PROMPT_LENGTHS)


def test_prefix_cache_tokens_are_reported_apart_and_foreseen():
    """With `on_reused` set, tokens the prefix cache serves are told to it as each row is admitted
    (before the row's own tokens prefill), not to `on_prefill` (the ETA charges them no time);
    `on_foreseen` hears at the call's start how many it should serve, here all of them."""
    model = _model("softmax")
    prompts = _prompts()
    engine = Engine(model, TOK, max_batch=4, chunk_size=8, batch_prefill_tokens=0, prefix_cache=True)
    events: list[tuple[str, int]] = []
    engine.on_prefill = lambda n: events.append(("prefill", n))
    engine.on_reused = lambda n: events.append(("reused", n))
    engine.on_foreseen = lambda n: events.append(("foreseen", n))
    twice = [p for p in prompts for _ in range(2)]
    engine.generate_until([GenerateRequest(p, max_new_tokens=2) for p in twice])
    reused = sum(n for kind, n in events if kind == "reused")
    assert reused == engine.stats.reused_tokens > 0
    assert sum(n for kind, n in events if kind == "prefill") + reused == 2 * sum(PROMPT_LENGTHS)
    assert events[0] == ("foreseen", reused)  # the second copy of each prompt, all but its last token
    first_reuse = next(i for i, (kind, _) in enumerate(events) if kind == "reused")
    assert events[first_reuse + 1][0] == "prefill"  # the row's last token prefills after it is admitted


def test_generation_progress_counts_every_generated_token_step_by_step():
    """`on_generated` hears of each decoding step's kept tokens (a batch decoding for minutes
    after its prompts are read is never silent): every token after each row's first (read off
    its prefill) once, drafts kept included, before the rows finish."""
    model = _model("softmax")
    for engine in (Engine(model, TOK, max_batch=4), Engine(model, TOK, max_batch=4, draft_tokens=0)):
        heard: list[int] = []
        finished: list[int] = []

        def done(_i: int, _result: object, heard: list[int] = heard, finished: list[int] = finished) -> None:
            finished.append(sum(heard))

        engine.on_generated = heard.append
        got = engine.generate_until([GenerateRequest(p, max_new_tokens=6, stop_at_eos=False) for p in _prompts()],
                                    done=done)
        assert sum(heard) == sum(len(g.token_ids) - 1 for g in got) == 5 * len(got)
        assert len(heard) >= 2 and finished[0] > 0


@pytest.mark.parametrize("variant,backend,config", CASES, ids=lambda x: str(x))
def test_verifying_step_logits_match_single_rows(variant, backend, config):
    """Four tokens of every row of a ragged batch in one step (a drafted continuation being
    verified, `Decoder.ragged_logits`) against each row run alone, every position; then each
    row keeps some of them and the next decode step reads only what it kept."""
    model = _on_device(_model(variant, **dict(config)), backend)
    prompts = _prompts(seed=2)
    g = torch.Generator().manual_seed(3)
    drafted = torch.randint(3, 259, (len(prompts), 4), generator=g).to(model.device)
    kept = [1, 4, 2, 3, 1, 4]
    with torch.inference_mode():
        singles, batch = _ragged_batch(model, prompts, room=6)
        logits = model.ragged_logits(drafted, batch)  # (B, 4, V)
        assert batch.host_lengths == [len(p) for p in prompts]  # written, not yet counted
        for i, cache in enumerate(singles):
            want, _ = model(drafted[i : i + 1], cache.fork())
            torch.testing.assert_close(logits[i], want[0], atol=1e-4, rtol=1e-4)
        batch.advance(kept)
        assert batch.host_lengths == batch.lengths.tolist() == [len(p) + k for p, k in zip(prompts, kept, strict=True)]
        nxt = torch.arange(11, 11 + len(prompts), device=model.device)
        step = model.decode_step(nxt, batch)
        for i, k in enumerate(kept):
            cache = singles[i].fork()  # the row alone: its prompt, then the kept tokens
            model(drafted[i : i + 1, :k], cache)
            want, _ = model(nxt[i].view(1, 1), cache, logits_for="last")
            torch.testing.assert_close(step[i], want[0, -1], atol=1e-4, rtol=1e-4)


def _repeating_prompts() -> list[list[int]]:
    """Prompts that repeat themselves (their last n-grams occurred before: prompt lookup drafts)."""
    return [p + p + p[: len(p) // 2] for p in _prompts(seed=8)]


def test_prompt_lookup_changes_nothing_but_speed():
    """Rows that draft from their own text and verify the draft in one step generate what
    rows decoding one token a step generate, and what the one-at-a-time oracle does, with
    stop strings, min_new_tokens, suppressed ids and end tokens met inside a draft; drafts
    were made, and kept."""
    model = _model("softmax", seed=4)
    prompts = _repeating_prompts()
    free = Engine(model, TOK, draft_tokens=0).generate_until(
        [GenerateRequest(p, max_new_tokens=40, stop_at_eos=False) for p in prompts])
    reqs = [GenerateRequest(p, max_new_tokens=40, stop_at_eos=False) for p in prompts]
    for p, g, k in zip(prompts, free, range(len(prompts)), strict=True):
        text = g.text
        if k % 3 == 0 and len(text) > 12:
            reqs.append(GenerateRequest(p, max_new_tokens=40, stop=(text[9:11],), min_new_tokens=3))
        elif k % 3 == 1:
            reqs.append(GenerateRequest(p, max_new_tokens=40, stop_at_eos=False, stop_ids=(g.token_ids[6],),
                                        min_new_tokens=2, suppress_ids=(g.token_ids[0],)))
        else:
            reqs.append(GenerateRequest(p, max_new_tokens=17, stop_at_eos=False))
    plain = Engine(model, TOK, max_batch=5, draft_tokens=0)
    drafting = Engine(model, TOK, max_batch=5, draft_tokens=6)
    want = plain.generate_until(reqs)
    got = drafting.generate_until(reqs)
    for req, gen, w in zip(reqs, got, want, strict=True):
        assert (gen.text, gen.token_ids, gen.stop_reason) == (w.text, w.token_ids, w.stop_reason)
        single = _single(model, req)
        assert (gen.token_ids, gen.stop_reason) == (single.token_ids, single.stop_reason)
    assert 0 < drafting.clock.kept_tokens < drafting.clock.drafted_tokens
    assert drafting.clock.decode_steps < plain.clock.decode_steps
    assert plain.clock.drafted_tokens == plain.clock.kept_tokens == 0


def test_a_step_verifies_only_as_wide_as_pays_for_itself():
    """Where a step's time is all per token (the line the engine fits through its steps passes
    through the origin), verifying a draft that is not certain to be kept costs more than it
    saves: no step verifies. Where tokens cost nothing, every draft is verified whole. The
    tokens are the same either way."""
    model = _model("softmax", seed=4)
    reqs = [GenerateRequest(p, max_new_tokens=16, stop_at_eos=False) for p in _repeating_prompts()[:4]]
    want = Engine(model, TOK, max_batch=4, draft_tokens=0).generate_until(reqs)
    for cost, drafted in ((lambda tokens: 0.001 * tokens, False), (lambda tokens: 0.05, True)):
        engine = Engine(model, TOK, max_batch=4, draft_tokens=6)
        engine.step_times.decay = 1.0  # the seeded line stays what the engine's own steps are fitted to
        for tokens in (4, 28) * 500:
            engine.step_times.add(tokens, cost(tokens))
        got = engine.generate_until(reqs)
        assert [g.token_ids for g in got] == [w.token_ids for w in want]
        assert (engine.clock.drafted_tokens > 0) == drafted, engine.clock


def test_prompt_lookup_is_on_where_the_step_verifies_in_one_call():
    assert Engine(_model("softmax"), TOK).draft_tokens > 0  # the streaming PyTorch backend
    reference = _model("softmax")
    reference.backend = "reference"
    assert Engine(reference, TOK).draft_tokens == 0
    with pytest.raises(ValueError, match="draft_tokens must be >= 0"):
        Engine(_model("softmax"), TOK, draft_tokens=-1)


@pytest.mark.parametrize("variant,reads_pages", [("softmax", True), ("diff", False)])
def test_a_triton_decode_step_reads_the_pool_through_the_block_table(variant, reads_pages, monkeypatch):
    """On Triton a one-token step of a one-softmax variant runs `decode_paged` on the pool's
    tensors (nothing gathered); diff, whose terms split the keys, reads gathered rows."""
    from checkpoints.attention.softmax import triton as kernels
    from checkpoints.kv import views

    model = _on_device(_model(variant), "triton")
    calls = {"gather": 0, "paged": 0}
    gather, paged = views.gather, kernels.decode_paged

    def counted(name, fn):
        def run(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return run

    with torch.inference_mode():
        _, batch = _ragged_batch(model, _prompts(seed=2)[:3], room=2)
        monkeypatch.setattr(views, "gather", counted("gather", gather))
        monkeypatch.setattr(kernels, "decode_paged", counted("paged", paged))
        model.decode_step(torch.arange(7, 10, device=model.device), batch)
    layers = len(model.layers)
    assert calls == ({"gather": 0, "paged": layers} if reads_pages else {"gather": 2 * layers, "paged": 0})


@pytest.mark.parametrize("variant", ["softmax", "diff", "tda", "entmax"])
def test_the_pytorch_backend_reads_each_decoding_row_as_a_view_of_the_pool(variant, monkeypatch):
    """The engine reserves a row's blocks as one run at its prefill (a prefix-cache hit's
    blocks copied into it), so on the PyTorch backend every decoding step (plain and
    verifying) reads each row as a view of the pool: nothing gathered; the tokens are each
    prompt's greedy decode alone."""
    from checkpoints.kv import views

    model = _model(variant)
    calls = []
    gather = views.gather
    monkeypatch.setattr(views, "gather", lambda *a, **k: calls.append(1) or gather(*a, **k))
    shared = _prompts(seed=5)[3][:40]  # a prefix the prefix cache serves from the second prompt on
    reqs = [GenerateRequest(shared + p, max_new_tokens=9, stop_at_eos=False) for p in _prompts(seed=4)]
    engine = Engine(model, TOK, batch_prefill_tokens=0)
    with torch.inference_mode():
        got = engine.generate_until(reqs)
    assert engine.stats.reused_tokens >= 40 * (len(reqs) - 1)
    assert not calls
    assert [g.token_ids for g in got] == [_single(model, r).token_ids for r in reqs]
