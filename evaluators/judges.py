"""Judges: a model that grades another model's answers (AA-LCR's equality checker) as a
first-class part of a task run (docs/protocols/judges.md).

- `Judge`: one interface met by a served judge (an OpenAI-compatible endpoint:
  `clients.endpoint.ServedModel` with its `EndpointEngine`) and a local one (a checkpoint on
  lctx's `Engine`). Both are a `ModelSource` and an `LM`, so a judge prompt (chat messages)
  becomes one `GenerateRequest` either way: a chat-style server gets the messages as they
  are, lctx's engine the checkpoint's chat template around them. A judge that reasons gets a
  think plan: its verdict is read from the answer after the block; the block is recorded.
- `JudgmentCache`: the judge's answers on disk by (judge identity, how it generates, the
  prompt), so a rerun, a resumed job or a repeat whose answer is the same asks nothing twice.
  Each writing process appends to a file of its own (appends of several workers to one file
  would interleave); every file of the folder is read, as data: an entry that is not a reply
  (`reply_problem`: an answer that is a number, a field missing, thinking beyond the budget)
  is skipped and logged, and its prompt asked again.
- `Judging`: a task's judge with its budgets and the cache. `ask(prompts)` gives each prompt
  its `judgment`, the sample record's field: the judge's name (`name@identity`), its
  settings (never a key), its raw answer and think block, whether the cache answered.

- `open_judge`: the one way a judge is opened, from a `JudgeTarget` its caller names (the
  service's worker from the job's spec, `lctx eval` and `lctx score` from their flags): a
  checkpoint folder (`checkpoints.opening.CheckpointTarget`) or a served model
  (`clients.endpoint.engine.EndpointTarget`); its identity checked against the pin before it
  is opened, the judge checked to take chat messages after. Evaluators never import the
  network clients: the target opens itself. No torch at import."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import socket
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from checkpoints import jsonfiles
from checkpoints.thinking import SERVED_FALLBACK, ThinkFormat, ThinkPlan, think_format
from evaluators.errors import EvaluatorError

if TYPE_CHECKING:
    from checkpoints.lm import LM, ModelSource, OpenedModel
    from evaluators.options import TaskOptions

log = logging.getLogger("lctx.judges")

JUDGMENTS_DIR = "judgments"  # the cache's folder: in a run's folder (`lctx eval`) or the service's results
Messages = Sequence[dict[str, str]]
_REF = re.compile(r"^(?P<name>.+)@(?P<id>[0-9a-f]{12})$")
_PROMPT_TAIL = 64  # prompt tokens decoded to see whether the generation prompt opens a think block


def split_ref(ref: str) -> tuple[str, str | None]:
    """(name, the identity's first 12 hex digits or None) of a judge option: `grader` or
    `grader@3f2a9c1b0d4e` (the form a job records)."""
    found = _REF.match(ref)
    return (found["name"], found["id"]) if found else (ref, None)


def pinned_ref(name: str, identity: str) -> str:
    """The judge option a job records: its name and identity, so the configuration hash and
    the leaderboard's row tell two judges apart even under one name."""
    return f"{name}@{identity[:12]}"


def check_pin(ref: str, identity: str) -> None:
    """A judge named `name@id` must still be that model (EvaluatorError otherwise): an
    endpoint registered again under the name, or a checkpoint retrained in place, would mix
    another judge's verdicts into the job's results."""
    name, pinned = split_ref(ref)
    if pinned is not None and not identity.startswith(pinned):
        raise EvaluatorError(f"the judge {name} is now another model (identity {identity[:12]}, the job names "
                             f"{pinned}); submit the job again to grade with it, or restore that judge")


@dataclass
class JudgeReply:
    """What the judge said to one prompt: its answer (after any think block) and the block."""

    text: str
    thinking: str | None = None
    thinking_tokens: int = 0
    stop_reason: str = "eos"
    error: str | None = None  # why it was not asked (its prompt does not fit the judge's context)
    overrun: str | None = None  # what the judge's server sent beyond the budgets asked (cut here)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"answer": self.text, "thinking": self.thinking, "thinking_tokens": self.thinking_tokens,
                               "stop_reason": self.stop_reason}
        if self.overrun:
            out["overrun"] = self.overrun
        return {**out, "error": self.error} if self.error else out


