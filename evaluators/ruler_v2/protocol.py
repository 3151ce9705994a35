"""RULER v2's protocol as NVIDIA NeMo-Skills runs it, read (not copied) at branch
chsieh/ruler2, commit 991a7432: `nemo_skills/dataset/ruler2/prepare.py` (the 12 tasks,
their generator flags and `prepare_task_for_ns`, which gives each its eval type and
match type), `ruler2_score.py` (`compute_score`: the mean of the 12 tasks),
`nemo_skills/evaluation/evaluator/ruler.py` `eval_ruler2` (the scorer), `mcq.py`
`eval_mcq` with `math_grader.extract_answer` (the multiple-choice route) and the
`RulerMetrics` / `MathMetrics` means. See docs/protocols/ruler_v2.md. No torch."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from evaluators.ruler_v2.options import TASKS  # noqa: F401 - the protocol's own names

MULTICHOICE = ("mk_niah_medium", "mk_niah_hard")


def route(task: str) -> str:
    """prepare_task_for_ns: "multichoice" for mk_niah_medium/hard, else the ruler2 match
    type: "2steps" for mv_niah_medium, "part" for every task whose name holds "qa", "all"
    for the rest."""
    if task in MULTICHOICE:
        return "multichoice"
    if task == "mv_niah_medium":
        return "2steps"
    return "part" if "qa" in task else "all"


# --- eval_ruler2 ----------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f]")


def default_parse(prediction: str) -> str:
    """default_parse: stripped, every control character (\\x00-\\x1f) a newline, stripped
    again. eval_ruler2 stores it as `predicted_answer`; the score reads the raw generation."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def post_process(pred: str) -> str:
    """post_process_preds: what follows the last "</think>", then what follows the last "Answer:"."""
    if "</think>" in pred:
        pred = pred.split("</think>")[-1]
    if "Answer:" in pred:
        pred = pred.split("Answer:")[-1]
    return pred


def _edits(a: list[str], b: list[str]) -> int:
    """Levenshtein distance between two word lists (what editdistance.eval gives on lists)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[len(b)]


def wer(hypothesis: str, reference: str) -> float:
    """wer of one pair: word edits over the reference's words (whitespace split); inf for
    an empty reference."""
    ref = reference.split()
    if not ref:
        return float("inf")
    return _edits(hypothesis.split(), ref) / len(ref)


def _one(pred: str, ref: str) -> float:
    """max(substring match, 1 - WER), both lower-cased."""
    p, r = pred.lower(), ref.lower()
    return max(1.0 if r in p else 0.0, 1 - wer(p, r))


_DOCUMENT = re.compile(r"Document \d+:(?:.*\n)+?\n")


def match_all(pred: str, refs: list[str]) -> float:
    """string_match_all_single: the mean over references of max(substring, 1 - WER)."""
    pred = post_process(pred)
    return sum(_one(pred, r) for r in refs) / len(refs)


def match_2steps(pred: str, refs: list[str]) -> float:
    """string_match_2steps_single: `match_all` on the last paragraph (after the last blank line)."""
    last = post_process(pred).split("\n\n")[-1]
    return sum(_one(last, r) for r in refs) / len(refs)


def match_part(pred: str, refs: list[str]) -> float:
    """string_match_part_single: every "Document N:" block up to the next blank line removed,
    then the best over references of max(substring, 1 - WER)."""
    pred = _DOCUMENT.sub("", post_process(pred))
    return max(_one(pred, r) for r in refs)


# --- eval_mcq with math_grader.extract_answer --------------------------------------

def last_boxed(text: str) -> str | None:
    """extract_answer with extract_from_boxed: the content of the last "\\boxed" whose braces
    close (None when there is none, or it is not "\\boxed{...}")."""
    idx = text.rfind("\\boxed")
    if idx < 0:
        return None
    depth = 0
    for i in range(idx, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                inside = text[idx:i + 1]
                return inside[len("\\boxed{"):-1] if inside.startswith("\\boxed{") else None
    return None


_LAST_LETTER = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)", re.DOTALL)
_ANSWER_LINE = re.compile(r"(?i)[\*\_]{0,2}Answer[\*\_]{0,2}\s*:[\s\*\_]{0,2}\s*([A-Z])(?![a-zA-Z0-9])")


def extract_letter(text: str) -> str | None:
    """eval_mcq's extract_letter: the last \\boxed{}'s content; a content of more than one
    character gives its last standalone letter A-J (kept as it is when it has none); with no
    boxed answer, the last "Answer: X" (any case, markdown emphasis allowed)."""
    parsed = last_boxed(text)
    if parsed is not None and len(parsed) != 1:
        found = _LAST_LETTER.findall(parsed)
        if found:
            parsed = found[-1].strip()
    if parsed is None:
        found = _ANSWER_LINE.findall(text)
        if found:
            parsed = found[-1].strip()
    return parsed


@dataclass(frozen=True)
class Scored:
    score: float  # is_correct (a fraction for the ruler2 routes) or symbolic_correct (0/1)
    predicted_answer: str | None


def score_one(task: str, generation: str, expected: list[str] | str) -> Scored:
    """The score NeMo-Skills writes for one generation of `task`."""
    kind = route(task)
    if kind == "multichoice":
        letter = extract_letter(generation)
        return Scored(float(letter == expected), letter)
    refs = expected if isinstance(expected, list) else [expected]
    if not refs:
        raise ValueError(f"{task}: expected_answer is empty")
    fn = {"all": match_all, "2steps": match_2steps, "part": match_part}[kind]
    return Scored(float(fn(generation, refs)), default_parse(generation))


def mean_percent(scores: list[float]) -> float | None:
    """RulerMetrics / MathMetrics with one generation: 100 x the mean (pass@1)."""
    return 100.0 * sum(scores) / len(scores) if scores else None


def table(records: list[dict[str, Any]]) -> dict[str, dict[str, tuple[float | None, int]]]:
    """{setup: {task: (100 x mean score, n)}} from records (or scored prediction lines)."""
    grouped: dict[str, dict[str, list[float]]] = {}
    for r in records:
        grouped.setdefault(r["setup"], {}).setdefault(r["subtask"], []).append(float(r.get("score") or 0.0))
    return {s: {t: (mean_percent(v), len(v)) for t, v in tasks.items()} for s, tasks in grouped.items()}


def setup_score(cells: dict[str, tuple[float | None, int]]) -> float | None:
    """ruler2_score.compute_score: the plain mean of the tasks' accuracies."""
    values = [v for v, _ in cells.values() if v is not None]
    return sum(values) / len(values) if values else None
