"""The model interface evaluators use: lm-eval's three request types, a list of
requests in, results out in the same order.

- `generate_until`: greedy decoding with per-request stop strings, max / min
  new tokens and suppressed ids. Requests are sorted by length (longest first,
  so the memory peak comes early), each prompt is prefilled on its own, and
  decoding runs batched over a ragged KV cache (`RaggedKVCache`): every row
  keeps its own length and positions, no row attends to another row's padding,
  finished rows leave the batch at once and waiting rows join it (continuous
  batching). The batch grows while its KV cache, every row as wide as the
  widest row's full length (prompt + max new tokens), fits the memory budget.
- `loglikelihood`: log p(continuation | context) and whether greedy decoding
  would produce it. Requests that share a context prefill it once.
- `loglikelihood_rolling`: per-token log-probabilities of whole texts.

Greedy outputs equal one-at-a-time outputs (`checkpoints.generate`): the
batched decode step computes each row exactly as a single-row step would, up
to float rounding (tests compare tokens, and logits within 1e-4 in fp32)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from checkpoints.attention.cache import KVCache, RaggedKVCache
from checkpoints.generate import DEFAULT_CHUNK, Generation, prefill, token_logprobs
from checkpoints.model import Decoder
from checkpoints.tokenizer import Tokenizer

log = logging.getLogger("lctx.engine")

# Default KV-cache budget of one batch: a quarter of free GPU memory on CUDA, 2 GiB on CPU.
CPU_MEMORY_BUDGET = 2 << 30
DEFAULT_MAX_BATCH = 64

Done = Callable[[int, Any], None]  # (index, result) of each request the moment it finishes
Prefilled = Callable[[int], None]  # tokens just prefilled (after each chunk): progress before any request ends


@dataclass(frozen=True)
class GenerateRequest:
    """Greedy continuation of `prompt_ids`. Stops at EOS (unless `stop_at_eos` is
    False), at any of `stop_ids` (end tokens besides EOS, left out of the output as EOS
    is: LongBench's samsum ends at the id of "\n"), at the first of `stop` in the decoded
    text (cut before it), or after `max_new_tokens`; until `min_new_tokens` tokens exist,
    EOS, `stop_ids` and `suppress_ids` cannot be chosen (transformers' `min_length`)."""

    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    min_new_tokens: int = 0
    suppress_ids: tuple[int, ...] = ()
    stop_at_eos: bool = True
    stop_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_ids", tuple(self.prompt_ids))
        object.__setattr__(self, "stop", tuple(s for s in self.stop if s))
        object.__setattr__(self, "suppress_ids", tuple(self.suppress_ids))
        object.__setattr__(self, "stop_ids", tuple(self.stop_ids))
        if not self.prompt_ids:
            raise ValueError("a generate request needs at least one prompt token (BOS)")
        if self.max_new_tokens < 0 or self.min_new_tokens < 0:
            raise ValueError("max_new_tokens and min_new_tokens must be >= 0")


@dataclass(frozen=True)
class LoglikelihoodRequest:
    context_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "context_ids", tuple(self.context_ids))
        object.__setattr__(self, "continuation_ids", tuple(self.continuation_ids))
        if self.continuation_ids and not self.context_ids:
            raise ValueError("a log-likelihood request needs at least one context token (BOS)")


@dataclass(frozen=True)
class RollingRequest:
    """Score every token of `ids` after the first: log p(ids[t] | ids[:t])."""

    ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(self.ids))


@dataclass
class _Row:
    """One request in flight: its generated tokens and the logits of its next step."""

    index: int
    request: GenerateRequest
    logits: torch.Tensor  # (V,) fp32
    eos: frozenset[int]
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    reason: str = ""

    @property
    def reserve(self) -> int:
        """Tokens of cache this row can reach: prompt plus every new token."""
        return len(self.request.prompt_ids) + self.request.max_new_tokens

    def step(self, tokenizer: Tokenizer) -> bool:
        """Choose the next token from `logits`; True when the row has finished
        (greedy_generate's rules, one step)."""
        req = self.request
        if len(self.tokens) >= req.max_new_tokens:
            self.reason = "length"
            return True
        logits = self.logits
        blocked = sorted(self.eos | set(req.suppress_ids))
        if len(self.tokens) < req.min_new_tokens and blocked:
            logits = logits.clone()
            logits[blocked] = float("-inf")
        token = int(logits.argmax())
        if token in self.eos:
            self.reason = "eos"
            return True
        self.tokens.append(token)
        if req.stop:
            text = tokenizer.decode(self.tokens)
            cut = min((i for i in (text.find(s) for s in req.stop) if i >= 0), default=-1)
            if cut >= 0:
                self.text, self.reason = text[:cut], "stop_string"
                return True
        if len(self.tokens) >= req.max_new_tokens:
            self.reason = "length"
            return True
        return False

    def result(self, tokenizer: Tokenizer) -> Generation:
        text = self.text if self.reason == "stop_string" else tokenizer.decode(self.tokens)
        return Generation(text=text, token_ids=list(self.tokens), prompt_tokens=len(self.request.prompt_ids),
                          stop_reason=self.reason)


