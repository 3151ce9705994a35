"""LongBench's official scoring rules on top of lm-eval's LongBench metric functions
(protocols.md, "LongBench"): the per-pair functions (qa_f1, ROUGE-L via
the `rouge` package, classification, retrieval, count, code similarity via
`fuzzywuzzy`, Chinese via `jieba`) are lm-eval's `longbench/metrics.py`. lm-eval's
task wrappers strip predictions, skip the first-line rule and report 0..1, so the
official rules are applied here: first line only for trec, triviaqa, samsum and
lsht; max over gold answers; dataset score = mean x 100 rounded to 2 decimals.
One per-pair function departs from LongBench's metrics.py in lm-eval 0.4.13 and is
written here instead: code similarity (lm-eval skips blank lines when it looks for
the first code line; the official scorer takes the first line, blank or not, that
has no backtick, `#` or `//`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from types import ModuleType
from typing import Any

FIRST_LINE_DATASETS = ("trec", "triviaqa", "samsum", "lsht")
LONGBENCH_E_BUCKETS = (("0-4k", 4000), ("4-8k", 8000), ("8k+", None))


@cache
def lm_eval_metrics() -> ModuleType:
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
    fn = getattr(lm_eval_metrics(), name, None)
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
