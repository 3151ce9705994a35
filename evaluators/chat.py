"""The checkpoint's own chat template rendered around one user message, for every task
that offers it (the shared `chat_template` option; RULER's template=chat), or around a
whole conversation (MRCR's multi-turn prompts): a sandboxed Jinja environment, generation
prompt added, BOS left to the tokenizer. A reasoning model's thinking is switched through
the template's own switch (the task's `thinking` option): the `enable_thinking` variable,
the `/think` / `/no_think` system flag, harmony's `reasoning_effort`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from checkpoints.thinking import EFFORTS, offered, switches, think_format
from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.options import CHAT_TEMPLATE_FILES

_SENTINEL = "\x00lctx-user-message\x00"


def missing_template(task: str, option: str = "chat_template=true") -> str:
    """The refusal of a task asking for a template the checkpoint lacks."""
    return (f"{task}: {option} but the checkpoint has no chat template (looked for {CHAT_TEMPLATE_FILES}); "
            f"run it with chat_template=false, or add the template to the checkpoint")


def thinking_switch(template: str | None, thinking: str) -> tuple[dict[str, Any], str | None]:
    """(template variables, system flag) that apply `thinking` through the template's own
    switch: `enable_thinking` where the template reads it, else the `/think` / `/no_think`
    system message, `reasoning_effort` for harmony's levels (and `on`, its default level).
    Nothing for `default`. EvaluatorError where the template has no such switch."""
    if thinking == "default":
        return {}, None
    found = switches(template)
    if thinking in EFFORTS and found["reasoning_effort"]:
        return {"reasoning_effort": thinking}, None
    if thinking in ("on", "off"):
        if found["enable_thinking"]:
            return {"enable_thinking": thinking == "on"}, None
        if found["flag"]:
            return {}, "/think" if thinking == "on" else "/no_think"
        if thinking == "on" and found["reasoning_effort"]:
            return {}, None  # harmony always reasons: `on` is its default effort
    raise EvaluatorError(f"thinking={thinking}: the chat template has no such switch; it offers "
                         f"thinking={' / '.join(offered(template))}")


def thinking_refusal(template: str | None, added_tokens: list[str], thinking: str | None, where: str) -> str | None:
    """Why `thinking` cannot be applied to a checkpoint whose template and added tokens are
    these (None: it can). `on` on a template with no switch is accepted when its generation
    prompt opens a think block by itself (DeepSeek-R1 distills, Qwen3 Thinking releases)."""
    if thinking in (None, "default"):
        return None
    try:
        thinking_switch(template, thinking)
        return None
    except EvaluatorError:
        pass
    fmt = think_format(added_tokens, template)
    if thinking == "on" and template and fmt is not None and fmt.inside_after(_render_template(template, [
            {"role": "user", "content": "?"}], {}, eos_token="")):
        return None
    what = "no thinking switch" if fmt is None else f"think blocks ({fmt.open} ... {fmt.close}) but no switch"
    return (f"{where}: thinking={thinking}, but its chat template has {what} (no enable_thinking variable, no "
            f"/think and /no_think system flag, no reasoning_effort); it offers thinking="
            f"{' / '.join(offered(template))}")


def apply_chat_template(tokenizer: Tokenizer, prompt: str, missing: str, thinking: str = "default") -> str:
    """`prompt` as the user's message of the tokenizer's chat template, thinking switched as
    asked; EvaluatorError `missing` when the tokenizer has none."""
    return _render(tokenizer, [{"role": "user", "content": prompt}], missing, eos_token="", thinking=thinking)


def render_conversation(tokenizer: Tokenizer, messages: list[dict[str, str]], missing: str,
                        thinking: str = "default") -> str:
    """A conversation (user and assistant turns, in order) in the tokenizer's chat template,
    the generation prompt added for the next assistant turn. Templates that close an assistant
    turn with `eos_token` get the tokenizer's own EOS text (a conversation has such turns);
    BOS stays with the tokenizer's encode, as for one message."""
    eos = tokenizer.decode(tokenizer.eos_ids[:1], skip_special_tokens=False) if tokenizer.eos_ids else ""
    return _render(tokenizer, messages, missing, eos_token=eos, thinking=thinking)


def _render(tokenizer: Tokenizer, messages: list[dict[str, str]], missing: str, eos_token: str,
            thinking: str = "default") -> str:
    template = tokenizer.chat_template
    if not template:
        raise EvaluatorError(missing)
    try:
        variables, flag = thinking_switch(template, thinking)
    except EvaluatorError:
        why = thinking_refusal(template, tokenizer.added_tokens(), thinking, "the checkpoint")
        if why is not None:
            raise EvaluatorError(why) from None
        variables, flag = {}, None  # `on` for a template that always opens a block: what it does anyway
    if flag is not None:  # SmolLM3's switch: a system message carrying the flag (merged into one given)
        if messages and messages[0].get("role") == "system":
            messages = [{**messages[0], "content": f"{messages[0]['content']} {flag}"}, *messages[1:]]
        else:
            messages = [{"role": "system", "content": flag}, *messages]
    return _render_template(template, messages, variables, eos_token)


def _render_template(template: str, messages: list[dict[str, str]], variables: dict[str, Any], eos_token: str) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = lambda msg: (_ for _ in ()).throw(EvaluatorError(msg))
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, bos_token="",
                                            eos_token=eos_token, **variables)


def chat_parts(tokenizer: Tokenizer, missing: str, task: str, thinking: str = "default") -> tuple[str, str]:
    """(text before, text after) the user message: rendered once, so a prompt fitted to a
    length by many probes pays for one rendering."""
    rendered = apply_chat_template(tokenizer, _SENTINEL, missing, thinking)
    before, sep, after = rendered.partition(_SENTINEL)
    if not sep:
        raise EvaluatorError(f"{task}: the checkpoint's chat template does not show the user message; "
                             "run with chat_template=false")
    return before, after


def user_message(tokenizer: Tokenizer, missing: str, task: str, thinking: str = "default") -> Callable[[str], str]:
    """prompt -> the prompt as the one user message of the tokenizer's template, exactly as
    `apply_chat_template` renders it: the text around the message rendered once where the
    template shows a message as it is (whitespace at its ends kept, as most templates do),
    else the whole template rendered per prompt (one that trims the message: Llama 3's)."""
    padded = f" \n{_SENTINEL}\n "
    before, sep, after = apply_chat_template(tokenizer, padded, missing, thinking).partition(padded)
    if sep:
        return lambda prompt: before + prompt + after
    return lambda prompt: apply_chat_template(tokenizer, prompt, missing, thinking)


def served_text(tokenizer: Tokenizer, messages: Sequence[dict[str, str]]) -> str:
    """The text whose tokens count a conversation sent to a chat-style server, which renders
    its own template: the messages in the tokenizer's template where it has one (the served
    model's), else their contents one after another."""
    if tokenizer.chat_template:
        return render_conversation(tokenizer, list(messages), "")
    return "\n\n".join(m["content"] for m in messages)