# A cached reply's fields and the types each may have (JudgeReply.as_dict without `error`:
# a reply the judge was not asked for is never cached); `answer` and `stop_reason` required.
REPLY_FIELDS: dict[str, tuple[type, ...]] = {"answer": (str,), "thinking": (str, type(None)),
                                             "thinking_tokens": (int,), "stop_reason": (str,),
                                             "overrun": (str, type(None))}


# Characters a cached reply's text may hold per token of its budget (a token is a few characters;
# generous), beyond a fixed room: a 50 MB think block cached by an older version is not copied on.
CHARS_PER_TOKEN = 32
CHARS_SLACK = 4096


def reply_problem(reply: Any, thinking_budget: int | None = None, max_new_tokens: int | None = None) -> str | None:
    """Why a cached entry is not a judge's reply (None: it is): not an object, a field missing,
    unknown or of another type (an answer that is a number or an object), negative thinking
    tokens, or, for the judging asking, more thinking tokens than `thinking_budget` allows or
    text far longer than its budgets could make (`CHARS_PER_TOKEN`)."""
    if not isinstance(reply, dict):
        return f"the reply is a {type(reply).__name__}, not an object"
    missing = [k for k in ("answer", "stop_reason") if k not in reply]
    if missing:
        return f"no {', '.join(missing)}"
    for key, value in reply.items():
        types = REPLY_FIELDS.get(key)
        if types is None:
            return f"unknown field {key!r}"
        if not isinstance(value, types) or isinstance(value, bool):
            return f"{key} is {type(value).__name__}, not {' or '.join(t.__name__ for t in types)}"
    tokens = reply.get("thinking_tokens", 0)
    if tokens < 0 or (thinking_budget is not None and tokens > thinking_budget):
        return f"thinking_tokens {tokens} is outside 0..{thinking_budget if thinking_budget is not None else ''}"
    for key, budget in (("answer", max_new_tokens), ("thinking", thinking_budget)):
        text = reply.get(key) or ""
        if budget is not None and len(text) > CHARS_SLACK + CHARS_PER_TOKEN * budget:
            return f"its {key} is {len(text):,} characters, more than a budget of {budget} tokens makes"
    return None


