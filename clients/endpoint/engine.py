"""The engine's model interface over an OpenAI-compatible server (vLLM, SGLang, llama.cpp's
server, `transformers serve`): the same three request types and the same results as
`checkpoints.engine.Engine`, so every evaluator runs unchanged on a model that runs
elsewhere (docs/protocols/endpoints.md). `connect` makes the `ServedModel` evaluators run
on (URL checked, tokenizer loaded or the server's, server probed); `EndpointEngine` runs
requests on it; `open_served` makes both (`Served`), the one way `lctx eval`, the worker and
a served judge (`EndpointTarget`) open a served model.

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
  propagates.
- What comes back is data: an answer of the wrong shape (`content` a list, a number, null
  where text is needed: `read_completion`) is a server error, retried, then named; an answer
  or a think block longer than the budget asked for is cut to it and the generation says so
  (`overrun`, the record's `server_overrun`), so no record holds or claims more than the
  budget allowed."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from checkpoints.errors import EndpointError
from checkpoints.lm import Done
from checkpoints.requests import GenerateRequest, LoglikelihoodRequest, RollingRequest
from checkpoints.tokenizer import Tokenizer
from clients.endpoint.client import LOOPBACK_HOSTS, Client, Unusable, check_base_url, shown
from clients.endpoint.dialects import SCORING_METHODS, prompt_logprobs, thinking_fields
from clients.endpoint.options import EndpointSpec
from clients.endpoint.probe import Capabilities, probe
from clients.endpoint.tokenizer import (
    EstimatedTokenizer,
    ServerTokenizer,
    context_of,
    load_endpoint_tokenizer,
)

if TYPE_CHECKING:  # the engine's types (torch): imported where requests run, so `lctx endpoints probe` stays light
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

    served = True  # runs on its server

    @property
    def chat_api(self) -> bool:
        """Sent messages (chat style), the server renders its own template and thinking switch."""
        return self.spec.api_style == "chat"

    def describe(self) -> dict[str, Any]:
        """The identity samples are recorded under (another endpoint or model must not reuse them)."""
        return {"endpoint": self.spec.base_url, "served_model": self.spec.served_model,
                "api_style": self.spec.api_style, "context_length": self.spec.context_length,
                "tokenizer": str(Path(self.spec.tokenizer).resolve()) if self.spec.tokenizer else
                "estimated" if isinstance(self.tokenizer, EstimatedTokenizer) else "server",
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


def connect(spec: EndpointSpec, allowed_hosts: Sequence[str] = LOOPBACK_HOSTS, estimate: bool = False) -> ServedModel:
    """Check the URL, load the tokenizer (or take the server's), probe the server: the
    model evaluators run on. A context left out is the tokenizer folder's, else the server's.
    `estimate`: a chat-style server with neither a tokenizer folder nor /tokenize counts tokens
    by `EstimatedTokenizer` (a judge: its prompts are sent as messages, the counts only check
    its context) instead of being refused (a model under test: its prompts' lengths are the
    measurement)."""
    check_base_url(spec.base_url, allowed_hosts)
    tokenizer = load_endpoint_tokenizer(spec.tokenizer) if spec.tokenizer else None
    chat = spec.api_style == "chat" and estimate  # sent messages: ids only count them, so an estimate can do
    capabilities = probe(spec, tokenizer, need_tokenizer=not chat)
    if spec.context_length is None:
        context = context_of(spec.tokenizer) if spec.tokenizer else capabilities.max_model_len
        spec = replace(spec, context_length=context)
    if tokenizer is None:
        tokenizer = ServerTokenizer(spec) if capabilities.tokenizer_endpoints or not chat else EstimatedTokenizer()
    return ServedModel(spec, capabilities, tokenizer)


def served_behaviour(capabilities: Capabilities) -> str:
    """What a served model's answers depend on beyond its URL and name, as the probe saw it
    (sha256 hex): the server's software and version, the context it reports, what it can do,
    its thinking switches. A judge's cache key holds it: a server upgraded or re-launched with
    other settings is asked again."""
    seen = {"server": capabilities.server, "version": capabilities.server_version,
            "max_model_len": capabilities.max_model_len, "token_prompts": capabilities.token_prompts,
            "prompt_scoring": capabilities.prompt_scoring, "tokenizer_endpoints": capabilities.tokenizer_endpoints,
            "thinking_switches": capabilities.thinking_switches}
    return hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Completion:
    """What lctx reads of a completion answer, each part checked for its type."""

    text: str  # the answer's text ("" where the server sent null and may: thinking used the budget)
    reasoning: str | None  # a chat server's reasoning field
    finish: str | None
    stopped: bool  # vLLM's `stop_reason`: a stop string or token ended it
    model: str | None
    reasoning_tokens: int | None  # usage.completion_tokens_details.reasoning_tokens, as the server counts


def read_completion(answer: dict[str, Any], chat: bool) -> Completion:
    """A completions or chat completions answer read as the OpenAI API documents it; `Unusable`
    naming the part and quoting the answer when it has another shape (no choices, a message that
    is not an object, `content` a list or a number, null where the text is needed)."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise Unusable(f"the answer has no choices[0] object: {shown(answer)}")
    choice = choices[0]
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise Unusable(f"choices[0].finish_reason is {type(finish).__name__}, not text: {shown(answer)}")
    reasoning = None
    if chat:
        message = choice.get("message")
        if not isinstance(message, dict):
            raise Unusable(f"choices[0].message is {type(message).__name__}, not an object: {shown(answer)}")
        # vLLM's reasoning parser (`reasoning`; `reasoning_content` before 2026, and SGLang's)
        reasoning = message.get("reasoning") or message.get("reasoning_content")
        if reasoning is not None and not isinstance(reasoning, str):
            raise Unusable(f"choices[0].message's reasoning is {type(reasoning).__name__}, not text: {shown(answer)}")
        where, text = "choices[0].message.content", message.get("content")
    else:
        where, text = "choices[0].text", choice.get("text")
    if text is None and (reasoning is not None or finish == "length"):
        text = ""  # the think block took the budget: no answer yet
    if not isinstance(text, str):
        what = "null" if text is None else f"of type {type(text).__name__}"
        raise Unusable(f"{where} is {what} where the answer's text is needed: {shown(answer)}")
    model = answer.get("model")
    usage = answer.get("usage")
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    counted = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return Completion(text, reasoning, finish, choice.get("stop_reason") is not None,
                      model if isinstance(model, str) else None,
                      counted if isinstance(counted, int) and not isinstance(counted, bool) else None)


def overrun_slack(budget: int) -> int:
    """Tokens an answer may exceed its budget by, counted again from its text by lctx's tokenizer,
    before it is called the server's overrun: the text of n generated tokens can encode to a few
    more (merges across the server's token boundaries); a server that ignores its budget sends far more."""
    return max(8, budget // 8)


def prompt_of(request: GenerateRequest | LoglikelihoodRequest | RollingRequest) -> tuple[int, ...]:
    """The tokens a request sends before anything is generated or scored: its prompt, its
    context, or the text it scores."""
    match request:
        case GenerateRequest():
            return tuple(request.prompt_ids)
        case LoglikelihoodRequest():
            return request.context_ids
        case RollingRequest():
            return request.ids
    raise TypeError(f"not a request: {type(request).__name__}")


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
        self.max_batch = None  # the server batches (bounded by the spec's concurrency), not lctx

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
        if spec.api_style == "chat":
            if r.messages is not None:  # a conversation: the server's template renders its turns
                messages = [dict(m) for m in r.messages]
            else:
                messages = [{"role": "user", "content": self.tokenizer.decode(list(r.prompt_ids),
                                                                              skip_special_tokens=False)}]
            if plan is not None:
                body.update(thinking_fields(plan.setting))
            answer = await client.post("/chat/completions", {**body, "messages": messages},
                                       read=lambda a: read_completion(a, chat=True))
        else:
            answer = await client.post("/completions", {**body, "prompt": self._prompt(r.prompt_ids)},
                                       read=lambda a: read_completion(a, chat=False))
        self.served.reported_model = answer.model or self.served.reported_model
        if plan is not None:
            return await self._answer_after_thinking(client, r, answer, stops)
        text = answer.text
        cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)  # servers that overshoot a stop
        if cut >= 0:
            text = text[:cut]
        stopped = cut >= 0 or (bool(stops) and answer.stopped)  # vLLM names the stop
        reason = "length" if answer.finish == "length" else ("stop_string" if stopped else "eos")
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        overrun = None
        if len(ids) > r.max_new_tokens + overrun_slack(r.max_new_tokens):
            overrun = (f"the server sent an answer of {len(ids)} tokens (lctx's count of its text) for max_tokens "
                       f"{r.max_new_tokens}: cut to {r.max_new_tokens}")
            ids, reason = ids[:r.max_new_tokens], "length"
            text = self.tokenizer.decode(ids)
            log.warning("%s: %s", spec.base_url, overrun)
        return Generation(text=text, token_ids=ids, prompt_tokens=len(r.prompt_ids), stop_reason=reason,
                          overrun=overrun)

    async def _answer_after_thinking(self, client: Client, r: GenerateRequest, answer: Completion,
                                     stops: list[str]) -> Generation:
        """A thinking model's generation: the thinking from the server's reasoning field, or
        split from the text by the model's delimiters (a server without a reasoning parser);
        the answer cut to its own budget and stop strings. Thinking that used up the request
        (no answer, finish `length`) is closed for it where the server takes token prompts:
        a second request continues the prompt, the thinking and the forced close. Thinking the
        server sent (or counted) beyond the thinking budget is cut to it and said (`overrun`):
        a record never claims more thinking tokens than the budget allowed."""
        from checkpoints.generate import Generation

        plan = r.think
        assert plan is not None
        text, reasoning, finish = answer.text, answer.reasoning, answer.finish
        thinking, reply = (reasoning, text) if reasoning is not None else plan.format.split(text, plan.inside)
        thinking_ids = self.tokenizer.encode(thinking, add_special_tokens=False) if thinking else []
        thinking_tokens = answer.reasoning_tokens if answer.reasoning_tokens is not None else len(thinking_ids)
        overruns = []
        if len(thinking_ids) > plan.budget + overrun_slack(plan.budget):
            overruns.append(f"a think block of {len(thinking_ids)} tokens (lctx's count of its text) for a thinking "
                            f"budget of {plan.budget}: cut to it")
            thinking = self.tokenizer.decode(thinking_ids[:plan.budget], skip_special_tokens=False)
        if thinking_tokens > plan.budget or thinking_tokens < 0:
            if not overruns:
                overruns.append(f"{thinking_tokens} thinking tokens claimed for a thinking budget of {plan.budget}: "
                                "recorded as the budget")
            thinking_tokens = min(max(thinking_tokens, 0), plan.budget)
        truncated = bool(thinking) and not reply.strip() and finish == "length"
        reason = "length" if finish == "length" else "eos"
        if truncated and self.spec.api_style == "completions":
            raw = text if reasoning is None else thinking
            ids = [*r.prompt_ids, *self.tokenizer.encode(raw, add_special_tokens=False), *plan.answer_ids(True)]
            more = await client.post("/completions", {"model": self.spec.served_model, "prompt": self._prompt(ids),
                                                      "max_tokens": r.max_new_tokens, "temperature": 0},
                                     read=lambda a: read_completion(a, chat=False))
            reply, reason = more.text, "length" if more.finish == "length" else "eos"
        ids = self.tokenizer.encode(reply.lstrip(), add_special_tokens=False)
        if len(ids) > r.max_new_tokens:  # the request's max_tokens held both budgets: the answer keeps its own
            if len(ids) > r.max_new_tokens + plan.budget + overrun_slack(r.max_new_tokens + plan.budget):
                overruns.append(f"an answer of {len(ids)} tokens for max_tokens {r.max_new_tokens + plan.budget}")
            ids, reason = ids[:r.max_new_tokens], "length"
            reply = self.tokenizer.decode(ids)
        reply = reply.lstrip()
        cut = min((i for i in (reply.find(s) for s in stops) if i >= 0), default=-1)
        if cut >= 0:
            reply, reason = reply[:cut], "stop_string"
        overrun = "the server sent " + "; ".join(overruns) if overruns else None
        if overrun:
            log.warning("%s: %s", self.spec.base_url, overrun)
        return Generation(text=reply, token_ids=ids, prompt_tokens=len(r.prompt_ids), stop_reason=reason,
                          thinking=thinking, thinking_tokens=thinking_tokens, thinking_truncated=truncated,
                          overrun=overrun)

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
        keys = [prompt_of(r) for r in requests]
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


@dataclass
class Served:
    """A served model opened to run requests: its `ServedModel` and the `EndpointEngine` over
    it (the served counterpart of `checkpoints.opening.Opened`)."""

    source: ServedModel
    engine: EndpointEngine

    @property
    def behaviour(self) -> str:
        """What its answers depend on beyond its URL and name (`served_behaviour`)."""
        return served_behaviour(self.source.capabilities)

    @property
    def notes(self) -> dict[str, Any]:
        """What results add to its description: token counts estimated (no tokenizer, no /tokenize)."""
        return {"token_counts": "estimated"} if isinstance(self.source.tokenizer, EstimatedTokenizer) else {}


def open_served(spec: EndpointSpec, allowed_hosts: Sequence[str] = LOOPBACK_HOSTS, estimate: bool = False) -> Served:
    """The one way `lctx eval --endpoint`, the worker and a served judge open a served model:
    `connect` (URL checked, tokenizer, probe), then its engine."""
    served = connect(spec, allowed_hosts, estimate=estimate)
    return Served(served, EndpointEngine(served))


@dataclass(frozen=True)
class EndpointTarget:
    """A served model a judge runs on, not connected yet: its identity (URL and model name) is
    known before anything is sent; opening connects with token counts estimated where the chat
    server has no tokenizer to count with (a judge's prompts go as messages)."""

    spec: EndpointSpec
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    kind: Literal["endpoint"] = "endpoint"

    def identity(self) -> str:
        return served_identity(self.spec.base_url, self.spec.served_model)

    def open(self) -> Served:
        return open_served(self.spec, self.allowed_hosts, estimate=True)
