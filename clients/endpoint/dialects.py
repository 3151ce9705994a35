"""The server dialects: how each kind of server is asked for the log-probabilities of our
prompt tokens, and how its answer is read (lm-eval keeps one small module per API the
same way). Prompts are scored only by servers that return the log-probabilities of
exactly our tokens, never guessed from generated tokens. Also each server's spelling of
the thinking switch (`thinking_fields`) and of /detokenize's answer (`detokenized`).

Adding a dialect: its request and its reader, and one `Dialect` row in `DIALECTS` (the
probe tries the rows in order; `Capabilities.prompt_scoring` records the name)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checkpoints.errors import EndpointError
from checkpoints.tokenizer import Tokenizer

if TYPE_CHECKING:
    from clients.endpoint.client import Client

Logprobs = tuple[list["float | None"], list[bool]]  # per prompt token (the first None) and whether it was top

def vllm_prompt_logprobs(answer: dict[str, Any], ids: Sequence[int]) -> tuple[list[float | None], list[bool]]:
    """Per-token log-probabilities of `ids` (the first None) and whether each token was the
    model's top choice, from vLLM's completions `choices[0].prompt_logprobs`: one entry per
    prompt token, the first null, each a map from token id to {logprob, rank, decoded_token}
    holding the prompt's token and the top ones."""
    entries = answer["choices"][0].get("prompt_logprobs")
    if not isinstance(entries, list) or len(entries) != len(ids):
        raise EndpointError(f"prompt_logprobs has {len(entries) if isinstance(entries, list) else 'no'} entries for "
                            f"a prompt of {len(ids)} tokens")
    values: list[float | None] = [None]
    top = [False]
    for token, entry in zip(ids[1:], entries[1:], strict=True):
        mine = (entry or {}).get(str(token))
        if not isinstance(mine, dict) or not isinstance(mine.get("logprob"), int | float):
            raise EndpointError(f"prompt_logprobs gives no log-probability for prompt token {token}")
        values.append(float(mine["logprob"]))
        top.append(mine.get("rank") == 1)
    return values, top


def sglang_prompt_logprobs(answer: dict[str, Any], ids: Sequence[int]) -> tuple[list[float | None], list[bool]]:
    """The same from SGLang's /generate `meta_info`: `input_token_logprobs` one
    [logprob, token id, text] per prompt token from `logprob_start_len` 0 (the first
    logprob null), `input_top_logprobs` the top [logprob, token id, text] lists."""
    meta = answer["meta_info"]
    entries, tops = meta.get("input_token_logprobs"), meta.get("input_top_logprobs") or []
    if not isinstance(entries, list) or len(entries) != len(ids):
        raise EndpointError(f"input_token_logprobs has {len(entries) if isinstance(entries, list) else 'no'} "
                            f"entries for a prompt of {len(ids)} tokens")
    values: list[float | None] = [None]
    top = [False]
    for pos in range(1, len(ids)):
        logprob, token = entries[pos][0], entries[pos][1]
        if token != ids[pos] or not isinstance(logprob, int | float):
            raise EndpointError(f"input_token_logprobs[{pos}] is {entries[pos]!r}, not prompt token {ids[pos]}")
        values.append(float(logprob))
        best = tops[pos] if pos < len(tops) else None
        top.append(bool(best) and best[0][1] == ids[pos])
    return values, top


def echo_prompt_logprobs(answer: dict[str, Any], ids: Sequence[int],
                         tokenizer: Tokenizer) -> tuple[list[float | None], list[bool]]:
    """The same from the OpenAI `echo` + `logprobs`: `choices[0].logprobs.token_logprobs` one
    per prompt token (the first may be null), `top_logprobs` maps of token text to logprob."""
    lp = answer["choices"][0].get("logprobs") or {}
    values = list(lp.get("token_logprobs") or [])[: len(ids)]
    tops = list(lp.get("top_logprobs") or [])[: len(ids)]
    if len(values) < len(ids) or any(not isinstance(v, int | float) for v in values[1:]):
        raise EndpointError(f"echo returned {len(values)} prompt log-probabilities for a prompt of {len(ids)} tokens")
    top = [False]
    for pos in range(1, len(ids)):
        best = tops[pos] if pos < len(tops) else None
        top.append(bool(best) and max(best, key=best.get) == tokenizer.decode([ids[pos]], skip_special_tokens=False))
    return [None] + [float(v) for v in values[1:]], top


