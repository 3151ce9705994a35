"""The model interface evaluators use: lm-eval's three request types, a list of
requests in, results out in the same order.

- `generate_until`: greedy decoding with per-request stop strings, max / min
  new tokens and suppressed ids. Prompts are prefilled one at a time, reusing
  the longest prefix already in the prefix cache (`checkpoints.engine.prefix_cache`:
  a token-id radix tree of KV entries, LRU under the memory budget) and
  prefilling only the rest; short prompts prefill together in one right-padded
  forward instead (batched prefill). Every row's keys and values live in one
  paged KV pool (`checkpoints.kv`: fixed-size blocks, a block
  table per row); decoding runs batched over the rows' tables (`PagedBatch`):
  every row keeps its own length and positions, no row attends to another row's
  padding, finished rows leave the batch at once (their blocks back to the pool)
  and waiting rows join it (continuous batching) by handing over their tables.
  The batch grows while the blocks its rows may reach (each its own prompt + max
  new tokens) and the prefix cache together fit the memory budget. A row whose last
  tokens occurred earlier in its text drafts what followed them then, and one step
  verifies the draft (`checkpoints.engine.prompt_lookup`): the same greedy tokens, fewer steps.
- `loglikelihood`: log p(continuation | context) and whether greedy decoding
  would produce it. Requests that share a context prefill it once, contexts
  reuse cached prefixes, and short requests run together in one padded forward.
- `loglikelihood_rolling`: per-token log-probabilities of whole texts (no
  prefix reuse: the answer needs every position's logits, which cached KV
  entries do not keep).

Requests run in the order that maximises reuse (prompts sharing a prefix next
to each other, `reuse_order`), then longest first; results come back in request
order. Greedy outputs equal one-at-a-time outputs (`checkpoints.generate`): a
cached prefix, a padded batch and the batched decode step compute each row as
a single uncached row would, up to float rounding (tests compare tokens, and
logits within 1e-4 in fp32). The prefix cache and batched prefill are off where
the RoPE table follows the sequence length (dynamic NTK, LongRoPE).

The engine wires three parts, each with one job (vLLM v1's and gpt-fast's division):
`scheduler.Scheduler` admits (the run order and which requests join the decoding batch:
memory planning, the prefix cache's room; an admitted row's blocks taken from the pool
through `Scheduler.allocate`), `model_step.ModelStep` runs the forwards (a prefill, a
padded prefill, a decode step: what CUDA graphs capture) and `sampler` picks tokens and
holds the stop rule `generate.greedy_generate`, the oracle, follows too. What each
decoding step verifies (each row's draft, or none) the engine picks itself
(`_choose_drafts`, with `verify_width`). The request types live in `requests.py`; `lm.LM`
is the interface this class meets."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from checkpoints.attention.backend import Backend
from checkpoints.engine.model_step import ModelStep
from checkpoints.engine.prefix_cache import PrefixCache, PrefixStats, foreseen_reuse, reuse_order
from checkpoints.engine.prompt_lookup import DraftLength, PromptLookup
from checkpoints.engine.scheduler import BATCH_PREFILL_MAX_TOKENS, Plan, Scheduler
from checkpoints.engine.verify_width import StepTimes, choose_width
from checkpoints.generate import CONTINUED, Generation
from checkpoints.kv.block_pool import BlockPool
from checkpoints.kv.paged_batch import PagedBatch
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.lm import Done, Prefilled
from checkpoints.model import Decoder
from checkpoints.requests import (
    DEFAULT_DRAFT_TOKENS,
    DEFAULT_MAX_BATCH,
    GenerateRequest,
    LoglikelihoodRequest,
    RollingRequest,
)
from checkpoints.sampler import StopRule, pick
from checkpoints.tokenizer import Tokenizer

__all__ = ["BATCH_PREFILL_MAX_TOKENS", "DEFAULT_MAX_BATCH", "Engine", "GenerateRequest", "LoglikelihoodRequest",
           "RollingRequest"]

log = logging.getLogger("lctx.engine")

# Default KV-cache budget of one batch: a quarter of free GPU memory on CUDA, 2 GiB on CPU.
CPU_MEMORY_BUDGET = 2 << 30
# Share of the memory budget the prefix cache may hold (the decoding batch gets the rest,
# and all of it while the prefix cache is empty).
PREFIX_CACHE_SHARE = 0.5
# Batched prefill: prompts up to this many tokens prefill together in one right-padded
# forward. On CUDA always below a few thousand tokens; on CPU as measured by
# bench/batched_prefill.py (bench/results/batched_prefill.md).
CUDA_BATCH_PREFILL_TOKENS = 2048
CPU_BATCH_PREFILL_TOKENS = 128


@dataclass
class EngineClock:
    """Wall seconds of generate_until's two phases, each ending at the step's one read from
    the device (so the GPU's work lands in the phase that queued it): admitting rows
    (prefill and their first token) and decoding steps; and the tokens rows drafted from
    their own text and kept (`checkpoints.engine.prompt_lookup`)."""

    prefill_s: float = 0.0
    decode_s: float = 0.0
    decode_steps: int = 0
    drafted_tokens: int = 0
    kept_tokens: int = 0

    def since(self, before: EngineClock) -> EngineClock:
        return EngineClock(self.prefill_s - before.prefill_s, self.decode_s - before.decode_s,
                           self.decode_steps - before.decode_steps, self.drafted_tokens - before.drafted_tokens,
                           self.kept_tokens - before.kept_tokens)

    def as_dict(self) -> dict[str, float | int]:
        return {"prefill_s": round(self.prefill_s, 4), "decode_s": round(self.decode_s, 4),
                "decode_steps": self.decode_steps, "drafted_tokens": self.drafted_tokens,
                "kept_tokens": self.kept_tokens}


@dataclass
class _Row:
    """One request in flight: its generated tokens, its stop rule and the logits of its
    first step (those of later steps come for the whole batch)."""

    index: int
    request: GenerateRequest
    logits: torch.Tensor  # (V,) fp32: the prompt's last position
    rule: StopRule
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    reason: str = ""
    lookup: PromptLookup | None = None  # drafts from the row's own text, when the engine drafts
    draft_length: DraftLength = field(default_factory=DraftLength)

    def draft(self, most: int) -> list[int]:
        """Tokens to verify after the last chosen one (prompt lookup): at most `most`, and
        none past what the row may still emit beside the step's own choice."""
        if self.lookup is None:
            return []
        room = self.rule.room(self.tokens) - 1
        return self.lookup.draft(self.tokens, min(most, self.draft_length.now, room))

    def blocked(self, ahead: int = 0) -> tuple[int, ...]:
        """What cannot be chosen `ahead` tokens after the last chosen one."""
        return self.rule.blocked_at(len(self.tokens) + ahead)

    def first_step(self, tokenizer: Tokenizer) -> bool:
        """The step from the prompt's logits (after its prefill)."""
        if self.rule.exhausted(self.tokens):
            self.reason = "length"
            return True
        return self.step(pick(self.logits[None], [self.blocked()])[0], tokenizer)

    def step(self, token: int, tokenizer: Tokenizer) -> bool:
        """`token` was chosen (`sampler.pick`); True when the row has finished (the stop
        rule greedy_generate follows too; a row whose last token reached its budget has
        finished then, so only `first_step` meets an exhausted one)."""
        reason, cut = self.rule.after(self.tokens, token, tokenizer.decode)
        if reason is None:
            return False
        self.reason, self.text = reason, cut or ""
        return True

    def take(self, choices: Sequence[int], draft: Sequence[int], tokenizer: Tokenizer) -> tuple[bool, int]:
        """A step chose `choices` after the last token and after each drafted token (one
        more than `draft`): take them while the draft agrees with them, and the first that
        does not. (finished, tokens taken): the cache keeps that many of the step's inputs."""
        for t, token in enumerate(choices):
            if self.step(token, tokenizer):
                return True, t + 1
            if t >= len(draft) or draft[t] != token:
                self.draft_length.after(len(draft), t)
                return False, t + 1
        raise AssertionError("a step chooses one token more than its draft")

    def result(self, tokenizer: Tokenizer) -> Generation:
        return Generation.of(self.rule, self.tokens, self.reason, self.text, len(self.request.prompt_ids), tokenizer)


@dataclass
class _Step:
    """One decoding step as `Engine._choose_drafts` picks it: each row's draft to verify (a
    verifying step), or none (a plain decode step)."""

    drafts: list[list[int]]
    verified: bool

    @property
    def tokens(self) -> int:
        """Tokens the step computes: every row at the width of the longest draft plus one."""
        return len(self.drafts) * (1 + max(map(len, self.drafts), default=0))


@dataclass
class _Running:
    """What one `generate_until` call holds between steps: its requests, the scheduler's plan
    of those not yet admitted, the decoding rows and their batch on the pool, the results so far."""

    requests: Sequence[GenerateRequest]
    plan: Plan
    done: Done | None
    batch: PagedBatch
    rows: list[_Row] = field(default_factory=list)
    bytes_per_token: int = 0
    results: list[Generation | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.requests)

    def busy(self) -> bool:
        return bool(self.plan.waiting or self.rows)

    def finish(self, row: _Row, tokenizer: Tokenizer) -> None:
        self.results[row.index] = row.result(tokenizer)
        if self.done is not None:
            self.done(row.index, self.results[row.index])


def default_memory_budget(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free // 4
    return CPU_MEMORY_BUDGET


def default_draft_tokens(model: Decoder) -> int:
    """Most tokens a row drafts per step (prompt lookup) by default: on the streaming PyTorch
    backend, where a step verifying up to 16 drafted tokens per row costs 2-3 one-token steps
    and saves many more (bench/results/ruler_e2e_cpu.md). None on Triton
    until measured on a GPU (a verifying step there is an eager SDPA step beside graphed
    decode steps; `draft_tokens` turns it on) and on the dense reference."""
    return DEFAULT_DRAFT_TOKENS if model.resolved_backend is Backend.TORCH else 0


def default_batch_prefill_tokens(device: torch.device) -> int:
    """Longest prompt that prefills in a padded batch by default (0: never)."""
    return CUDA_BATCH_PREFILL_TOKENS if device.type == "cuda" else CPU_BATCH_PREFILL_TOKENS


class Engine:
    """Runs request lists on one model. `memory_budget` (bytes) bounds the KV
    cache of a decoding batch plus the prefix cache; `max_batch` bounds the rows.
    `prefix_cache=False` turns prefix reuse off (it is off anyway where the RoPE
    table follows the length); `batch_prefill_tokens` is the longest prompt that
    prefills in a padded batch (None: the device's default, 0: never). `on_prefill(tokens)`,
    when set, runs after every prefilled chunk: a batch admits all its prompts before its
    first decode step, so minutes can pass before any request finishes; `on_generated(tokens)`
    after every decoding step (the tokens its rows kept: a batch's decoding can take minutes
    on the CPU before its rows finish together; a row's first token, read off its prefill, is
    the prefill's). `on_reused(tokens)`: prompt tokens the prefix cache served as a row is
    admitted (on_prefill hears them where it is not set: they count as read, but took no time),
    `on_foreseen(tokens)`: at the start of each generation call, the prompt tokens the prefix
    cache should serve in it (a forecast for the ETA). `cuda_graphs`: decode
    steps as CUDA graphs (None: where the model's step can be captured; `model_step.ModelStep`).
    `draft_tokens`: the most tokens a decoding row drafts from its own text and verifies in
    one step (`checkpoints.engine.prompt_lookup`; None: `default_draft_tokens`, 0: never)."""

    def __init__(
        self,
        model: Decoder,
        tokenizer: Tokenizer,
        *,
        memory_budget: int | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        chunk_size: int | None = None,
        prefix_cache: bool = True,
        batch_prefill_tokens: int | None = None,
        cuda_graphs: bool | None = None,
        draft_tokens: int | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if memory_budget is not None and memory_budget < 1:
            raise ValueError(f"memory_budget must be a positive number of bytes, got {memory_budget}")
        if batch_prefill_tokens is not None and batch_prefill_tokens < 0:
            raise ValueError(f"batch_prefill_tokens must be >= 0 (0: off), got {batch_prefill_tokens}")
        if draft_tokens is not None and draft_tokens < 0:
            raise ValueError(f"draft_tokens must be >= 0 (0: no prompt lookup), got {draft_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.step = ModelStep(model, chunk_size, cuda_graphs)
        budget = memory_budget if memory_budget is not None else default_memory_budget(model.device)
        # Every row's KV and every cached prefix in one paged pool, grown as used up to the budget.
        self.pool = BlockPool(len(model.layers), model.device, max_bytes=budget)
        exact = not model.rotary.depends_on_length  # a prefix's keys do not depend on what follows
        self.prefix = PrefixCache(int(budget * PREFIX_CACHE_SHARE), self.pool) if prefix_cache and exact else None
        if batch_prefill_tokens is None:
            batch_prefill_tokens = default_batch_prefill_tokens(model.device)
        self.scheduler = Scheduler(budget, max_batch, self.prefix, batch_prefill_tokens if exact else 0,
                                   block_size=self.pool.block_size,
                                   draft_tokens=default_draft_tokens(model) if draft_tokens is None else draft_tokens)
        self.stats = PrefixStats()  # prompt tokens asked for and served from the prefix cache, over all calls
        self.clock = EngineClock()  # seconds prefilling and decoding, drafted and kept tokens, over all calls
        self.step_times = StepTimes()  # decoding steps' seconds by tokens computed: how wide a step verifies
        self.on_prefill: Prefilled | None = None
        self.on_generated: Prefilled | None = None  # tokens each decoding step kept: the ETA's generation work
        self.on_reused: Prefilled | None = None  # prompt tokens served from the prefix cache (nearly free)
        self.on_foreseen: Prefilled | None = None  # prompt tokens a call's prefix cache should serve

    @property
    def memory_budget(self) -> int:
        return self.scheduler.memory_budget

    @property
    def draft_tokens(self) -> int:
        return self.scheduler.draft_tokens

    @property
    def max_batch(self) -> int:
        return self.scheduler.max_batch

    @max_batch.setter
    def max_batch(self, rows: int) -> None:
        """A worker caps it for one unit (a re-run after a kill for memory)."""
        if rows < 1:
            raise ValueError(f"max_batch must be >= 1, got {rows}")
        self.scheduler.max_batch = rows

    @property
    def chunk_size(self) -> int:
        return self.step.chunk_size

    @property
    def batch_prefill_tokens(self) -> int:
        return self.scheduler.batch_prefill_tokens

    def clear_prefix_cache(self) -> None:
        if self.prefix is not None:
            self.prefix.clear()

    # --- generate until -------------------------------------------------------

    def generate_until(self, requests: Sequence[GenerateRequest], done: Done | None = None) -> list[Generation]:
        """Greedy generations in request order; `done(i, generation)` runs as request i finishes.
        A reasoning model's think block that runs out of its budget is closed by its plan's
        force ids and the answer generated after them in a second round (budget forcing:
        the prompt comes back from the prefix cache, the block is prefilled once); so is the
        answer of a block that closed where the task writes an answer prefix after it."""
        results: list[Generation | None] = [None] * len(requests)
        forced: list[int] = []

        def first(i: int, generation: Generation) -> None:
            results[i] = generation
            if generation.stop_reason in CONTINUED:
                forced.append(i)
            elif done is not None:
                done(i, generation)

        self._generate(requests, first)
        if forced:
            plans = [requests[i].think for i in forced]
            follow = [replace(requests[i], think=None, prompt_ids=(
                *requests[i].prompt_ids, *results[i].token_ids,  # type: ignore[union-attr]
                *plan.answer_ids(results[i].stop_reason == "thinking_budget")))  # type: ignore[union-attr]
                for i, plan in zip(forced, plans, strict=True)]

            def second(k: int, answer: Generation) -> None:
                i = forced[k]
                results[i] = results[i].closed(plans[k], answer)  # type: ignore[union-attr,arg-type]
                if done is not None:
                    done(i, results[i])

            self._generate(follow, second)
        return results  # type: ignore[return-value]

    @torch.inference_mode()
    def _generate(self, requests: Sequence[GenerateRequest], done: Done | None = None) -> list[Generation]:
        """The step loop: admit what the scheduler lets join (each group prefilled, its rows'
        first tokens picked), then one decoding step as choose drafts -> execute -> update."""
        if self.model.rotary.depends_on_length:
            # Dynamic NTK / LongRoPE tables follow each sequence's length: one row at a time.
            return [self._generate_alone(i, req, done) for i, req in enumerate(requests)]
        run = _Running(requests, self.scheduler.plan([r.prompt_ids for r in requests]), done, PagedBatch(self.pool))
        if self.on_foreseen is not None and self.prefix is not None:
            alone = [i for i in run.plan.waiting if i not in run.plan.batched]
            self.on_foreseen(foreseen_reuse([r.prompt_ids for r in requests], alone, self.prefix))
        try:
            while run.busy():
                started = time.perf_counter()
                self._admit(run)
                stepping = time.perf_counter()
                self.clock.prefill_s += stepping - started
                if not run.rows:
                    continue
                step = self._choose_drafts(run)
                chosen = self._execute(run, step)
                seconds = time.perf_counter() - stepping
                self.clock.decode_s += seconds
                self.step_times.add(step.tokens, seconds)
                self.clock.decode_steps += 1
                self._update(run, step, chosen)
        finally:
            run.batch.release()  # rows of a run stopped part way give their blocks back
        return run.results  # type: ignore[return-value]

    def _admit(self, run: _Running) -> None:
        """Requests join the decoding batch while the scheduler lets them (row cap, memory
        budget beside the prefix cache): each group prefilled (one prompt from its cached
        prefix, or short prompts padded together), its rows' first tokens picked; a row that
        ends there never joins."""
        while True:
            reserved = sum(self.scheduler.reserve(r.request) for r in run.rows)
            group, reserved = self.scheduler.next_group(run.plan, run.requests, len(run.rows), reserved,
                                                        run.bytes_per_token)
            if not group:
                return
            if len(group) == 1:
                index = group[0]
                started = [self._start(index, run.requests[index], run.bytes_per_token * reserved)]
            else:
                started = self._start_batch(group, run.requests)
            for row, seq in started:
                if row.first_step(self.tokenizer):
                    seq.release()
                    run.finish(row, self.tokenizer)
                    continue
                run.bytes_per_token = run.bytes_per_token or seq.bytes_per_token()
                if self.draft_tokens:  # only rows that decode in the batch draft
                    row.lookup = PromptLookup(row.request.prompt_ids)
                    row.draft_length = DraftLength(most=self.draft_tokens)
                run.batch.join(seq, reach=self.scheduler.reach(row.request))
                run.rows.append(row)

    def _choose_drafts(self, run: _Running) -> _Step:
        """What the next decoding step runs: each row's draft to verify, cut to the width that
        gives the most expected tokens per second (`verify_width`), or a plain decode step when
        no row has one or verifying does not pay. A step writes as many positions for every row
        as the longest draft needs, so drafts stay within the room the fullest row has left."""
        if self.draft_tokens:
            batch = run.batch
            room = batch.capacity - batch.max_length - 1
            drafts = [row.draft(room) for row in run.rows]
            if any(drafts):
                width = choose_width([len(d) for d in drafts], [r.draft_length.acceptance for r in run.rows],
                                     self.step_times.fixed_tokens())
                if width:
                    return _Step([d[:width] for d in drafts], verified=True)
        return _Step([[] for _ in run.rows], verified=False)

    def _execute(self, run: _Running, step: _Step) -> list[list[int]]:
        """One forward over the batch and its one read back: the greedy choice after each row's
        last token (and after each drafted token: row b gets len(draft) + 1 choices)."""
        rows, batch = run.rows, run.batch
        if not step.verified:
            logits = self.step.decode([r.tokens[-1] for r in rows], batch)  # (B, V)
            return [[c] for c in pick(logits, [r.blocked() for r in rows])]
        drafts = step.drafts
        width = 1 + max(map(len, drafts))
        inputs = [[r.tokens[-1], *d, *[0] * (width - 1 - len(d))] for r, d in zip(rows, drafts, strict=True)]
        logits = self.step.verify(inputs, batch)  # (B, width, V)
        blocked = [r.blocked(ahead) for r in rows for ahead in range(width)]
        flat = pick(logits.reshape(len(rows) * width, -1), blocked)
        self.clock.drafted_tokens += sum(map(len, drafts))
        return [flat[b * width : b * width + len(d) + 1] for b, d in enumerate(drafts)]

    def _update(self, run: _Running, step: _Step, chosen: list[list[int]]) -> None:
        """The step's choices through each row's stop rule: drafted tokens kept while they
        agree, finished rows answered and out of the batch; a verifying step advances each
        row's cache by what it kept (a plain decode step advanced the batch itself)."""
        keep, taken = [], []
        for i, row in enumerate(run.rows):
            finished, took = row.take(chosen[i], step.drafts[i], self.tokenizer)
            taken.append(took)
            self.clock.kept_tokens += took - 1
            if finished:
                run.finish(row, self.tokenizer)
            else:
                keep.append(i)
        if step.verified:
            run.batch.advance(taken)
        if self.on_generated is not None:
            self.on_generated(sum(taken))
        if len(keep) < len(run.rows):
            run.batch.keep(keep)  # the finished rows' blocks go back to the pool
            run.rows = [run.rows[i] for i in keep]

    def _generate_alone(self, index: int, req: GenerateRequest, done: Done | None) -> Generation:
        row, seq = self._start(index, req, 0)
        finished = row.first_step(self.tokenizer)
        while not finished:
            logits = self.step.decode_alone(row.tokens[-1], seq)
            finished = row.step(pick(logits, [row.blocked()])[0], self.tokenizer)
            if self.on_generated is not None:
                self.on_generated(1)
        seq.release()
        result = row.result(self.tokenizer)
        if done is not None:
            done(index, result)
        return result

    def _row(self, index: int, req: GenerateRequest, logits: torch.Tensor) -> _Row:
        # stop strings checked on each step's new text (the tokenizer's stream; generate.py, the oracle, decodes whole)
        rule = StopRule.of(req, self.tokenizer.eos_ids, getattr(self.tokenizer, "decode_stream", None))
        return _Row(index=index, request=req, logits=logits.float(), rule=rule)

    def _start(self, index: int, req: GenerateRequest, batch_bytes: int) -> tuple[_Row, PagedSeq]:
        """Prefill one prompt into the pool, from its longest cached prefix (its blocks by
        reference; at least its last token runs, for its logits); its blocks then go into
        the prefix cache (by reference), which keeps at most what the budget leaves beside
        `batch_bytes` of decoding batch."""
        ids = req.prompt_ids
        self.stats.prompt_tokens += len(ids)
        if self.prefix is None:
            seq = self._allocate(PagedSeq(self.pool), req)
            return self._row(index, req, self.step.prefill(ids, seq, self.on_prefill)), seq
        seq = self._allocate(self.prefix.load(ids[:-1]), req)
        self._reused(seq.length)
        logits = self.step.prefill(ids[seq.length:], seq, self.on_prefill)
        self.prefix.insert(ids, seq, limit=self.memory_budget - batch_bytes)
        return self._row(index, req, logits), seq

    def _allocate(self, seq: PagedSeq, req: GenerateRequest) -> PagedSeq:
        """`seq` holding blocks for every token its row may reach, taken from the pool by the
        scheduler (`Scheduler.allocate`: the row's `reserve`, what admission counted for it)
        as one run of consecutive blocks where the pool has one: the row then reads as a view
        of the pool at every step (`PagedRows`) instead of being gathered. On the PyTorch
        backends a prefix-cache hit is copied into that run (one copy of the prefix, within
        the reserve the scheduler counts for the row anyway, instead of a gather of the row at
        every step); Triton's decode kernel reads through the table, so there the row keeps
        the shared blocks."""
        return self.scheduler.allocate(seq, req, one_run=self.model.resolved_backend is not Backend.TRITON)

    def _reused(self, tokens: int) -> None:
        """Prompt tokens the prefix cache served: counted for progress like prefilled ones (a
        task's planned tokens include them; left out, a finished job read '3,059/6,000'), told
        apart where `on_reused` listens (the ETA charges them no time)."""
        self.stats.reused_tokens += tokens
        heard = self.on_reused if self.on_reused is not None else self.on_prefill
        if tokens and heard is not None:
            heard(tokens)

    def _start_batch(self, indices: list[int], requests: Sequence[GenerateRequest]) -> list[tuple[_Row, PagedSeq]]:
        """Short prompts prefilled together (`ModelStep.prefill_padded`); each row then keeps
        its own first len(prompt) cache entries, copied into the pool."""
        prompts = [requests[i].prompt_ids for i in indices]
        logits, cache = self.step.prefill_padded(prompts)  # (B, V)
        self.stats.prompt_tokens += sum(map(len, prompts))
        if self.on_prefill is not None:
            self.on_prefill(sum(map(len, prompts)))
        return [(self._row(i, requests[i], logits[b]),
                 self._allocate(PagedSeq(self.pool), requests[i]).extend(cache.row(b, len(prompts[b])).entries()))
                for b, i in enumerate(indices)]

    # --- log-likelihoods --------------------------------------------------------

    @torch.inference_mode()
    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest], done: Done | None = None) -> list[tuple[float, bool]]:
        """(sum of log p(continuation | context), whether greedy decoding gives it), in order.
        Requests sharing a context reuse one prefill of it (multiple choice); longer
        contexts reuse cached prefixes; short requests run in padded batches."""
        results: list[tuple[float, bool] | None] = [None] * len(requests)

        def answer(i: int, result: tuple[float, bool]) -> None:
            results[i] = result
            if done is not None:
                done(i, result)

        short: list[int] = []
        by_context: dict[tuple[int, ...], list[int]] = {}
        for i, req in enumerate(requests):
            if not req.continuation_ids:
                answer(i, (0.0, True))
            elif self.scheduler.short(len(req.context_ids) + len(req.continuation_ids)):
                short.append(i)
            else:
                by_context.setdefault(req.context_ids, []).append(i)
        contexts = list(by_context)
        order = reuse_order(contexts) if self.prefix is not None else sorted(
            range(len(contexts)), key=lambda k: -len(contexts[k]))
        for k in order:
            context = contexts[k]
            shared = self._prefilled(context[:-1])
            for i in by_context[context]:
                cont = requests[i].continuation_ids
                fork = shared.fork()  # the context's full blocks shared, its partial last one copied
                answer(i, _scored(self.step.continuation(fork, context, cont), cont))
                fork.release()
            shared.release()
        short.sort(key=lambda i: -len(requests[i].context_ids) - len(requests[i].continuation_ids))
        sizes = [len(requests[i].context_ids) + len(requests[i].continuation_ids) for i in short]
        for group in self.scheduler.short_groups(sizes):
            members = [short[g] for g in group]
            for j, result in zip(members, self._continuations_batch([requests[j] for j in members]), strict=True):
                answer(j, result)
        return results  # type: ignore[return-value]

    def _prefilled(self, ids: tuple[int, ...]) -> PagedSeq:
        """A row of the pool holding `ids` (a context minus its last token), from the prefix
        cache as far as it reaches (the caller releases it)."""
        self.stats.prompt_tokens += len(ids)
        if self.prefix is None:
            seq = PagedSeq(self.pool)
            if ids:
                self.step.prefill(ids, seq, self.on_prefill)
            return seq
        seq = self.prefix.load(ids)
        self._reused(seq.length)
        if seq.length < len(ids):
            self.step.prefill(ids[seq.length:], seq, self.on_prefill)
            self.prefix.insert(ids, seq)
        return seq

    def _continuations_batch(self, requests: Sequence[LoglikelihoodRequest]) -> list[tuple[float, bool]]:
        """Score short requests in one right-padded forward of context + continuation[:-1],
        reading the logits only at the positions that predict continuation tokens."""
        seqs = [(*r.context_ids, *r.continuation_ids[:-1]) for r in requests]
        k = max(len(r.continuation_ids) for r in requests)
        at = torch.zeros(len(requests), k, dtype=torch.long)
        for b, r in enumerate(requests):
            n = len(r.continuation_ids)
            at[b, :n] = torch.arange(len(r.context_ids) - 1, len(r.context_ids) - 1 + n)
        self.stats.prompt_tokens += sum(len(r.context_ids) - 1 for r in requests)
        logits = self.step.score_padded(seqs, at)  # (B, k, V)
        return [_scored(logits[b, : len(r.continuation_ids)], r.continuation_ids) for b, r in enumerate(requests)]

    @torch.inference_mode()
    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], done: Done | None = None) -> list[torch.Tensor]:
        """Per-token log-probabilities (len(ids) - 1,) fp32 of each text, in order."""
        out = []
        for i, req in enumerate(requests):
            out.append(self.step.rolling(req.ids))
            if done is not None:
                done(i, out[-1])
        return out


def _scored(logits: torch.Tensor, cont: tuple[int, ...]) -> tuple[float, bool]:
    """(sum of log p of `cont`, whether each is the argmax) from logits (len(cont), V)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    targets = torch.tensor(cont, device=logp.device)
    picked = logp.gather(1, targets[:, None]).squeeze(1)
    return float(picked.sum()), bool((logp.argmax(-1) == targets).all())
