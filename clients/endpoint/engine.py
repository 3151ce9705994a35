"""The engine's model interface over an OpenAI-compatible server (vLLM, SGLang, llama.cpp's
server, `transformers serve`): the same three request types and the same results as
`checkpoints.engine.Engine`, so every evaluator runs unchanged on a model that runs
elsewhere (docs/protocols/endpoints.md). `connect` makes the `ServedModel` evaluators run
on (URL checked, tokenizer loaded or the server's, server probed); `EndpointEngine` runs
requests on it.

- Prompts arrive as token ids counted with the served model's tokenizer; a prompt plus its
  new tokens longer than the registered context is refused before anything is sent (tasks
  with a truncation rule have already applied it against that context).
- Token ids go to the server as ids where it takes them (vLLM, SGLang) and as the text
  they decode to otherwise; log-likelihoods are asked in the dialect the probe found
  (`dialects`).
- Greedy decoding: temperature 0, stop strings and `max_tokens` per request.
- Many requests in flight (asyncio + httpx, bounded by `concurrency`) so the server's
  own batching does the work; requests sorted by prompt ids, so those that share a
  haystack prefix go out together while the server's prefix cache holds it.
- `done(i, result)` runs the moment each request is answered, so the caller records every
  finished sample before a failure (`EndpointUnavailable`, after the client's retries)
  propagates."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoints.errors import EndpointError
from checkpoints.lm import Done
from checkpoints.tokenizer import Tokenizer
from clients.endpoint.client import LOOPBACK_HOSTS, Client, check_base_url
from clients.endpoint.dialects import SCORING_METHODS, prompt_logprobs, thinking_fields
from clients.endpoint.options import EndpointSpec
from clients.endpoint.probe import Capabilities, probe
from clients.endpoint.tokenizer import ServerTokenizer, context_of, load_endpoint_tokenizer

if TYPE_CHECKING:  # the engine's types (torch): imported where requests run, so `lctx endpoints probe` stays light
    from checkpoints.engine import GenerateRequest, LoglikelihoodRequest, RollingRequest
    from checkpoints.generate import Generation

log = logging.getLogger("lctx.endpoint")


@dataclass(frozen=True)
class ServedConfig:
    """The part of a model's config that evaluators read of a served model: its context."""

    effective_context: int
    rope_scaling: None = None  # the server's settings apply; not known here

    @property
    def max_position_embeddings(self) -> int:
        return self.effective_context

    @property
    def rope_l0(self) -> int:
        """The context it was trained at, as far as lctx knows: the registered one."""
        return self.effective_context


@dataclass
class ServedModel:
    """An endpoint in place of a `LoadedModel`: a tokenizer, a context and a description;
    no weights here, so what needs them (RoPE override, attention backend, diagnostics) is
    refused before a job starts."""

    spec: EndpointSpec
    capabilities: Capabilities
    tokenizer: Tokenizer
    reported_model: str | None = None  # the model name the server put in its answers
    retries: int = 0  # requests sent again (429, 5xx, dropped connections) over the run
    config: ServedConfig = field(init=False)

    def __post_init__(self) -> None:
        if self.spec.context_length is None:
            raise EndpointError(f"the context of {self.spec.served_model!r} is not known: give it (--context / "
                                "context_length) or a tokenizer folder whose config.json has max_position_embeddings")
        self.config = ServedConfig(self.spec.context_length)

    @property
    def path(self) -> None:
        return None

    @property
    def chat_api(self) -> bool:
        """Sent messages (chat style), the server renders its own template and thinking switch."""
        return self.spec.api_style == "chat"

    def describe(self) -> dict[str, Any]:
        """The identity samples are recorded under (another endpoint or model must not reuse them)."""
        return {"endpoint": self.spec.base_url, "served_model": self.spec.served_model,
                "api_style": self.spec.api_style, "context_length": self.spec.context_length,
                "tokenizer": str(Path(self.spec.tokenizer).resolve()) if self.spec.tokenizer else "server",
                "backend": "endpoint"}

    def describe_run(self) -> dict[str, Any]:
        """What results record about the model as it ran: the endpoint, the name the server
        reported and its version, what it supports."""
        caps = self.capabilities
        return {**self.describe(), "reported_model": self.reported_model,
                "server_version": caps.server_version, "server": caps.server, "retries": self.retries,
                "capabilities": {"token_prompts": caps.token_prompts, "prompt_logprobs": caps.prompt_logprobs,
                                 "prompt_scoring": caps.prompt_scoring, "listed": caps.listed,
                                 "tokenizer_endpoints": caps.tokenizer_endpoints}}


