"""LongBench v2's protocol, matched to THUDM/LongBench at its top level (commit 2e00731):
the prompt files `prompts/0shot.txt`, `0shot_cot.txt`, `0shot_cot_ans.txt`,
`0shot_no_context.txt`, `0shot_rag.txt`; `pred.py`'s `get_pred` (which template, how it is
filled, the RAG context), `query_llm` (middle truncation, generation lengths) and
`extract_answer`; `result.py` (the table). Written from reading them, not copied; see
docs/protocols/longbench_v2.md. No torch: `lctx score` and the tests use it alone."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_QUESTION = ("What is the correct answer to this question: $Q$\n"
             "Choices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n")
_FORMAT = 'Format your response as follows: "The correct answer is (insert answer here)".'

# The prompt files, byte for byte (none ends with a newline).
TEMPLATE_0SHOT = ("Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\n"
                  + _QUESTION + _FORMAT)
TEMPLATE_COT = ("Please read the following text and answer the questions below.\n\n<text>\n$DOC$\n</text>\n\n"
                + _QUESTION + "Let\u2019s think step by step:")
TEMPLATE_COT_ANS = ("Please read the following text and answer the questions below.\n\n"
                    "The text is too long and omitted here.\n\n" + _QUESTION
                    + "Let\u2019s think step by step: $COT$\n\nBased on the above, what is the single, most likely "
                    "answer choice? " + _FORMAT)
TEMPLATE_NO_CONTEXT = _QUESTION + "What is the single, most likely answer choice? " + _FORMAT
TEMPLATE_RAG = ("Please read the following retrieved text chunks and answer the question below.\n\n<text>\n$DOC$\n"
                "</text>\n\n" + _QUESTION + _FORMAT)

# query_llm's max_new_tokens: the answer (and CoT's second step) 128, CoT's reasoning 1024.
ANSWER_TOKENS = 128
COT_TOKENS = 1024
# config/model2maxlen.json: 120000 prompt tokens for the 128k-context models.
REFERENCE_BUDGET, REFERENCE_CONTEXT = 120_000, 131_072

LETTERS = ("A", "B", "C", "D")
RECORD_FIELDS = ("_id", "domain", "sub_domain", "difficulty", "length", "question",
                 "choice_A", "choice_B", "choice_C", "choice_D", "answer", "context")


def fill(template: str, item: dict[str, Any], context: str, cot: str | None = None) -> str:
    """get_pred's chain of replacements, in its order: $DOC$ (the stripped context), $Q$,
    $C_A$..$C_D$ (each stripped), then $COT$ for the answer step. A chain, as pred.py's:
    a "$Q$" inside the document is replaced too."""
    out = template.replace("$DOC$", context.strip()).replace("$Q$", item["question"].strip())
    for letter in LETTERS:
        out = out.replace(f"$C_{letter}$", item[f"choice_{letter}"].strip())
    if cot is not None:
        out = out.replace("$COT$", cot)
    return out


def rag_context(item: dict[str, Any], top_n: int) -> str:
    """get_pred with --rag N: the first N retrieved chunks, put back in document order
    (`c_idx`), each as "Retrieved chunk i: ...", joined by blank lines."""
    chunks = sorted(item["retrieved_context"][:top_n], key=lambda x: x["c_idx"])
    return "\n\n".join(f"Retrieved chunk {i + 1}: {c['content']}" for i, c in enumerate(chunks))


def first_prompt(item: dict[str, Any], *, cot: bool, no_context: bool, rag: int) -> str:
    """The prompt of the first (or only) query, as get_pred picks it: rag, else no
    context, else CoT, else zero-shot."""
    if rag > 0:
        return fill(TEMPLATE_RAG, item, rag_context(item, rag))
    if no_context:
        return fill(TEMPLATE_NO_CONTEXT, item, item["context"])
    return fill(TEMPLATE_COT if cot else TEMPLATE_0SHOT, item, item["context"])


def answer_prompt(item: dict[str, Any], reasoning: str) -> str:
    """CoT's second query: the reasoning (already stripped) in 0shot_cot_ans.txt."""
    return fill(TEMPLATE_COT_ANS, item, item["context"], cot=reasoning)


def keep_middle_out(ids: list[int], max_len: int) -> tuple[list[int], bool]:
    """query_llm's truncation: longer than max_len keeps `ids[:max_len//2] +
    ids[-max_len//2:]`. Python reads `-max_len//2` as `(-max_len)//2`, so the tail is
    ceil(max_len/2) tokens and the two parts hold max_len tokens exactly."""
    if len(ids) <= max_len:
        return ids, False
    return ids[: max_len // 2] + ids[(-max_len) // 2:], True


def default_budget(context: int, max_new_tokens: int) -> int:
    """The prompt budget when none is given: the model's context scaled as model2maxlen
    scales 131072 to 120000, less whatever would not leave `max_new_tokens` to generate."""
    return min(context * REFERENCE_BUDGET // REFERENCE_CONTEXT, context - max_new_tokens)


_PARENS = re.compile(r"The correct answer is \(([A-D])\)")
_BARE = re.compile(r"The correct answer is ([A-D])")


def extract_answer(response: str) -> str | None:
    """extract_answer: asterisks removed, then the first "The correct answer is (X)", else
    the first "The correct answer is X", X one of A-D in capitals; None when neither."""
    text = response.replace("*", "")
    for pattern in (_PARENS, _BARE):
        found = pattern.search(text)
        if found:
            return found.group(1)
    return None


def answer_decided(response: str) -> bool:
    """Whether `extract_answer` can no longer change, whatever follows: the parenthesised form
    is found (its first occurrence wins, and asterisks removed later sit after it). The bare
    form alone is not enough: a parenthesised one later in the text would take precedence."""
    return _PARENS.search(response.replace("*", "")) is not None


@dataclass(frozen=True)
class Row:
    """One line of result.py's table: percentages rounded to one decimal (None where
    result.py would divide by zero), with the counts behind them."""

    overall: float | None
    easy: float | None
    hard: float | None
    short: float | None
    medium: float | None
    long: float | None
    counts: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"Overall": self.overall, "Easy": self.easy, "Hard": self.hard, "Short": self.short,
                "Medium": self.medium, "Long": self.long, "counts": self.counts}


def _percent(correct: float, n: int) -> float | None:
    return round(100 * correct / n, 1) if n else None


def result_row(items: Iterable[dict[str, Any]], compensated: bool = False) -> Row:
    """result.py on one prediction file: each item's `judge` counts 1 or 0 (0.25 for a
    missing pred when `compensated`); difficulty "easy" or else hard; length "short",
    "medium" or else long."""
    sums = {k: 0.0 for k in ("easy", "hard", "short", "medium", "long")}
    counts = {k: 0 for k in ("overall", "easy", "hard", "short", "medium", "long")}
    for item in items:
        acc: float = int(item["judge"])
        if compensated and item.get("pred") is None:
            acc = 0.25
        counts["overall"] += 1
        level = "easy" if item["difficulty"] == "easy" else "hard"
        bucket = item["length"] if item["length"] in ("short", "medium") else "long"
        for key in (level, bucket):
            sums[key] += acc
            counts[key] += 1
    return Row(overall=_percent(sums["easy"] + sums["hard"], counts["overall"]),
               easy=_percent(sums["easy"], counts["easy"]), hard=_percent(sums["hard"], counts["hard"]),
               short=_percent(sums["short"], counts["short"]), medium=_percent(sums["medium"], counts["medium"]),
               long=_percent(sums["long"], counts["long"]), counts=counts)