def vllm_request(model: str, ids: Sequence[int]) -> tuple[str, dict[str, Any], bool]:
    """vLLM's `prompt_logprobs` extension of /v1/completions."""
    return "/completions", {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0,
                            "prompt_logprobs": 1}, False


def sglang_request(model: str, ids: Sequence[int]) -> tuple[str, dict[str, Any], bool]:
    """SGLang's native /generate (at the server's root) with `return_logprob` from `logprob_start_len` 0."""
    return "/generate", {"input_ids": list(ids), "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                         "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 1}, True


def echo_request(model: str, ids: Sequence[int]) -> tuple[str, dict[str, Any], bool]:
    """The OpenAI `echo` + `logprobs` of /v1/completions."""
    return "/completions", {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0, "echo": True,
                            "logprobs": 1}, False


@dataclass(frozen=True)
class Dialect:
    """One way to ask a server for prompt log-probabilities: `request(model, ids)` gives
    (path, body, at the server's root), `read(answer, ids, tokenizer)` the values.
    `token_prompts`: it scores our ids only where the server takes token-id prompts."""

    name: str
    request: Callable[[str, Sequence[int]], tuple[str, dict[str, Any], bool]]
    read: Callable[[dict[str, Any], Sequence[int], Tokenizer], Logprobs]
    token_prompts: bool = True


# In the order the probe tries them.
DIALECTS: tuple[Dialect, ...] = (
    Dialect("vllm", vllm_request, lambda answer, ids, _tok: vllm_prompt_logprobs(answer, ids)),
    Dialect("sglang", sglang_request, lambda answer, ids, _tok: sglang_prompt_logprobs(answer, ids),
            token_prompts=False),  # /generate takes input_ids itself
    Dialect("echo", echo_request, echo_prompt_logprobs),
)
SCORING_METHODS: tuple[str, ...] = tuple(d.name for d in DIALECTS)


def dialect(name: str) -> Dialect:
    """The row of a scoring method (EndpointError for a name no row has)."""
    for row in DIALECTS:
        if row.name == name:
            return row
    raise EndpointError(f"no prompt scoring method {name!r}; known: {', '.join(SCORING_METHODS)}")


async def prompt_logprobs(client: Client, method: str, model: str, ids: Sequence[int],
                          tokenizer: Tokenizer) -> Logprobs:
    """Ask the server for the prompt log-probabilities of `ids` by `method` (SCORING_METHODS)."""
    from clients.endpoint.client import Unusable, shown

    row = dialect(method)
    path, body, root = row.request(model, ids)

    def read(answer: dict[str, Any]) -> Logprobs:
        """The values, or `Unusable` (retried as a server error) naming what is not as documented."""
        try:
            return row.read(answer, ids, tokenizer)
        except EndpointError as e:
            raise Unusable(f"{e}: {shown(answer)}") from None
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            raise Unusable(f"the {method} prompt log-probabilities are not in the documented shape "
                           f"({type(e).__name__}: {e}): {shown(answer)}") from None

    return await client.post(path, body, root=root, read=read)


# A served model's thinking switch per setting of the `thinking` option, as the chat request's fields.
SWITCH_FIELDS = {"enable_thinking": {"chat_template_kwargs": {"enable_thinking": False}},
                 "reasoning_effort": {"reasoning_effort": "low"}}


def thinking_fields(setting: str) -> dict[str, Any]:
    """The chat request's fields that switch a served model's thinking as the task asks:
    `chat_template_kwargs` (Qwen3's and SmolLM3's enable_thinking) or `reasoning_effort`
    (gpt-oss); nothing for `default`."""
    if setting in ("on", "off"):
        return {"chat_template_kwargs": {"enable_thinking": setting == "on"}}
    if setting in ("low", "medium", "high"):
        return {"reasoning_effort": setting}
    return {}


def detokenized(answer: Any) -> str | None:
    """The text of a /detokenize answer: vLLM's `prompt`, SGLang's `text`."""
    if not isinstance(answer, dict):
        return None
    text = answer.get("prompt", answer.get("text"))
    return text if isinstance(text, str) else None
