"""OpenAI-MRCR's protocol as the dataset card (huggingface.co/datasets/openai/mrcr,
README.md) gives it: the conversation `json.loads(prompt)` sent as chat messages, `grade`
(0 unless the response starts with `random_string_to_prepend`; otherwise difflib's
SequenceMatcher ratio of response and answer, the prefix removed from both), `n_tokens`
(o200k_base tokens of each message's content, summed) and the length bins of its
"Implementation details" (prompt + answer tokens; [4096, 8192], (8192, 16384], ...,
(524288, 1048576]). Written from reading the card, not copied; see
docs/protocols/mrcr_graphwalks.md. No torch: `lctx score mrcr` and the tests use it alone."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from difflib import SequenceMatcher
from typing import Any

from evaluators.errors import EvaluatorError
from evaluators.mrcr.options import BIN_NAMES

# The card's bin boundaries: each bin holds the rows whose prompt + answer tokens are above the
# previous edge and at most its own (the first is [4096, 8192]; a row under 4096 would count there).
BIN_EDGES = (8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
OVER = "over_1M"  # beyond the card's last edge (none of the released rows; another tokenizer's count may be)
ROLES = ("system", "developer", "user", "assistant")


def grade(response: str, answer: str, random_string_to_prepend: str) -> float:
    """The card's `grade`: the response as the model gave it (nothing stripped, a think block
    included), 0 unless it starts with the prefix; else the ratio of SequenceMatcher(None,
    response, answer) with the prefix removed from the start of both (autojunk as default)."""
    if not response.startswith(random_string_to_prepend):
        return 0.0
    response = response.removeprefix(random_string_to_prepend)
    answer = answer.removeprefix(random_string_to_prepend)
    return float(SequenceMatcher(None, response, answer).ratio())


def length_bin(tokens: int) -> str:
    """The bin of a row with this many tokens (prompt + answer): the name of the first edge
    not below it ("8k" ... "1M"), or `OVER`."""
    for edge, name in zip(BIN_EDGES, BIN_NAMES, strict=True):
        if tokens <= edge:
            return name
    return OVER


def bin_order(name: str) -> int:
    return BIN_NAMES.index(name) if name in BIN_NAMES else len(BIN_NAMES)


def messages_of(prompt: str, where: str) -> list[dict[str, str]]:
    """The conversation of a row: its `prompt` column is a JSON array of {role, content}."""
    try:
        messages = json.loads(prompt)
    except json.JSONDecodeError as e:
        raise EvaluatorError(f"{where}: its prompt is not JSON ({e.msg}); MRCR's prompt column is a JSON array of "
                             "chat messages") from None
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in messages):
        raise EvaluatorError(f"{where}: its prompt is not a list of messages {{role, content}} with roles "
                             f"{', '.join(ROLES)}")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def bin_tokens(count: Callable[[str], int], messages: list[dict[str, str]], answer: str) -> int:
    """The tokens a row's bin is read from: the card's n_tokens (each message's content
    counted alone, summed; no per-message overhead) plus the answer's."""
    return sum(count(m["content"]) for m in messages) + count(answer)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def table(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Scores of graded rows (`score` a float) and counts of rows beyond the model's
    context (`beyond_context` true): overall, per needle count, per official bin, per needle
    count x bin, and per bin of the model's own tokens (`own_bin`, where the rows carry it).
    Each cell is {"score": mean or None, "n": graded rows, "beyond": rows not run}."""
    cells: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"scores": [], "beyond": 0})
    for r in rows:
        keys = [("overall", "all"), ("needles", str(r["n_needles"])), ("bin", r["bin"]),
                (f"needles={r['n_needles']}", r["bin"])]
        if r.get("own_bin"):
            keys.append(("own_bin", r["own_bin"]))
        for key in keys:
            if r.get("beyond_context"):
                cells[key]["beyond"] += 1
            else:
                cells[key]["scores"].append(float(r["score"]))
    out: dict[str, Any] = defaultdict(dict)
    for (group, key), c in cells.items():
        out[group][key] = {"score": _mean(c["scores"]), "n": len(c["scores"]), "beyond": c["beyond"]}
    for group in out:
        order = (lambda k: int(k)) if group == "needles" else bin_order if group != "overall" else str
        out[group] = dict(sorted(out[group].items(), key=lambda kv: order(kv[0])))
    return dict(out)
