"""Which tasks a served model (an OpenAI-compatible endpoint) can run: checked when a job
or `lctx eval --endpoint` is submitted, so a task that would give a wrong number, or
none, is refused with the reason instead of queued."""

from __future__ import annotations

from typing import Any

from evaluators.registry import evaluator_class

WEIGHTS_ONLY = ("rope", "backend")  # job settings that change the weights' computation


def endpoint_refusals(tasks: list[dict[str, Any]], capabilities: dict[str, Any],
                      settings: dict[str, Any] | None = None) -> list[str]:
    """One message per task or setting that cannot apply to the endpoint (empty: all can)."""
    problems = []
    for name, value in (settings or {}).items():
        if name in WEIGHTS_ONLY and value not in (None, "", "auto"):
            problems.append(f"{name}={value!r}: a served model runs on its server's engine with the server's "
                            f"settings; lctx cannot change its {'RoPE scaling' if name == 'rope' else 'attention backend'}"
                            " (serve the model with that setting instead, or evaluate the checkpoint on lctx's engine)")
    for task in tasks:
        cls = evaluator_class(task["name"])
        if cls.run_sample is not None:
            problems.append(f"{task['name']}: reads the model's attention statistics and hidden states, which a "
                            "server does not return; run it on a registered checkpoint")
        elif cls.scores_prompts and not (capabilities.get("prompt_logprobs") and capabilities.get("token_prompts")):
            problems.append(f"{task['name']}: scores prompts by log-likelihood, and this server returns no prompt "
                            "log-probabilities for token-id prompts (echo + logprobs); vLLM and SGLang do")
    return problems