@dataclass
class Judge:
    """A model that answers judge prompts: `source` and `engine` are a served model and its
    `EndpointEngine`, or a loaded checkpoint and lctx's `Engine`. `identity` (sha256 hex) is
    what makes its answers its own: a served judge's URL and model, a checkpoint's weights;
    `details` what records show of it (URL, model, style; a checkpoint's name), never a key."""

    name: str
    identity: str
    kind: Literal["endpoint", "checkpoint"]
    source: ModelSource
    engine: LM
    details: dict[str, Any] = field(default_factory=dict)
    # How a served judge behaves beyond its URL and model (`clients.endpoint.engine.served_behaviour`: the
    # server's software and version, its probe's answers): part of the cache key, so a judge whose server
    # changed is asked again rather than answered from the old cache. "" for a checkpoint (its weights are
    # its identity).
    behaviour: str = ""

    @property
    def ref(self) -> str:
        return pinned_ref(self.name, self.identity)

    @property
    def served(self) -> bool:
        return self.source.served

    @property
    def chat_served(self) -> bool:
        return self.source.chat_api

    def think_format(self) -> ThinkFormat | None:
        """The judge's think delimiters (its tokenizer's and template's). A served judge always has
        some (its tokenizer's, else the usual tags): its server's reasoning field, or a reply from a
        server without a reasoning parser, is then kept apart from the answer the verdict is read
        from, whatever the registration says of the model."""
        tokenizer = self.source.tokenizer
        found = think_format(tokenizer.added_tokens(), tokenizer.chat_template)
        return found or (SERVED_FALLBACK if self.served else None)

    def template_sha256(self) -> str | None:
        template = self.source.tokenizer.chat_template
        return hashlib.sha256(template.encode()).hexdigest()[:16] if template else None

    def prompt_ids(self, messages: Messages) -> list[int]:
        """The prompt's ids: the messages in the judge's chat template (what lctx's engine and a
        completions-style server read); a chat-style server without a tokenizer template gets the
        messages themselves, the ids only counting them."""
        from evaluators.chat import render_conversation

        tokenizer = self.source.tokenizer
        if tokenizer.chat_template:
            return tokenizer.encode(render_conversation(tokenizer, list(messages), ""))
        if self.chat_served:
            return tokenizer.encode("\n\n".join(m["content"] for m in messages))
        raise EvaluatorError(f"judge {self.name}: a judge is asked chat messages, and this {self.kind} has no chat "
                             "template (chat_template.jinja, or tokenizer_config.json's 'chat_template'); add the "
                             "template, or serve the judge and register its chat API (api_style chat)")

    def check(self) -> None:
        """EvaluatorError when this judge cannot be asked chat messages (no template where one is
        needed): at submission and before `lctx eval` loads the model under test."""
        self.prompt_ids([{"role": "user", "content": "CORRECT or INCORRECT?"}])

    def answer(self, prompts: Sequence[Messages], max_new_tokens: int, thinking_budget: int) -> list[JudgeReply]:
        """The judge's replies in prompt order, greedy. A prompt that does not fit the judge's
        context (with both budgets) is not sent: its reply says so. Run on a thread of its own:
        a judge asked from inside a served model's answer handler (an asyncio loop) can start
        its own loop there."""
        from checkpoints.requests import GenerateRequest

        tokenizer, fmt = self.source.tokenizer, self.think_format()
        context = self.source.config.effective_context
        requests, replies = [], [JudgeReply("") for _ in prompts]
        for i, messages in enumerate(prompts):
            ids = self.prompt_ids(messages)
            plan = None
            if fmt is not None:
                tail = tokenizer.decode(list(ids[-_PROMPT_TAIL:]), skip_special_tokens=False)
                plan = ThinkPlan(fmt, thinking_budget, tuple(tokenizer.encode(fmt.force, add_special_tokens=False)),
                                 inside=fmt.inside_after(tail))
            request = GenerateRequest(ids, max_new_tokens=max_new_tokens, messages=tuple(dict(m) for m in messages),
                                      think=plan)
            if len(ids) + request.most_new_tokens > context:
                replies[i] = JudgeReply("", stop_reason="beyond_context", error=(
                    f"the judge prompt's {len(ids)} tokens and its budgets ({request.most_new_tokens} new tokens) "
                    f"exceed the judge's context of {context} tokens"))
            else:
                requests.append((i, request))
        if requests:
            with ThreadPoolExecutor(1, thread_name_prefix="lctx-judge") as pool:
                done = pool.submit(self.engine.generate_until, [r for _, r in requests]).result()
            for (i, _), generation in zip(requests, done, strict=True):
                replies[i] = JudgeReply(generation.text, generation.thinking, generation.thinking_tokens,
                                        generation.stop_reason, overrun=generation.overrun)
        return replies


class JudgeTarget(Protocol):
    """A judge's model before it is opened: what identifies it (read first, cheaply) and how it
    opens (loading weights, connecting to a server)."""

    @property
    def kind(self) -> Literal["endpoint", "checkpoint"]: ...

    def identity(self) -> str: ...

    def open(self) -> OpenedModel: ...


def open_judge(name: str, ref: str, target: JudgeTarget, details: dict[str, Any] | None = None) -> Judge:
    """The judge `ref` names (`name` or `name@identity`), opened from `target`: EvaluatorError
    before anything loads when the target is no longer the pinned model, or once opened when
    it cannot be asked chat messages (no template where one is needed). `details`: how
    results name it (what the target notes when opened is added)."""
    identity = target.identity()
    check_pin(ref, identity)
    opened = target.open()
    judge = Judge(name, identity, target.kind, opened.source, opened.engine, {**(details or {}), **opened.notes},
                  behaviour=opened.behaviour)
    judge.check()
    return judge


class JudgmentCache:
    """Judge replies on disk under `folder`, by key (`Judging.key`). Entries written by any
    process are read when the cache opens, as data: a line that is not JSON or not UTF-8, or
    an entry that is not a reply (`reply_problem`), is skipped with a warning, so its prompt
    is asked again; this process appends to its own file."""

    def __init__(self, folder: Path, refresh: bool = False) -> None:
        """`refresh`: read nothing already on disk (every prompt is asked again and its reply
        cached anew), for a judge whose answers should not be taken from earlier runs."""
        self.folder = Path(folder)
        self._entries: dict[str, dict[str, Any]] = {}
        self._file: Path | None = None
        self._lock = threading.Lock()
        if self.folder.is_dir() and not refresh:
            for path in sorted(self.folder.glob("*.jsonl")):
                for lineno, rec in jsonfiles.records(path, strict=False):  # a line cut by a crash: asked again
                    problem = "no key" if not isinstance(rec.get("key"), str) else reply_problem(rec.get("reply"))
                    if problem is None:
                        self._entries[rec["key"]] = rec["reply"]
                    else:
                        log.warning("%s:%d: not a judge reply (%s): skipped, its prompt is asked again", path,
                                    lineno, problem)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._entries.get(key)

    def drop(self, key: str, why: str) -> None:
        """Forget an entry that does not fit the judging asking for it (logged): it is asked again."""
        with self._lock:
            if self._entries.pop(key, None) is not None:
                log.warning("judgment cache entry %s skipped (%s): asked again", key[:12], why)

    def put(self, key: str, reply: dict[str, Any]) -> None:
        with self._lock:
            self._entries[key] = reply
            if self._file is None:
                self._file = self.folder / f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
            jsonfiles.append_record(self._file, {"key": key, "reply": reply})

    def __len__(self) -> int:
        return len(self._entries)


