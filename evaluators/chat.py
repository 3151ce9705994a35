"""The checkpoint's own chat template rendered around one user message, for every task
that offers it (the shared `chat_template` option; RULER's template=chat): a sandboxed
Jinja environment, generation prompt added, BOS left to the tokenizer."""

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
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise EvaluatorError(missing)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = lambda msg: (_ for _ in ()).throw(EvaluatorError(msg))
    return env.from_string(template).render(messages=[{"role": "user", "content": prompt}],
                                            add_generation_prompt=True, bos_token="", eos_token="")


def chat_parts(tokenizer: Tokenizer, missing: str, task: str) -> tuple[str, str]:
    """(text before, text after) the user message: rendered once, so a prompt fitted to a
    length by many probes pays for one rendering."""
    rendered = apply_chat_template(tokenizer, _SENTINEL, missing)
    before, sep, after = rendered.partition(_SENTINEL)
    if not sep:
        raise EvaluatorError(f"{task}: the checkpoint's chat template does not show the user message; "
                             "run with chat_template=false")
    return before, after
