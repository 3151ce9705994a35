"""The checkpoint's own chat template rendered around one user message, for every task
that offers it (LongBench's chat_template, RULER's template=chat): a sandboxed Jinja
environment, generation prompt added, BOS left to the tokenizer."""

from __future__ import annotations

from jinja2.sandbox import ImmutableSandboxedEnvironment

from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError


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