def served_identity(base_url: str, served_model: str) -> str:
    """What identifies a served model (sha256 hex of its URL and model name): a job's
    fingerprint on an endpoint, a served judge's identity."""
    return hashlib.sha256(f"endpoint\0{base_url}\0{served_model}".encode()).hexdigest()


def connect(spec: EndpointSpec, allowed_hosts: Sequence[str] = LOOPBACK_HOSTS) -> ServedModel:
    """Check the URL, load the tokenizer (or take the server's), probe the server: the
    model evaluators run on. A context left out is the tokenizer folder's, else the server's."""
    check_base_url(spec.base_url, allowed_hosts)
    tokenizer = load_endpoint_tokenizer(spec.tokenizer) if spec.tokenizer else None
    capabilities = probe(spec, tokenizer)
    if spec.context_length is None:
        context = context_of(spec.tokenizer) if spec.tokenizer else capabilities.max_model_len
        spec = replace(spec, context_length=context)
    return ServedModel(spec, capabilities, tokenizer or ServerTokenizer(spec))


def prefix_order(prompts: Sequence[tuple[int, ...]]) -> list[int]:
    """Indices sorted by token ids: prompts that share a prefix (one haystack, needles at
    several depths) become neighbours and go out together, while the server's prefix cache
    still holds their shared part."""
    return sorted(range(len(prompts)), key=lambda i: prompts[i])


