"""Metrics: LongBench's official scoring rules on top of lm-eval's LongBench metric
functions, and SCROLLS' metrics (ROUGE with `rouge-score`, F1 and EM).

LongBench (protocols.md, "LongBench"): the per-pair functions (qa_f1, ROUGE-L via
the `rouge` package, classification, retrieval, count, code similarity via
`fuzzywuzzy`, Chinese via `jieba`) are lm-eval's `longbench/metrics.py`. lm-eval's
task wrappers strip predictions, skip the first-line rule and report 0..1, so the
official rules are applied here: first line only for trec, triviaqa, samsum and
lsht; max over gold answers; dataset score = mean x 100 rounded to 2 decimals.
One per-pair function departs from LongBench's metrics.py in lm-eval 0.4.13 and is
written here instead: code similarity (lm-eval skips blank lines when it looks for
the first code line; the official scorer takes the first line, blank or not, that
has no backtick, `#` or `//`).

SCROLLS (protocols.md, "SCROLLS"): ROUGE-1/2/L F-measure from `rouge_score`
without stemming, max over references, x 100, task score the geometric mean;
F1 and EM with SQuAD normalisation, max over references, x 100."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from types import ModuleType
from typing import Any

FIRST_LINE_DATASETS = ("trec", "triviaqa", "samsum", "lsht")
LONGBENCH_E_BUCKETS = (("0-4k", 4000), ("4-8k", 8000), ("8k+", None))


@cache
def _lb() -> ModuleType:
    """lm-eval's longbench/metrics.py (imported on first use: it pulls in jieba, rouge, fuzzywuzzy)."""
    import lm_eval.tasks.longbench.metrics as lb

    return lb


def code_sim_score(prediction: str, ground_truth: str, **kwargs: Any) -> float:
    """LongBench's official code similarity: the first line (after leading newlines) with no
    backtick, `#` or `//` -- an empty line included -- against the gold line, fuzz.ratio / 100."""
    from fuzzywuzzy import fuzz  # lm-eval's longbench dependency

    line = ""
    for candidate in prediction.lstrip("\n").split("\n"):
        if "`" not in candidate and "#" not in candidate and "//" not in candidate:
            line = candidate
            break
    return fuzz.ratio(line, ground_truth) / 100


# Per-pair functions lctx writes itself because lm-eval's copy departs from the official one.
OFFICIAL_OVERRIDES: dict[str, Callable[..., float]] = {"code_sim_score": code_sim_score}


def longbench_metric(name: str) -> Callable[..., float]:
    """A per-pair metric by its name (e.g. "qa_f1_score"): lm-eval's longbench/metrics.py,
    or the official version where lm-eval's differs (`OFFICIAL_OVERRIDES`)."""
    if name in OFFICIAL_OVERRIDES:
        return OFFICIAL_OVERRIDES[name]
    fn = getattr(_lb(), name, None)
    if fn is None or not callable(fn):
        raise ValueError(f"lm-eval's longbench metrics have no function {name!r}")
    return fn


def first_line(prediction: str) -> str:
    return prediction.lstrip("\n").split("\n")[0]


def longbench_sample_score(dataset: str, metric: str, prediction: str, answers: Sequence[str],
                           all_classes: Sequence[str] | None) -> float:
    """The official per-sample score (0..1): first-line rule, then max over gold answers."""
    if dataset in FIRST_LINE_DATASETS:
        prediction = first_line(prediction)
    fn = longbench_metric(metric)
    score = 0.0
    for gold in answers:
        score = max(score, float(fn(prediction, gold, all_classes=all_classes)))
    return score


def longbench_dataset_score(scores: Sequence[float]) -> float | None:
    """mean x 100, rounded to 2 decimals (None when there are no samples)."""
    return round(100 * sum(scores) / len(scores), 2) if scores else None


def longbench_bucket(length: int) -> str:
    for name, bound in LONGBENCH_E_BUCKETS:
        if bound is None or length < bound:
            return name
    raise AssertionError("unreachable")


def longbench_e_scores(scores: Sequence[float], lengths: Sequence[int]) -> dict[str, float | None]:
    """Per LongBench-E bucket of the record's `length`; a bucket without samples gets None."""
    buckets: dict[str, list[float]] = {name: [] for name, _ in LONGBENCH_E_BUCKETS}
    for s, n in zip(scores, lengths, strict=True):
        buckets[longbench_bucket(n)].append(s)
    return {k: longbench_dataset_score(v) for k, v in buckets.items()}


# --- SCROLLS -------------------------------------------------------------------

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")


@cache
def _rouge():
    from rouge_score import rouge_scorer  # imports nltk: only when SCROLLS is scored

    return rouge_scorer.RougeScorer(list(ROUGE_KEYS), use_stemmer=False)


def rouge_max(prediction: str, references: Sequence[str]) -> dict[str, float]:
    """ROUGE-1/2/L F-measure (0..1), each the max over references."""
    best = dict.fromkeys(ROUGE_KEYS, 0.0)
    for ref in references:
        scores = _rouge().score(ref, prediction)
        for k in ROUGE_KEYS:
            best[k] = max(best[k], scores[k].fmeasure)
    return best


def squad_f1(prediction: str, reference: str) -> float:
    """Token F1 after SQuAD normalisation (lm-eval's `qa_f1_score`, the same rule)."""
    return float(_lb().qa_f1_score(prediction, reference))


def exact_match(prediction: str, reference: str) -> float:
    return float(_lb().normalize_answer(prediction) == _lb().normalize_answer(reference))


def max_over(fn: Callable[[str, str], float], prediction: str, references: Sequence[str]) -> float:
    return max((fn(prediction, r) for r in references), default=0.0)


def geometric_mean(values: Sequence[float]) -> float:
    if any(v <= 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


SCROLLS_METRICS: dict[str, str] = {
    "gov_report": "rouge", "summ_screen_fd": "rouge", "qmsum": "rouge",
    "qasper": "f1", "narrative_qa": "f1", "quality": "exact_match", "contract_nli": "exact_match",
}


def scrolls_sample_scores(task: str, prediction: str, references: Sequence[str]) -> dict[str, float]:
    """Per-example metrics on the 0..100 scale."""
    kind = SCROLLS_METRICS[task]
    if kind == "rouge":
        return {k: 100 * v for k, v in rouge_max(prediction, references).items()}
    if kind == "f1":
        return {"f1": 100 * max_over(squad_f1, prediction, references)}
    return {"exact_match": 100 * max_over(exact_match, prediction, references)}


def scrolls_aggregate(task: str, per_example: Sequence[dict[str, float]]) -> dict[str, Any]:
    """Means over examples and the task score (geometric mean of R-1, R-2, R-L for ROUGE tasks)."""
    n = len(per_example)
    if not n:
        return {"score": None, "n": 0}
    keys = per_example[0].keys()
    out: dict[str, Any] = {k: sum(e[k] for e in per_example) / n for k in keys}
    if SCROLLS_METRICS[task] == "rouge":
        out["score"] = geometric_mean([out[k] for k in ROUGE_KEYS])
    else:
        out["score"] = out[next(iter(keys))]
    out["n"] = n
    return out
