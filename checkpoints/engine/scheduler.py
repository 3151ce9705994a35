"""The engine's scheduler (the division vLLM v1 and gpt-fast draw): which requests run
when, and nothing of what a decoding step does (the engine picks each step's drafts). It
orders a request list (prompts sharing prefixes next to each other, for the prefix cache;
else longest first, so the memory peak comes early; short prompts last, in padded groups
of similar length) and admits the next prefill group into the decoding batch while the
blocks of the paged KV pool its rows hold (each row its `reserve`: its own prompt, max new
tokens and the positions a verifying step may write past them, in whole blocks; the one
count of a row's tokens) and the prefix cache fit the memory budget (evicting cached
prefixes to make room). An admitted row takes that reserve from the pool at its prefill
through `allocate`, the one call between the scheduler and the pool (`BlockPool.reserve`;
vLLM's scheduler asks its KV-cache manager for a request's blocks the same way).
It holds no tensors and runs no model: `model_step.ModelStep` does the forwards and
`sampler` the token choice and stop rule."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from checkpoints.engine.prefix_cache import PrefixCache, common_prefix, reuse_order
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.requests import GenerateRequest

# Most tokens (rows x padded width) one batched prefill runs at once: bounds its activations.
BATCH_PREFILL_MAX_TOKENS = 16384


@dataclass
class Plan:
    """One request list's run order: those not yet admitted, and those that prefill in
    padded groups."""

    waiting: deque[int]
    batched: set[int]


class Scheduler:
    """`memory_budget` (bytes) bounds the decoding batch's KV cache plus the prefix cache;
    `max_batch` the rows; prompts up to `batch_prefill_tokens` prefill in padded groups (0: never);
    `block_size`: the pool's, a row reserves whole blocks; `draft_tokens`: the most tokens a
    decoding row drafts and a verifying step writes past its last (the engine's)."""

    def __init__(self, memory_budget: int, max_batch: int, prefix: PrefixCache | None,
                 batch_prefill_tokens: int, block_size: int = 1, draft_tokens: int = 0) -> None:
        self.memory_budget, self.max_batch = memory_budget, max_batch
        self.prefix, self.batch_prefill_tokens = prefix, batch_prefill_tokens
        self.block_size, self.draft_tokens = block_size, draft_tokens

    def short(self, n: int) -> bool:
        """Whether a prompt of n tokens prefills in a padded batch."""
        return 0 < n <= self.batch_prefill_tokens

    def plan(self, prompts: Sequence[Sequence[int]]) -> Plan:
        """Run order and the prompts that prefill in padded batches. Those are the short
        ones, except, with the prefix cache, those sharing at least half their tokens with
        another prompt (they gain more from reuse). Order: with the prefix cache, prompts
        that share prefixes together (`reuse_order`), else longest first so the memory
        peak comes early; batched prompts last, longest first, so each padded batch
        holds similar lengths."""
        n = len(prompts)
        if self.prefix is not None:
            order = reuse_order(prompts)
            shared = [0] * n
            for a, b in zip(order, order[1:], strict=False):
                common = common_prefix(prompts[a], prompts[b])
                shared[a], shared[b] = max(shared[a], common), max(shared[b], common)
        else:
            order = sorted(range(n), key=lambda i: -len(prompts[i]))
            shared = [0] * n
        batched = {i for i in range(n) if self.short(len(prompts[i])) and 2 * shared[i] < len(prompts[i])}
        return Plan(deque([i for i in order if i not in batched] + sorted(batched, key=lambda i: -len(prompts[i]))),
                    batched)

    @staticmethod
    def reach(req: GenerateRequest) -> int:
        """Positions a row of `req` may fill: its prompt and every new token."""
        return len(req.prompt_ids) + req.most_new_tokens

    def reserve(self, req: GenerateRequest) -> int:
        """Tokens of pool a row of `req` holds from its prefill to its end: its `reach` and the
        positions a verifying step may write past it (each row of a step is written as wide as
        the longest draft, at most `draft_tokens` past its last token), in whole blocks. The
        one count of a row's tokens: admission sums it and `allocate` takes it from the pool."""
        bs = self.block_size
        return -(-(self.reach(req) + self.draft_tokens) // bs) * bs

    def allocate(self, seq: PagedSeq, req: GenerateRequest, one_run: bool = False) -> PagedSeq:
        """`seq`, the row of an admitted `req` at its prefill, holding the blocks of its `reserve`
        (what admission counted for it) from the pool: the one call between the scheduler and
        the pool (`BlockPool.reserve`). `one_run`: a row holding blocks already (a prefix-cache
        hit) is copied into one run of its own, read as a view of the pool at every step (the
        PyTorch backends; Triton's decode kernel reads through the table, so there the row
        keeps its shared blocks)."""
        seq.reserve(self.reserve(req), one_run)
        return seq

    def next_group(self, plan: Plan, requests: Sequence[GenerateRequest], rows: int, reserved: int,
                   bytes_per_token: int) -> tuple[list[int], int]:
        """The next prefill group to join a decoding batch of `rows` rows that may reach
        `reserved` tokens of pool together (one prompt, or short prompts that prefill in one
        padded forward), taken from `plan.waiting`, and the batch's reserved tokens with it;
        no group when the batch is full or the next request does not fit the budget beside it.
        Each row counts its own length: rows of different lengths waste no memory."""
        group: list[int] = []
        waiting = plan.waiting
        while waiting and rows + len(group) < self.max_batch:
            more = reserved + self.reserve(requests[waiting[0]])
            if (rows or group) and not self.make_room(more, bytes_per_token):
                break
            if group and not self._joins(group, waiting[0], plan.batched, requests):
                break
            group.append(waiting.popleft())
            reserved = more
            if group[-1] not in plan.batched:
                break
        return group, reserved

    def make_room(self, tokens: int, bytes_per_token: int) -> bool:
        """Whether a decoding batch reaching `tokens` tokens of pool fits the budget beside
        the prefix cache, evicting cached prefixes to make it fit. The cache gives way, least
        recently used first, down to the entries of the prompt it took last (the one the next
        prompt in reuse order shares most): one more decoding row saves a whole step per token
        for every row, older prefixes only some prefill (bench/results/eval_cost.md measured a
        batch halved by the cache)."""
        room = self.memory_budget - bytes_per_token * tokens
        if self.prefix is None or self.prefix.nbytes <= room:
            return room >= 0
        if room < self.prefix.last_bytes:
            return False
        self.prefix.evict(room)
        return True

    def short_groups(self, sizes: Sequence[int]) -> list[list[int]]:
        """Indices of short sequences (`sizes`: their lengths, longest first) cut into padded
        groups of at most BATCH_PREFILL_MAX_TOKENS tokens (rows x the group's first width)."""
        groups: list[list[int]] = []
        for i, n in enumerate(sizes):
            group = groups[-1] if groups else None
            if group is None or (len(group) + 1) * max(n, sizes[group[0]]) > BATCH_PREFILL_MAX_TOKENS:
                groups.append([i])
            else:
                group.append(i)
        return groups

    @staticmethod
    def _joins(group: list[int], index: int, batched: set[int], requests: Sequence[GenerateRequest]) -> bool:
        """Whether request `index` prefills in the same padded forward as the short prompts `group`."""
        if index not in batched:
            return False
        width = max(len(requests[i].prompt_ids) for i in [*group, index])
        return (len(group) + 1) * width <= BATCH_PREFILL_MAX_TOKENS
