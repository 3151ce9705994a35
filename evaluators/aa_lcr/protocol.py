"""AA-LCR's protocol as the dataset card gives it (huggingface.co/datasets/ArtificialAnalysis/
AA-LCR, README.md: "Prompt Template" and "Scoring Approach"): the documents, each between
`BEGIN DOCUMENT i:` and `END DOCUMENT i`, joined by blank lines, in the order of
`data_source_filenames`, then the question, in the card's template; the answer graded by an
LLM "equality checker" with the card's judge prompt, CORRECT or INCORRECT. Two versions of
that prompt: v1.0 (one user message, "Reply only with CORRECT or INCORRECT.") and v1.1 (a
system message on how to compare, the user message in delimited blocks, the verdict as
JSON). The texts are the card's, character for character (docs/protocols/aa_lcr.md says
where each was read); the verdict readers and the table are lctx's, written from the card
(it gives no parser). No torch: `lctx score aa_lcr` and the tests use it alone."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

QUESTION_TEMPLATE = """BEGIN INPUT DOCUMENTS

{documents_text}

END INPUT DOCUMENTS

Answer the following question using the input documents provided above.

START QUESTION

{question}

END QUESTION
"""

# v1.0: the card's "Scoring Approach" until v1.1 (one user message; the fenced block's last
# line, a blank one before the closing fence, is not part of the prompt: NeMo-Skills' and
# evalscope's copies end at "INCORRECT.").
JUDGE_V1_0 = """Assess whether the following CANDIDATE ANSWER is CORRECT or INCORRECT.
For the CANDIDATE ANSWER to be correct, it must be consistent with the OFFICIAL ANSWER.

The question, for reference only: {question}
The OFFICIAL ANSWER: {official_answer}
CANDIDATE ANSWER TO ASSESS: {candidate_answer}

Reply only with CORRECT or INCORRECT."""

# v1.1 (the card's revision "v1.1: correct 16 answer keys and document the judge system prompt"):
# the system message and the user message.
JUDGE_V1_1_SYSTEM = """Decide whether the CANDIDATE ANSWER is correct or incorrect against the OFFICIAL ANSWER.
Note the following points when assessing correctness:

- Numbers should still match when they are the same value written differently, e.g., a
  percentage, a count of percentage points, and the equivalent decimal fraction are the same
  value: 0.675, "67.5%" and "67.5 percentage points" all match. So do different scales
  (thousand, million, bn) and different notations (thousands separators, currency symbols,
  LaTeX markup, and numbers written as words).
- Where the question asks for a particular format (e.g., a percentage, a number of decimal
  places, a unit, a rounding, or an ordering) the CANDIDATE ANSWER must meet it. If the
  question asks for no particular format, accept any equivalent form.
- In cases where the question asks for an ordered list, a title, honorific or article added
  to an entry in the CANDIDATE ANSWER can change where that entry sorts. Accept the ordering
  if it is correct either with those additions or without them.
- Grade the value the CANDIDATE ANSWER finally commits to, and it must commit to one. Values
  reached while working, and alternatives it considers and sets aside, do not count. If it
  offers several values without selecting one, it is incorrect even if one of them is right.
  Hedging is fine as long as one clearly definitive answer is given."""

JUDGE_V1_1_USER = """Assess whether the following CANDIDATE ANSWER is CORRECT or INCORRECT.
For the CANDIDATE ANSWER to be correct, it must be consistent with the OFFICIAL ANSWER.

The question, for reference only: START QUESTION {question}

END QUESTION

The OFFICIAL ANSWER: {official_answer}

END OFFICIAL ANSWER

BEGIN CANDIDATE ANSWER TO ASSESS

{candidate_answer}

END CANDIDATE ANSWER TO ASSESS

Reply as JSON, with a verdict of CORRECT or INCORRECT."""

VERDICTS = ("CORRECT", "INCORRECT")
_WORD = re.compile(r"\b(INCORRECT|CORRECT)\b")
_OBJECT = re.compile(r"\{[^{}]*\}", re.DOTALL)


def documents_text(docs: list[str]) -> str:
    return "\n\n".join(f"BEGIN DOCUMENT {i + 1}:\n{doc}\nEND DOCUMENT {i + 1}" for i, doc in enumerate(docs))


def question_prompt(docs: list[str], question: str) -> str:
    """The card's prompt: the documents in the order given, then the question (one user message)."""
    return QUESTION_TEMPLATE.format(documents_text=documents_text(docs), question=question)


def judge_messages(version: str, question: str, official_answer: str, candidate_answer: str) -> list[dict[str, str]]:
    """The judge's chat messages for one answer (the CSV's answer column as it is, as
    NeMo-Skills and evalscope pass it; the question without its documents)."""
    fields = {"question": question, "official_answer": official_answer, "candidate_answer": candidate_answer}
    if version == "v1.0":
        return [{"role": "user", "content": JUDGE_V1_0.format(**fields)}]
    if version == "v1.1":
        return [{"role": "system", "content": JUDGE_V1_1_SYSTEM},
                {"role": "user", "content": JUDGE_V1_1_USER.format(**fields)}]
    raise ValueError(f"unknown AA-LCR judge prompt {version!r}; known: v1.1, v1.0")


def verdict(version: str, answer: str) -> str | None:
    """The judge's verdict, CORRECT or INCORRECT, from its answer (after any think block);
    None when the answer commits to neither (scored as not correct, counted as unparsed).
    v1.0 asks for the bare word: the one of the two words the answer uses (as whole words,
    upper case as asked); both or neither is no verdict. v1.1 asks for JSON: the `verdict` of
    the first JSON object in the answer (a fenced ```json block included)."""
    if version == "v1.1":
        for found in _OBJECT.finditer(answer):
            try:
                value = json.loads(found.group(0))
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and "verdict" in value:
                said = value["verdict"]
                return said.strip().upper() if isinstance(said, str) and said.strip().upper() in VERDICTS else None
        return None
    words = set(_WORD.findall(answer))
    return words.pop() if len(words) == 1 else None


def score_of(said: str | None) -> float:
    return 1.0 if said == "CORRECT" else 0.0


def new_cell() -> dict[str, Any]:
    return {"correct": 0.0, "n": 0, "beyond": 0, "unparsed": 0}


def table(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy of judged rows (`score` 1 or 0; pass@1 averaged over questions and repeats)
    and counts of rows beyond the model's context (`beyond_context`: not run, not averaged in)
    and of judge answers with no verdict (`verdict` None: scored 0): overall, per document
    category and per repeat. Each cell: {"accuracy", "n", "correct", "beyond", "unparsed",
    "accuracy_all": correct over every question, beyond ones counted as not correct}."""
    cells: dict[tuple[str, str], dict[str, Any]] = defaultdict(new_cell)
    for r in rows:
        for key in (("overall", "all"), ("category", r["document_category"]), ("repeat", str(r.get("repeat", 0)))):
            cell = cells[key]
            if r.get("beyond_context"):
                cell["beyond"] += 1
                continue
            cell["n"] += 1
            cell["correct"] += float(r["score"])
            cell["unparsed"] += r.get("verdict") is None
    out: dict[str, Any] = defaultdict(dict)
    for (group, key), c in sorted(cells.items(), key=lambda kv: (kv[0][0], _order(kv[0]))):
        total = c["n"] + c["beyond"]
        out[group][key] = {**c, "accuracy": c["correct"] / c["n"] if c["n"] else None,
                           "accuracy_all": c["correct"] / total if total else None}
    return dict(out)


def _order(key: tuple[str, str]) -> tuple[int, str]:
    group, name = key
    return (int(name), "") if group == "repeat" else (0, name)
