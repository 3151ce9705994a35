"""SCROLLS' metrics (protocols.md, "SCROLLS"): ROUGE-1/2/L F-measure from `rouge_score`
without stemming, max over references, x 100, task score the geometric mean; F1 and EM with
SQuAD normalisation (lm-eval's LongBench module's, `evaluators.longbench.metrics`), max over
references, x 100."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from evaluators.longbench.metrics import lm_eval_metrics

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
    return float(lm_eval_metrics().qa_f1_score(prediction, reference))


def exact_match(prediction: str, reference: str) -> float:
    return float(lm_eval_metrics().normalize_answer(prediction) == lm_eval_metrics().normalize_answer(reference))


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
