"""Which tasks a served model (an OpenAI-compatible endpoint) can run: checked when a job
or `lctx eval --endpoint` is submitted, so a task that would give a wrong number, or
none, is refused with the reason instead of queued. What needs no answer of the server
(a RoPE override, an attention backend, lctx's engine settings, diagnostics, prompt
scoring in chat style) is refused before any request is sent; whether the server scores
prompts is known after its probe."""

from __future__ import annotations

from typing import Any

from evaluators.registry import evaluator_class, parse_task

WEIGHTS_ONLY = ("rope", "backend")  # job settings that change the weights' computation
ENGINE_ONLY = ("dtype", "device", "memory_mb")  # settings of lctx's engine, which a served model does not run on
WHAT = {"rope": "RoPE scaling", "backend": "attention backend", "dtype": "dtype", "device": "device",
        "memory_mb": "KV-cache budget"}
UNSET = (None, "", "auto", "cpu")  # "cpu": the CLI's --device default


def endpoint_refusals(tasks: list[dict[str, Any]], capabilities: dict[str, Any] | None,
                      settings: dict[str, Any] | None = None, api_style: str = "completions") -> list[str]:
    """One message per task or setting that cannot apply to the endpoint (empty: all can).
    `capabilities` None: the server has not been asked yet, so only what is refused whatever
    it would answer is refused."""
    problems = []
    for name, value in (settings or {}).items():
        if (name in WEIGHTS_ONLY or name in ENGINE_ONLY) and value not in UNSET:
            problems.append(f"{name}={value!r}: a served model runs on its server's engine with the server's "
                            f"settings; lctx cannot change its {WHAT[name]} (serve the model with that setting "
                            "instead, or evaluate the checkpoint on lctx's engine)")
    for task in tasks:
        cls = evaluator_class(task["name"])
        if cls.run_sample is not None:
            problems.append(f"{task['name']}: reads the model's attention statistics and hidden states, which a "
                            "server does not return; run it on a registered checkpoint")
        elif cls.scores_prompts and api_style == "chat":
            problems.append(f"{task['name']}: scores prompts by log-likelihood, and a chat-style endpoint returns no "
                            "prompt log-probabilities (the server wraps the prompt in its chat template); register "
                            "the server's completions API (api_style completions) for this task")
        elif api_style != "chat" and parse_task(task).thinking_without_template() is not None:
            problems.append(f"{task['name']}: thinking={task['thinking']} is applied through the chat template: with a "
                            "completions-style endpoint set chat_template=true (lctx renders the switch with the "
                            "tokenizer folder's template), or register the server's chat API (api_style chat: the "
                            "request carries chat_template_kwargs or reasoning_effort)")
        elif cls.scores_prompts and capabilities is not None and not scores_prompts(capabilities):
            problems.append(f"{task['name']}: scores prompts by log-likelihood, and this server returns no prompt "
                            "log-probabilities for our tokens (vLLM's prompt_logprobs, SGLang's /generate with "
                            "return_logprob, or echo + logprobs with token-id prompts)")
    return problems


def scores_prompts(capabilities: dict[str, Any]) -> bool:
    """Whether the probe found a way to score our tokens (a registration from before
    `prompt_scoring` was recorded: prompt logprobs of token-id prompts)."""
    if "prompt_scoring" in capabilities:
        return bool(capabilities["prompt_scoring"])
    return bool(capabilities.get("prompt_logprobs") and capabilities.get("token_prompts"))
