"""Greedy generation and log-likelihood scoring over the KV cache.

Long prompts are prefilled in chunks (`chunk_size` tokens at a time) so the
activations of a 32k-token prompt never exist at once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from checkpoints.kv.cache import KVCache
from checkpoints.model import Decoder
from checkpoints.sampler import StopRule, pick
from checkpoints.thinking import ThinkPlan
from checkpoints.tokenizer import Tokenizer

DEFAULT_CHUNK = 4096
# A long prompt's prefill chunk on CUDA, measured (bench/results/gpu_model.md, Llama-3.2-1B shape on
# an H200): 16k-token chunks prefill 128k tokens in 3.27 s where 4k chunks take 4.57 s (fewer,
# larger attention launches; the larger matrices fill the GPU), for 0.5 GiB more activations.
CUDA_PREFILL_CHUNK = 16384


def default_prefill_chunk(device: torch.device) -> int:
    """Tokens per prefill forward (only the last position's logits are kept)."""
    return CUDA_PREFILL_CHUNK if device.type == "cuda" else DEFAULT_CHUNK


# Stop reasons of a think block after which the answer is generated in a second round.
CONTINUED = ("thinking_budget", "thought")


@dataclass
class Generation:
    """A greedy continuation: `text` is the answer (after any think block), `token_ids`
    every generated token (thinking, a forced close and the answer). A reasoning model's
    block is `thinking` (None: it did not think), `thinking_tokens` long (its delimiters
    included), `thinking_truncated` when its budget ran out and the block was closed for it."""

    text: str
    token_ids: list[int]
    prompt_tokens: int
    stop_reason: str  # "eos" | "stop_string" | "length" | "decided"; "thinking_budget", "thought": not yet answered
    thinking: str | None = None
    thinking_tokens: int = 0
    thinking_truncated: bool = False
    overrun: str | None = None  # a served model's answer beyond the budgets asked, cut to them (what it sent)

    @classmethod
    def of(cls, rule: StopRule, tokens: list[int], reason: str, cut: str | None, prompt_tokens: int,
           tokenizer: Tokenizer) -> Generation:
        """The generation a stop rule ended: the answer's text (a stop string's cut, or the
        answer tokens decoded) and, when the rule's model thinks, the block apart."""
        text = cut if reason == "stop_string" else rule.answer_text(tokens, tokenizer.decode)
        plan = rule.think
        if plan is None or not rule.state.opened:
            return cls(text=text or "", token_ids=list(tokens), prompt_tokens=prompt_tokens, stop_reason=reason)
        spent = len(tokens) if rule.state.start is None else rule.state.start - rule.state.separator
        raw = tokenizer.decode(list(tokens[:spent]), skip_special_tokens=False)
        thinking = plan.format.split(raw, inside=plan.inside)[0] or ""
        return cls(text=text or "", token_ids=list(tokens), prompt_tokens=prompt_tokens, stop_reason=reason,
                   thinking=thinking, thinking_tokens=spent)

    def closed(self, plan: ThinkPlan, answer: Generation) -> Generation:
        """This generation, stopped at the end of its block ("thought") or by its budget
        ("thinking_budget": closed by `plan.force_ids`), with `answer` generated after what
        the plan appends there (budget forcing; the task's answer prefix)."""
        forced = self.stop_reason == "thinking_budget"
        close = plan.force_ids if forced else ()
        return Generation(text=answer.text, token_ids=[*self.token_ids, *plan.answer_ids(forced), *answer.token_ids],
                          prompt_tokens=self.prompt_tokens, stop_reason=answer.stop_reason, thinking=self.thinking,
                          thinking_tokens=self.thinking_tokens + len(close), thinking_truncated=forced)


def _as_batch(ids: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([list(ids)], dtype=torch.long, device=device)


@torch.inference_mode()
def prefill(
    model: Decoder, ids: Sequence[int], cache: KVCache, chunk_size: int = DEFAULT_CHUNK,
    on_chunk: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Run `ids` through the model into `cache`; return the last position's logits (V,).
    `on_chunk(tokens)` hears of the chunk's tokens as its layers finish (progress of a long
    prefill: on the CPU one chunk takes minutes; its tokens are told a layer's share at a time,
    all of them by the chunk's end)."""
    if not ids:
        raise ValueError("cannot prefill an empty prompt: encode at least one token (BOS)")
    total = cache.length + len(ids)
    logits = None
    layers = max(1, len(model.layers))
    for lo in range(0, len(ids), chunk_size):
        chunk = _as_batch(ids[lo : lo + chunk_size], model.device)
        n = chunk.shape[1]
        told = [0]

        def layer_done(i: int, n: int = n, told: list[int] = told) -> None:
            share = n * (i + 1) // layers  # the tokens' work through layer i
            if share > told[0] and on_chunk is not None:
                on_chunk(share - told[0])
                told[0] = share

        logits, _ = model(chunk, cache, logits_for="last", rope_length=total,
                          on_layer=layer_done if on_chunk is not None else None)
    return logits[0, -1]


@torch.inference_mode()
def greedy_generate(
    model: Decoder,
    tokenizer: Tokenizer,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    stop: Sequence[str] = (),
    chunk_size: int = DEFAULT_CHUNK,
    stop_at_eos: bool = True,
    min_new_tokens: int = 0,
    suppress_ids: Sequence[int] = (),
    stop_ids: Sequence[int] = (),
    think: ThinkPlan | None = None,
) -> Generation:
    """Greedy decoding: argmax at every step, stopping at EOS, at any stop
    string (the text is cut before it), at any of `stop_ids` (end tokens besides EOS,
    left out of the output like EOS), or after `max_new_tokens`. Until
    `min_new_tokens` tokens exist, EOS, `stop_ids` and `suppress_ids` cannot be chosen
    (as transformers' `min_length` does with its end tokens: LongBench's samsum). With
    `think`, a think block first (its own budget; closed by `think.force_ids` when it runs
    out, the answer generated after them), the rules above applying to the answer."""
    cache = model.new_cache()
    logits = prefill(model, prompt_ids, cache, chunk_size)
    rule = StopRule.make(tokenizer.eos_ids, max_new_tokens, stop=stop, stop_at_eos=stop_at_eos,
                         min_new_tokens=min_new_tokens, suppress_ids=suppress_ids, stop_ids=stop_ids, think=think)
    out: list[int] = []
    reason, cut = ("length", None) if rule.exhausted(out) else (None, None)
    while reason is None:
        token = pick(logits[None], [rule.blocked_at(len(out))])[0]
        reason, cut = rule.after(out, token, tokenizer.decode)
        if reason is None:
            logits, _ = model(_as_batch([token], model.device), cache, logits_for="last")
            logits = logits[0, -1]
    result = Generation.of(rule, out, reason, cut, len(prompt_ids), tokenizer)
    if reason not in CONTINUED or think is None:
        return result
    answer = greedy_generate(model, tokenizer, [*prompt_ids, *out, *think.answer_ids(reason == "thinking_budget")],
                             max_new_tokens, stop, chunk_size, stop_at_eos, min_new_tokens, suppress_ids, stop_ids)
    return result.closed(think, answer)


@torch.inference_mode()
def token_logprobs(model: Decoder, ids: Sequence[int], chunk_size: int = DEFAULT_CHUNK) -> torch.Tensor:
    """log p(ids[t] | ids[:t]) for t = 1 .. len(ids)-1, float32 of shape (len(ids)-1,).
    Streams over chunks with the cache; only one chunk's logits are alive at a time."""
    cache = model.new_cache()
    out = []
    prev_last: torch.Tensor | None = None  # logits of the token before this chunk
    for lo in range(0, len(ids), chunk_size):
        chunk = list(ids[lo : lo + chunk_size])
        logits, _ = model(_as_batch(chunk, model.device), cache, rope_length=len(ids))
        logp = torch.log_softmax(logits[0].float(), dim=-1)  # (t, V)
        targets = torch.tensor(chunk, device=logp.device)
        if prev_last is not None:
            out.append(prev_last[targets[0]].reshape(1))
        out.append(logp[:-1].gather(1, targets[1:, None]).squeeze(1))
        prev_last = logp[-1]
    return torch.cat(out) if out else torch.empty(0)


@torch.inference_mode()
def loglikelihood(
    model: Decoder,
    context_ids: Sequence[int],
    continuation_ids: Sequence[int],
    chunk_size: int = DEFAULT_CHUNK,
) -> tuple[float, bool]:
    """(sum of log p(continuation | context), whether greedy decoding would produce it)."""
    if not continuation_ids:
        return 0.0, True
    if not context_ids:
        raise ValueError("loglikelihood needs at least one context token (for example BOS)")
    cache = model.new_cache()
    total = len(context_ids) + len(continuation_ids)
    if len(context_ids) > 1:
        prefill(model, context_ids[:-1], cache, chunk_size)
    # The last context token and the continuation (minus its last token) predict the continuation.
    tail = [context_ids[-1], *continuation_ids[:-1]]
    logits, _ = model(_as_batch(tail, model.device), cache, rope_length=total)
    logp = torch.log_softmax(logits[0].float(), dim=-1)  # (len(cont), V)
    targets = torch.tensor(list(continuation_ids), device=logp.device)
    picked = logp.gather(1, targets[:, None]).squeeze(1)
    greedy = bool((logp.argmax(-1) == targets).all())
    return float(picked.sum()), greedy