class Judging:
    """A task's judge, its budgets and the cache: what an evaluator that needs a judge holds
    (`Evaluator.judging`). `asked` counts the prompts this run sent to the judge."""

    def __init__(self, judge: Judge, cache: JudgmentCache, max_new_tokens: int, thinking_budget: int) -> None:
        self.judge, self.cache = judge, cache
        self.max_new_tokens, self.thinking_budget = max_new_tokens, thinking_budget
        self.asked = 0
        fmt = judge.think_format()
        self._generation = {"temperature": 0.0, "max_new_tokens": max_new_tokens,
                            "thinking_budget": thinking_budget if fmt is not None else None,
                            "think_format": fmt.as_dict() if fmt is not None else None,
                            "chat_template_sha256": judge.template_sha256()}

    @classmethod
    def of(cls, judge: Judge, cache: JudgmentCache, options: TaskOptions) -> Judging:
        """The judging a task's options ask for (`JudgeOptions`: the judge's budgets); the judge
        must be the one they name (`check_pin`)."""
        ref = options.judge_ref()
        if ref is None:
            raise EvaluatorError(options.judge_problems()[0])  # type: ignore[attr-defined]
        check_pin(ref, judge.identity)
        return cls(judge, cache, options.judge_max_new_tokens, options.judge_thinking_budget)  # type: ignore[attr-defined]

    def settings(self) -> dict[str, Any]:
        """What every judgment records of the judge: its name, kind, where it runs, how it
        generates (greedy, budgets, think delimiters, template hash). No key, no key's name."""
        return {"kind": self.judge.kind, **self.judge.details, **self._generation}

    def key(self, messages: Messages) -> str:
        """The cache key of a prompt: the judge's identity, how it generates, the messages."""
        judged = {"judge": self.judge.identity, "generation": self._generation, "messages": [dict(m) for m in messages]}
        if self.judge.behaviour:
            judged["behaviour"] = self.judge.behaviour
        canonical = json.dumps(judged, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def ask(self, prompts: Sequence[Messages]) -> list[dict[str, Any]]:
        """The judgment of each prompt, in order: from the cache, or asked (each distinct prompt
        once) and cached. A reply the judge could not be asked for (`error`) is not cached."""
        keys = [self.key(p) for p in prompts]
        fresh: dict[str, int] = {}  # key -> the first prompt asking it
        failed: dict[str, dict[str, Any]] = {}
        budget = self._generation["thinking_budget"]
        for key in dict.fromkeys(keys):
            entry = self.cache.get(key)
            problem = reply_problem(entry, budget, self.max_new_tokens) if entry is not None else None
            if problem is not None:  # e.g. more thinking than this judging allows: never recorded as said
                self.cache.drop(key, problem)
        for i, key in enumerate(keys):
            if key not in fresh and self.cache.get(key) is None:
                fresh[key] = i
        if fresh:
            replies = self.judge.answer([prompts[i] for i in fresh.values()], self.max_new_tokens,
                                        self.thinking_budget)
            for key, reply in zip(fresh, replies, strict=True):
                if reply.error is None:
                    self.cache.put(key, reply.as_dict())
                    self.asked += 1
                else:
                    failed[key] = reply.as_dict()
        settings = self.settings()
        out = []
        for i, key in enumerate(keys):
            reply = failed.get(key) or self.cache.get(key) or {}
            cached = key not in fresh or fresh[key] != i
            out.append({"judge": self.judge.ref, "settings": settings, **reply, "cached": cached,
                        "prompt_sha256": key})
        return out