def default_memory_budget(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free // 4
    return CPU_MEMORY_BUDGET


class Engine:
    """Runs request lists on one model. `memory_budget` (bytes) bounds the KV
    cache of a decoding batch; `max_batch` bounds its rows. `on_prefill(tokens)`, when set,
    runs after every prefilled chunk: a batch admits all its prompts before its first decode
    step, so minutes can pass before any request finishes."""

    def __init__(
        self,
        model: Decoder,
        tokenizer: Tokenizer,
        *,
        memory_budget: int | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if memory_budget is not None and memory_budget < 1:
            raise ValueError(f"memory_budget must be a positive number of bytes, got {memory_budget}")
        self.model = model
        self.tokenizer = tokenizer
        self.memory_budget = memory_budget if memory_budget is not None else default_memory_budget(model.device)
        self.max_batch = max_batch
        self.chunk_size = chunk_size
        self.on_prefill: Prefilled | None = None

    # --- generate until -------------------------------------------------------

    @torch.inference_mode()
    def generate_until(self, requests: Sequence[GenerateRequest], done: Done | None = None) -> list[Generation]:
        """Greedy generations in request order; `done(i, generation)` runs as request i finishes."""
        if self.model.rotary.depends_on_length:
            # Dynamic NTK / LongRoPE tables follow each sequence's length: one row at a time.
            return [self._generate_alone(i, req, done) for i, req in enumerate(requests)]
        results: list[Generation | None] = [None] * len(requests)
        waiting = deque(sorted(range(len(requests)), key=lambda i: -len(requests[i].prompt_ids)))
        rows: list[_Row] = []
        batch: RaggedKVCache | None = None
        bytes_per_token = 0

        def finish(row: _Row) -> None:
            results[row.index] = row.result(self.tokenizer)
            if done is not None:
                done(row.index, results[row.index])

        while waiting or rows:
            # Admit waiting requests while the batch's cache, every row as wide as the widest
            # row's full length (the buffers are rectangular), fits the budget.
            while waiting and len(rows) < self.max_batch:
                req = requests[waiting[0]]
                width = max(batch.capacity if batch is not None else 0, len(req.prompt_ids) + req.max_new_tokens)
                if rows and bytes_per_token * (len(rows) + 1) * width > self.memory_budget:
                    break
                index = waiting.popleft()
                row, cache = self._start(index, req)
                if row.step(self.tokenizer):
                    finish(row)
                    continue
                bytes_per_token = bytes_per_token or cache.bytes_per_token()
                if batch is None:
                    batch = RaggedKVCache.empty_like(cache)
                batch.join(cache, reserve=row.reserve)
                rows.append(row)
            if not rows:
                continue
            tokens = torch.tensor([r.tokens[-1] for r in rows], dtype=torch.long, device=self.model.device)
            logits = self.model.decode_step(tokens, batch)  # (B, V)
            keep = []
            for i, row in enumerate(rows):
                row.logits = logits[i]
                if row.step(self.tokenizer):
                    finish(row)
                else:
                    keep.append(i)
            if len(keep) < len(rows):
                batch.keep(keep)
                rows = [rows[i] for i in keep]
        return results  # type: ignore[return-value]

    def _generate_alone(self, index: int, req: GenerateRequest, done: Done | None) -> Generation:
        row, cache = self._start(index, req)
        while not row.step(self.tokenizer):
            token = torch.tensor([[row.tokens[-1]]], dtype=torch.long, device=self.model.device)
            logits, _ = self.model(token, cache, logits_for="last")
            row.logits = logits[0, -1]
        result = row.result(self.tokenizer)
        if done is not None:
            done(index, result)
        return result

    def _start(self, index: int, req: GenerateRequest) -> tuple[_Row, KVCache]:
        cache = self.model.new_cache()
        logits = prefill(self.model, req.prompt_ids, cache, self.chunk_size, self.on_prefill).float()
        eos = frozenset(self.tokenizer.eos_ids) if req.stop_at_eos else frozenset()
        eos |= frozenset(req.stop_ids)
        return _Row(index=index, request=req, logits=logits, eos=eos), cache

    # --- log-likelihoods --------------------------------------------------------

    @torch.inference_mode()
    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest], done: Done | None = None) -> list[tuple[float, bool]]:
        """(sum of log p(continuation | context), whether greedy decoding gives it), in order.
        Requests sharing a context reuse one prefill of it (multiple choice)."""
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        by_context: dict[tuple[int, ...], list[int]] = {}
        for i, req in enumerate(requests):
            by_context.setdefault(req.context_ids, []).append(i)
        for context, members in sorted(by_context.items(), key=lambda kv: -len(kv[0])):
            shared: KVCache | None = None
            for i in members:
                cont = requests[i].continuation_ids
                if not cont:
                    results[i] = (0.0, True)
                else:
                    if shared is None:
                        shared = self.model.new_cache()
                        if len(context) > 1:
                            prefill(self.model, context[:-1], shared, self.chunk_size, self.on_prefill)
                    results[i] = self._continuation(shared.fork(), context, cont)
                if done is not None:
                    done(i, results[i])
        return results  # type: ignore[return-value]

    def _continuation(self, cache: KVCache, context: tuple[int, ...], cont: tuple[int, ...]) -> tuple[float, bool]:
        # The last context token and the continuation (minus its last token) predict the continuation.
        tail = torch.tensor([[context[-1], *cont[:-1]]], dtype=torch.long, device=self.model.device)
        logits, _ = self.model(tail, cache, rope_length=len(context) + len(cont))
        logp = torch.log_softmax(logits[0].float(), dim=-1)  # (len(cont), V)
        targets = torch.tensor(cont, device=logp.device)
        picked = logp.gather(1, targets[:, None]).squeeze(1)
        return float(picked.sum()), bool((logp.argmax(-1) == targets).all())

    @torch.inference_mode()
    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], done: Done | None = None) -> list[torch.Tensor]:
        """Per-token log-probabilities (len(ids) - 1,) fp32 of each text, in order."""
        out = []
        for i, req in enumerate(requests):
            out.append(token_logprobs(self.model, req.ids, self.chunk_size))
            if done is not None:
                done(i, out[-1])
        return out