class EndpointEngine:
    """`Engine`'s three calls over a served model; results in request order."""

    def __init__(self, served: ServedModel) -> None:
        self.served = served
        self.spec = served.spec
        self.tokenizer = served.tokenizer
        self.sent = 0  # requests answered (the resume test counts them)
        self.stats = None  # prefix reuse happens in the server, unseen here
        self.clock = None  # so does the split between prefill and decoding
        self.on_prefill = None  # prompts are prefilled in the server: no progress by token

    # --- checks made before anything is sent ---

    def _check_fits(self, prompt_len: int, new: int, what: str) -> None:
        if prompt_len + new > self.spec.context_length:
            raise EndpointError(
                f"a {what} of {prompt_len} prompt tokens + {new} new tokens exceeds the endpoint's context of "
                f"{self.spec.context_length} tokens; lower the task's lengths (or its max_length) so prompts fit, "
                "or register the endpoint with the context its server really has")

    def _check_logprobs(self, what: str) -> None:
        caps = self.served.capabilities
        if self.spec.api_style != "completions" or caps.prompt_scoring not in SCORING_METHODS:
            raise EndpointError(
                f"{what} needs prompt log-probabilities of exactly our tokens (vLLM's prompt_logprobs, SGLang's "
                f"/generate with return_logprob, or echo + logprobs with token-id prompts); the server at "
                f"{self.spec.base_url} does not return them (token_prompts={caps.token_prompts}, "
                f"prompt_scoring={caps.prompt_scoring}, style={self.spec.api_style}); serve the model with vLLM "
                "or SGLang for this task")

    def _prompt(self, ids: Sequence[int]) -> list[int] | str:
        if self.served.capabilities.token_prompts:
            return list(ids)
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    # --- the three request types ---

    def generate_until(self, requests: Sequence[GenerateRequest], done: Done | None = None) -> list[Generation]:
        for r in requests:
            if r.think is None:  # a thinking request that does not fit is answered beyond_context, unsent
                self._check_fits(len(r.prompt_ids), r.max_new_tokens, "generation")
        return self._run(requests, self._generate, done)

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest],
                      done: Done | None = None) -> list[tuple[float, bool]]:
        if requests:
            self._check_logprobs("log-likelihood scoring")
        for r in requests:
            self._check_fits(len(r.context_ids) + len(r.continuation_ids), 0, "log-likelihood request")
        return self._run(requests, self._loglikelihood, done)

    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], done: Done | None = None) -> list[Any]:
        if requests:
            self._check_logprobs("rolling log-likelihood (perplexity)")
        for r in requests:
            self._check_fits(len(r.ids), 0, "rolling log-likelihood request")
        return self._run(requests, self._rolling, done)

    # --- one request each ---

    async def _generate(self, client: Client, r: GenerateRequest) -> Generation:
        from checkpoints.generate import Generation

        spec, plan = self.spec, r.think
        thinks = plan is not None and plan.setting != "off"  # switched off: the answer's budget and stops alone
        budget = r.max_new_tokens + (plan.budget if thinks else 0)  # type: ignore[union-attr]
        if thinks and spec.context_length is not None and len(r.prompt_ids) + budget > spec.context_length:
            # prompt + thinking budget + answer budget beyond the served context: counted, never cut
            return Generation(text="", token_ids=[], prompt_tokens=len(r.prompt_ids), stop_reason="beyond_context")
        stops = list(r.stop) + [s for s in (self.tokenizer.decode([i], skip_special_tokens=False)
                                             for i in r.stop_ids) if s]
        # A model that may think: one request bounds thinking and answer together (max_tokens), so
        # it gets both budgets; stop strings are the answer's and are applied here, not to the thinking.
        body: dict[str, Any] = {"model": spec.served_model, "max_tokens": budget, "temperature": 0}
        if stops and not thinks:
            body["stop"] = stops
        if r.min_new_tokens:
            body["min_tokens"] = r.min_new_tokens  # vLLM/SGLang's extension; refused by servers without it
        if r.suppress_ids:
            body["logit_bias"] = {str(i): -100 for i in r.suppress_ids}
        if not r.stop_at_eos:
            body["ignore_eos"] = True
        reasoning: str | None = None
        if spec.api_style == "chat":
            if r.messages is not None:  # a conversation: the server's template renders its turns
                messages = [dict(m) for m in r.messages]
            else:
                messages = [{"role": "user", "content": self.tokenizer.decode(list(r.prompt_ids),
                                                                              skip_special_tokens=False)}]
            if plan is not None:
                body.update(thinking_fields(plan.setting))
            answer = await client.post("/chat/completions", {**body, "messages": messages})
            choice = answer["choices"][0]
            message = choice.get("message") or {}
            text = message.get("content") or ""
            # vLLM's reasoning parser (`reasoning`; `reasoning_content` before 2026, and SGLang's)
            reasoning = message.get("reasoning") or message.get("reasoning_content")
        else:
            answer = await client.post("/completions", {**body, "prompt": self._prompt(r.prompt_ids)})
            choice = answer["choices"][0]
            text = choice.get("text") or ""
        self.served.reported_model = answer.get("model", self.served.reported_model)
        finish = choice.get("finish_reason")
        if plan is not None:
            return await self._answer_after_thinking(client, r, text, reasoning, finish, stops, answer)
        cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)  # servers that overshoot a stop
        if cut >= 0:
            text = text[:cut]
        stopped = cut >= 0 or (bool(stops) and choice.get("stop_reason") is not None)  # vLLM names the stop
        reason = "length" if finish == "length" else ("stop_string" if stopped else "eos")
        return Generation(text=text, token_ids=self.tokenizer.encode(text, add_special_tokens=False),
                          prompt_tokens=len(r.prompt_ids), stop_reason=reason)

    async def _answer_after_thinking(self, client: Client, r: GenerateRequest, text: str, reasoning: str | None,
                                     finish: str | None, stops: list[str], answer: dict[str, Any]) -> Generation:
        """A thinking model's generation: the thinking from the server's reasoning field, or
        split from the text by the model's delimiters (a server without a reasoning parser);
        the answer cut to its own budget and stop strings. Thinking that used up the request
        (no answer, finish `length`) is closed for it where the server takes token prompts:
        a second request continues the prompt, the thinking and the forced close."""
        from checkpoints.generate import Generation

        plan = r.think
        assert plan is not None
        thinking, reply = (reasoning, text) if reasoning is not None else plan.format.split(text, plan.inside)
        details = (answer.get("usage") or {}).get("completion_tokens_details") or {}
        counted = details.get("reasoning_tokens") if isinstance(details, dict) else None
        thinking_tokens = counted if isinstance(counted, int) else \
            len(self.tokenizer.encode(thinking, add_special_tokens=False)) if thinking else 0
        truncated = bool(thinking) and not reply.strip() and finish == "length"
        reason = "length" if finish == "length" else "eos"
        if truncated and self.spec.api_style == "completions":
            raw = text if reasoning is None else thinking
            ids = [*r.prompt_ids, *self.tokenizer.encode(raw, add_special_tokens=False), *plan.answer_ids(True)]
            more = await client.post("/completions", {"model": self.spec.served_model, "prompt": self._prompt(ids),
                                                      "max_tokens": r.max_new_tokens, "temperature": 0})
            reply, reason = more["choices"][0].get("text") or "", more["choices"][0].get("finish_reason")
            reason = "length" if reason == "length" else "eos"
        ids = self.tokenizer.encode(reply.lstrip(), add_special_tokens=False)
        if len(ids) > r.max_new_tokens:  # the request's max_tokens held both budgets: the answer keeps its own
            ids, reason = ids[:r.max_new_tokens], "length"
            reply = self.tokenizer.decode(ids)
        reply = reply.lstrip()
        cut = min((i for i in (reply.find(s) for s in stops) if i >= 0), default=-1)
        if cut >= 0:
            reply, reason = reply[:cut], "stop_string"
        return Generation(text=reply, token_ids=ids, prompt_tokens=len(r.prompt_ids), stop_reason=reason,
                          thinking=thinking, thinking_tokens=thinking_tokens, thinking_truncated=truncated)

    async def _loglikelihood(self, client: Client, r: LoglikelihoodRequest) -> tuple[float, bool]:
        ids = list(r.context_ids) + list(r.continuation_ids)
        values, top = await prompt_logprobs(client, self.served.capabilities.prompt_scoring or "", self.spec.served_model,
                                            ids, self.tokenizer)
        start = len(ids) - len(r.continuation_ids)
        return float(sum(v for v in values[start:] if v is not None)), all(top[start:])

    async def _rolling(self, client: Client, r: RollingRequest) -> Any:
        import torch

        if len(r.ids) < 2:
            return torch.zeros(0, dtype=torch.float32)
        values, _ = await prompt_logprobs(client, self.served.capabilities.prompt_scoring or "", self.spec.served_model,
                                          r.ids, self.tokenizer)
        return torch.tensor(values[1:], dtype=torch.float32)

    # --- the loop ---

    def _run(self, requests: Sequence[Any], one: Any, done: Done | None) -> list[Any]:
        if not requests:
            return []
        return asyncio.run(self._gather(requests, one, done))

    async def _gather(self, requests: Sequence[Any], one: Any, done: Done | None) -> list[Any]:
        results: list[Any] = [None] * len(requests)
        keys = [getattr(r, "prompt_ids", None) or getattr(r, "context_ids", None) or getattr(r, "ids", ())
                for r in requests]
        started = time.perf_counter()
        async with Client(self.spec) as client:
            async def run(i: int) -> tuple[int, Any]:
                return i, await one(client, requests[i])

            # Tasks are created in prefix order; the semaphore admits them in that order.
            tasks = [asyncio.create_task(run(i)) for i in prefix_order(keys)]
            try:
                for next_done in asyncio.as_completed(tasks):
                    i, result = await next_done
                    results[i] = result
                    self.sent += 1
                    if done is not None:
                        done(i, result)  # recorded before anything else can fail
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self.served.retries += client.retried  # counted for a failed run too
        log.info("%d requests to %s in %.1fs (%d retries)", len(requests), self.spec.base_url,
                 time.perf_counter() - started, client.retried)
        return results
