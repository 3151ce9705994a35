"""The checkpoint's own chat template rendered around one user message, for every task
that offers it (the shared `chat_template` option; RULER's template=chat), or around a
whole conversation (MRCR's multi-turn prompts): a sandboxed Jinja environment, generation
prompt added, BOS left to the tokenizer."""

from __future__ import annotations

from jinja2.sandbox import ImmutableSandboxedEnvironment

from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.options import CHAT_TEMPLATE_FILES

_SENTINEL = "\x00lctx-user-message\x00"


def missing_template(task: str, option: str = "chat_template=true") -> str:
    """The refusal of a task asking for a template the checkpoint lacks."""
    return (f"{task}: {option} but the checkpoint has no chat template (looked for {CHAT_TEMPLATE_FILES}); "
            f"run it with chat_template=false, or add the template to the checkpoint")


def apply_chat_template(tokenizer: Tokenizer, prompt: str, missing: str) -> str:
    """`prompt` as the user's message of the tokenizer's chat template; EvaluatorError
    `missing` when the tokenizer has none."""
    return _render(tokenizer, [{"role": "user", "content": prompt}], missing, eos_token="")


def render_conversation(tokenizer: Tokenizer, messages: list[dict[str, str]], missing: str) -> str:
    """A conversation (user and assistant turns, in order) in the tokenizer's chat template,
    the generation prompt added for the next assistant turn. Templates that close an assistant
    turn with `eos_token` get the tokenizer's own EOS text (a conversation has such turns);
    BOS stays with the tokenizer's encode, as for one message."""
    eos_ids = getattr(tokenizer, "eos_ids", None) or []
    eos = tokenizer.decode([eos_ids[0]], skip_special_tokens=False) if eos_ids else ""
    return _render(tokenizer, messages, missing, eos_token=eos)


def _render(tokenizer: Tokenizer, messages: list[dict[str, str]], missing: str, eos_token: str) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise EvaluatorError(missing)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = lambda msg: (_ for _ in ()).throw(EvaluatorError(msg))
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, bos_token="",
                                            eos_token=eos_token)


def chat_parts(tokenizer: Tokenizer, missing: str, task: str) -> tuple[str, str]:
    """(text before, text after) the user message: rendered once, so a prompt fitted to a
    length by many probes pays for one rendering."""
    rendered = apply_chat_template(tokenizer, _SENTINEL, missing)
    before, sep, after = rendered.partition(_SENTINEL)
    if not sep:
        raise EvaluatorError(f"{task}: the checkpoint's chat template does not show the user message; "
                             "run with chat_template=false")
    return before, after
