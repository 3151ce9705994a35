"""Reasoning models' think blocks: where a checkpoint's tokenizer and chat template say a
block of thinking opens and closes, how a generation's text splits into thinking and
answer, and the plan a generate request carries so the engine gives thinking its own
budget (docs/protocols/reasoning.md).

The delimiters are read from the files, not from a list of model names: a pair of added
tokens or template tags `X` / `X` with a slash after its first character whose name
says think or reason (`<think>`/`</think>` of Qwen3, DeepSeek-R1, SmolLM3;
`[THINK]`/`[/THINK]` of Magistral), or harmony's channel markers (gpt-oss: the
`analysis` channel thinks, the `final` channel answers). No torch: the API's
submission checks read this module."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

# The `thinking` option: the chat template's own switch, set on or off, or left as the
# template has it (`default`); low / medium / high are harmony's reasoning_effort values.
Thinking = Literal["default", "on", "off", "low", "medium", "high"]
EFFORTS = ("low", "medium", "high")
# Tokens a think block may take unless a task says otherwise (`thinking_budget`): enough
# for a hybrid model's usual block on retrieval tasks (Qwen3-8B's RULER blocks run a few
# hundred to two thousand tokens), small enough that a batch's rows reserve little room.
DEFAULT_THINKING_BUDGET = 2048
# Whitespace tokens between the end of thinking and the answer ("</think>\n\n") that are
# not counted as the answer's (a stop string "\n" must not end it before it starts).
SEPARATOR_TOKENS = 4

_TAG = re.compile(r"<\|?/?[A-Za-z][\w:.-]*\|?>|\[/?[A-Z][A-Z_]*\]")
_THINKY = re.compile(r"think|reason", re.IGNORECASE)
HARMONY_CHANNEL, HARMONY_MESSAGE = "<|channel|>", "<|message|>"


@dataclass(frozen=True)
class ThinkFormat:
    """How a model's output marks its thinking. `open` / `close` delimit the block (for
    harmony: the analysis channel's header, and the final channel's header which ends it);
    `force` is the text appended to close a block whose budget ran out (budget forcing)."""

    open: str
    close: str
    force: str
    style: Literal["tags", "harmony"] = "tags"

    def inside_after(self, prompt: str) -> bool:
        """Whether `prompt` ends inside an open block (a generation prompt that opens it:
        DeepSeek-R1's `<think>\\n`)."""
        opened = prompt.rfind(self.open)
        return opened >= 0 and prompt.rfind(self.close) < opened

    def split(self, raw: str, inside: bool = False) -> tuple[str | None, str]:
        """(thinking, answer) of a generated text whose special tokens are kept; thinking
        None when the text opens no block. A block never closed is all thinking."""
        head = raw.lstrip()
        if not inside and not head.startswith(self.open):
            return None, raw
        body = raw if inside else head[len(self.open):]
        end = body.find(self.close)
        if end < 0:
            return self._clean(body), ""
        return self._clean(body[:end]), body[end + len(self.close):].lstrip()

    def _clean(self, thinking: str) -> str:
        if self.style == "harmony":  # "...<|end|><|start|>assistant" before the final channel's header
            thinking = re.sub(r"<\|end\|>(<\|start\|>assistant)?$", "", thinking.rstrip())
        return thinking.strip()

    def as_dict(self) -> dict[str, str]:
        return {"open": self.open, "close": self.close, "style": self.style}


# A served model known only by its server (no tokenizer folder): the delimiters of most open
# reasoning models, used only to split a reply whose server has no reasoning parser.
SERVED_FALLBACK = ThinkFormat(open="<think>", close="</think>", force="\n</think>\n\n")


def think_format(added_tokens: list[str], template: str | None) -> ThinkFormat | None:
    """The think delimiters a checkpoint declares: among its added tokens and the tags its
    chat template writes, harmony's channel markers, or a pair `X` / `X`-with-a-slash
    whose name says think or reason. None: the model marks no thinking."""
    candidates = set(added_tokens) | set(_TAG.findall(template or ""))
    if HARMONY_CHANNEL in candidates and HARMONY_MESSAGE in candidates and template \
            and "analysis" in template and "final" in template:
        final = f"{HARMONY_CHANNEL}final{HARMONY_MESSAGE}"
        return ThinkFormat(open=f"{HARMONY_CHANNEL}analysis{HARMONY_MESSAGE}", close=final,
                           force=f"<|end|><|start|>assistant{final}", style="harmony")
    pairs = sorted(c for c in candidates
                   if len(c) > 2 and c[1] != "/" and _THINKY.search(c) and f"{c[0]}/{c[1:]}" in candidates)
    if not pairs:
        return None
    opening = pairs[0]
    closing = f"{opening[0]}/{opening[1:]}"
    return ThinkFormat(open=opening, close=closing, force=f"\n{closing}\n\n")


@dataclass(frozen=True)
class ThinkPlan:
    """What a generate request carries when its model may think: the delimiters, whether
    the prompt already opened the block, the tokens thinking may take (`budget`, delimiters
    included) and the ids appended when it runs out (`force_ids`: the close; the answer is
    then generated with the request's own `max_new_tokens`). `prefix_ids`: the task's answer
    prefix (RULER's "The special magic number ... is"), written after the block rather than
    before it, so a model that thinks answers after its thinking as the protocol prompts it.
    `setting` is the task's thinking option, which a served model's request carries as the
    server's switch."""

    format: ThinkFormat
    budget: int
    force_ids: tuple[int, ...]
    inside: bool = False
    setting: str = "default"
    prefix_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "force_ids", tuple(self.force_ids))
        object.__setattr__(self, "prefix_ids", tuple(self.prefix_ids))
        if self.budget < 1:
            raise ValueError(f"a thinking budget must be at least 1 token, got {self.budget}")

    def answer_ids(self, forced: bool) -> tuple[int, ...]:
        """What follows the block before the answer is generated: the forced close when the
        budget ran out, then the answer prefix."""
        return (*(self.force_ids if forced else ()), *self.prefix_ids)


def switches(template: str | None) -> dict[str, Any]:
    """The thinking switches a chat template reads: `enable_thinking` (Qwen3, SmolLM3),
    the `/think` / `/no_think` system flag (SmolLM3), harmony's `reasoning_effort`
    (gpt-oss), and whether its generation prompt opens a block by itself."""
    if not template:
        return {"enable_thinking": False, "flag": False, "reasoning_effort": False}
    variables = _variables(template)
    return {"enable_thinking": "enable_thinking" in variables,
            "flag": "/no_think" in template and "/think" in template,
            "reasoning_effort": "reasoning_effort" in variables}


def offered(template: str | None) -> list[str]:
    """The settings of the `thinking` option a template can apply, in words for a refusal."""
    found = switches(template)
    values = ["default"]
    if found["enable_thinking"] or found["flag"]:
        values += ["on", "off"]
    if found["reasoning_effort"]:
        values += ["on", *EFFORTS]
    return values


def _variables(template: str) -> set[str]:
    from jinja2 import meta
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        return meta.find_undeclared_variables(ImmutableSandboxedEnvironment().parse(template))
    except Exception:  # noqa: BLE001 - a template jinja cannot parse is refused where it is rendered
        return set()
