"""Every number with its uncertainty (Miller, "Adding Error Bars to Evals", 2024; lm-eval's
`stderr_for_metric` and bootstrap): the math, and the one pass that gives each metric and
series point of a task's result its `ErrorBar` by the rule its evaluator declares.

A task declares an `ErrorRule` (`Evaluator.error_rule`): which field of a record is the
per-sample score, which record fields each coordinate of its series reads (a series along
`length` at {"depth": 50} is the records whose `length` and `depth_percent` match), how its
values scale the score (RULER reports 0-100), and which record fields name a context shared
by several samples (a haystack, a transcript, a document set, a question's repeats). Then:

- a value that is the mean of its cell's scores gets the central limit theorem's standard
  error (`clt`), cluster-robust where the samples of the cell share contexts (`clustered`:
  Miller's eq. 4 with the usual G/(G-1) correction), and the normal 95% interval;
- any other value (a ratio, an average over categories, an effective length, a set F1, a
  value the task rounds) is bootstrapped: records resampled (whole clusters, within the
  rule's strata, seeded) and passed through the task's own aggregate (`Evaluator.estimate`),
  the standard error the draws' spread and the interval their 2.5 and 97.5 percentiles;
- a measurement (no better direction, or named in the rule's `measured`, such as a
  perplexity) gets method `none` with the reason: said, never a zero.

Paired and unpaired differences of two runs (`paired_difference`, `unpaired_difference`)
and the smallest difference a sample size resolves (`resolvable_difference`) live here too:
the service's comparisons, regressions and dry run read them. numpy only, no torch."""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evaluators.results import ErrorBar, Metric, Point, Series, TaskResult

Z95 = 1.959963984540054  # the normal distribution's 97.5% quantile
REL_TOL = 1e-6  # a value is its cell's mean when they agree this closely
BOOTSTRAP_RESAMPLES = 500
BOOTSTRAP_BUDGET = 2_000_000  # records copied over all resamples at most (fewer resamples for a huge run)
MIN_RESAMPLES = 100
DEFINED_SHARE = 0.9  # a bootstrapped value needs a value in this share of the draws
MEASUREMENT = "a measurement or count with no better direction, not a score: no sampling error"


@dataclass(frozen=True)
class ErrorRule:
    """How a task's values relate to its per-sample records (the contract evaluators declare).

    score: the record field of the per-sample score; scale: value = scale x mean score;
    cells: series coordinate (an axis or an `at` key) -> the record field holding it;
    cluster: record fields whose values together name a shared context (empty: samples are
    independent); strata: record fields the bootstrap resamples within (a cell's size fixed by
    the plan); measured: metric or series names with no sampling error -> the reason;
    series_cells: a series whose coordinates read other fields -> its own map (empty: none, the
    series is bootstrapped); digits: the task rounds its means to these decimals; resamples and
    seed: the bootstrap's."""

    score: str = "score"
    scale: float = 1.0
    cells: Mapping[str, str] = field(default_factory=lambda: {"length": "length"})
    series_cells: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    digits: int | None = None
    cluster: tuple[str, ...] = ()
    strata: tuple[str, ...] = ()
    measured: Mapping[str, str] = field(default_factory=dict)
    resamples: int = BOOTSTRAP_RESAMPLES
    seed: int = 0

    @property
    def cluster_name(self) -> str | None:
        return "+".join(self.cluster) or None

    def as_dict(self) -> dict[str, Any]:
        """What results record of the rule (an entry's `errors`): the comparisons read it."""
        return {"score": self.score, "scale": self.scale, "cells": dict(self.cells),
                "series_cells": {k: dict(v) for k, v in self.series_cells.items()}, "cluster": list(self.cluster),
                "strata": list(self.strata), "digits": self.digits, "resamples": self.resamples, "seed": self.seed}

    @classmethod
    def from_dict(cls, data: Any) -> ErrorRule | None:
        """The rule an entry recorded (None: none recorded, or not of its shape: a results file
        is data, checked, never trusted)."""
        if not isinstance(data, dict):
            return None
        try:
            names = lambda v: all(isinstance(x, str) for x in v)  # noqa: E731
            cells, series_cells = data.get("cells", {}), data.get("series_cells", {})
            cluster, strata = data.get("cluster", []), data.get("strata", [])
            ok = (isinstance(data.get("score"), str) and isinstance(data.get("scale"), int | float)
                  and isinstance(cells, dict) and names(cells) and names(cells.values())
                  and isinstance(series_cells, dict)
                  and all(isinstance(v, dict) and names(v) and names(v.values()) for v in series_cells.values())
                  and isinstance(cluster, list) and names(cluster) and isinstance(strata, list) and names(strata)
                  and (data.get("digits") is None or isinstance(data.get("digits"), int)))
        except (TypeError, AttributeError):
            return None
        if not ok:
            return None
        return cls(score=data["score"], scale=float(data["scale"]), cells=cells, series_cells=series_cells,
                   cluster=tuple(cluster), strata=tuple(strata), digits=data.get("digits"))


# --- the math ------------------------------------------------------------------


def clt(scores: Sequence[float]) -> tuple[float, float | None]:
    """The mean and its central-limit standard error s / sqrt(n) (sample s.d., ddof 1; None
    below two samples)."""
    x = np.asarray(scores, dtype=float)
    mean = float(x.mean())
    return mean, (float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else None)


def clustered(scores: Sequence[float], groups: Sequence[Any]) -> tuple[float, float | None, int]:
    """The mean, its cluster-robust standard error and the number of clusters: Miller's eq. 4,
    sqrt(G/(G-1) x sum over clusters of (sum of the cluster's residuals)^2) / n, which is the
    CLT error exactly when every cluster is one sample, and larger when samples of a cluster
    move together. None below two clusters (one shared context cannot show its own spread)."""
    x = np.asarray(scores, dtype=float)
    _, index = np.unique(np.asarray([repr(g) for g in groups]), return_inverse=True)
    g = int(index.max()) + 1 if len(x) else 0
    mean = float(x.mean())
    if g < 2:
        return mean, None, g
    sums = np.bincount(index, weights=x - mean, minlength=g)
    return mean, float(math.sqrt(g / (g - 1) * float(np.sum(sums ** 2))) / len(x)), g


def normal_bar(value: float, stderr: float | None, method: str, **extra: Any) -> ErrorBar:
    if stderr is None:
        return ErrorBar(stderr=None, low=None, high=None, method="none", **extra)
    return ErrorBar(stderr=stderr, low=value - Z95 * stderr, high=value + Z95 * stderr, method=method, **extra)


def none(reason: str) -> ErrorBar:
    return ErrorBar(stderr=None, low=None, high=None, method="none", reason=reason)


def mean_error(scores: Sequence[float], groups: Sequence[Any] | None = None, cluster: str | None = None,
               scale: float = 1.0) -> ErrorBar:
    """The error of scale x mean(scores): clustered when `groups` name shared contexts, else CLT."""
    if len(scores) == 0:
        return none("no samples")
    if groups is not None:
        mean, se, g = clustered(scores, groups)
        if g == len(scores):  # every sample its own context: the plain error, said as such
            mean, se = clt(scores)
            if se is None:
                return none("one sample")
            return normal_bar(scale * mean, scale * se, "clt", cluster=cluster, clusters=g)
        if se is None:  # one shared context: the spread within it, said (it cannot show its own spread)
            mean, se = clt(scores)
            if se is None:
                return none("one sample")
            return normal_bar(scale * mean, scale * se, "clt", cluster=cluster, clusters=g,
                              reason=f"all {len(scores)} samples share one context ({cluster}): the error within "
                                     f"it, not across contexts")
        return normal_bar(scale * mean, scale * se, "clustered", cluster=cluster, clusters=g)
    mean, se = clt(scores)
    return none("one sample") if se is None else normal_bar(scale * mean, scale * se, "clt")


@dataclass
class Difference:
    """b - a with its standard error and 95% interval; `paired`: over the samples both ran
    (matched by id), else the two means' difference (independent samples)."""

    difference: float
    stderr: float
    low: float
    high: float
    paired: bool
    n: int
    method: str
    clusters: int | None = None

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def as_dict(self) -> dict[str, Any]:
        return {"difference": self.difference, "stderr": self.stderr, "low": self.low, "high": self.high,
                "paired": self.paired, "n": self.n, "method": self.method, "clusters": self.clusters,
                "excludes_zero": self.excludes_zero}


def paired_difference(a: Mapping[str, float], b: Mapping[str, float], groups: Mapping[str, Any] | None = None,
                      scale: float = 1.0) -> Difference | None:
    """The mean of b's minus a's score over the sample ids both have (Miller section 4: the
    pairs share each question's difficulty, so the difference's error is far smaller than
    two independent errors), clustered by `groups` (id -> context) where given. None: fewer
    than two shared samples."""
    ids = sorted(set(a) & set(b))
    if len(ids) < 2:
        return None
    d = [b[i] - a[i] for i in ids]
    if groups is not None:
        mean, se, g = clustered(d, [groups.get(i, i) for i in ids])
        if se is not None and g < len(ids):
            return Difference(scale * mean, scale * se, scale * (mean - Z95 * se), scale * (mean + Z95 * se),
                              True, len(ids), "clustered", g)
    mean, se = clt(d)
    se = se or 0.0
    return Difference(scale * mean, scale * se, scale * (mean - Z95 * se), scale * (mean + Z95 * se), True,
                      len(ids), "clt")


def unpaired_difference(a: Sequence[float], b: Sequence[float], scale: float = 1.0) -> Difference | None:
    """mean(b) - mean(a) with sqrt(se_a^2 + se_b^2): two runs over different samples."""
    if len(a) < 2 or len(b) < 2:
        return None
    ma, sa = clt(a)
    mb, sb = clt(b)
    se = math.sqrt((sa or 0.0) ** 2 + (sb or 0.0) ** 2)
    mean = mb - ma
    return Difference(scale * mean, scale * se, scale * (mean - Z95 * se), scale * (mean + Z95 * se), False,
                      min(len(a), len(b)), "clt")


def bar_of(difference: Difference) -> ErrorBar:
    return ErrorBar(stderr=difference.stderr, low=difference.low, high=difference.high,
                    method="clustered" if difference.method == "clustered" else "clt", clusters=difference.clusters)


def resolvable_difference(n: int, variance: float | None = None, paired: bool = True) -> float:
    """The smallest difference n samples resolve at 95% (the interval's half-width, z x se):
    a paired comparison's se is sqrt(var(differences) / n) with var the given variance of the
    per-sample differences; without one, p(1-p) at p = 0.5 for each run (0.25), which for two
    independent runs doubles: the widest a 0/1 score can be."""
    if n < 1:
        raise ValueError("at least one sample")
    var = 2 * 0.25 if variance is None else variance
    if not paired and variance is not None:
        var = 2 * variance
    return Z95 * math.sqrt(var / n)


# --- a task result's error bars ---------------------------------------------------------


Estimate = Callable[[list[dict[str, Any]]], TaskResult]


def _key(kind: str, series: Series | None, name: str, point: Point | None = None) -> tuple[str, str, str]:
    return (kind, series.label() if series is not None else name, "" if point is None else str(point.key))


def _values(result: TaskResult) -> dict[tuple[str, str, str], float | None]:
    out: dict[tuple[str, str, str], float | None] = {}
    for m in result.metrics:
        out[_key("metric", None, m.name)] = m.value
    for s in result.series:
        for p in s.points:
            out[_key("point", s, s.name, p)] = p.value
    return out


def _cell(records: list[dict[str, Any]], coords: Mapping[str, Any], cells: Mapping[str, str]
          ) -> list[dict[str, Any]] | None:
    """The records in the cell at `coords` (None: a coordinate the rule maps to no field)."""
    if any(k not in cells for k in coords):
        return None
    want = [(cells[k], str(v)) for k, v in coords.items()]
    return [r for r in records if all(str(r.get(f)) == v for f, v in want)]


def _scores(records: list[dict[str, Any]], rule: ErrorRule) -> list[dict[str, Any]]:
    return [r for r in records if isinstance(r.get(rule.score), int | float) and not isinstance(r.get(rule.score), bool)
            and math.isfinite(r[rule.score])]


def _group(record: Mapping[str, Any], rule: ErrorRule) -> Any:
    if not rule.cluster:
        return record.get("id")
    values = tuple(record.get(f) for f in rule.cluster)
    return values if all(v is not None for v in values) else ("id", record.get("id"))


def mean_cell(value: float, cell: list[dict[str, Any]] | None, rule: ErrorRule) -> list[dict[str, Any]] | None:
    """The cell's scored records when `value` is their mean score (scaled, rounded as the rule
    says), else None: the value is something else (a ratio, a weighted average)."""
    if cell is None:
        return None
    scored = _scores(cell, rule)
    if not scored:
        return None
    mean = rule.scale * float(np.mean([float(r[rule.score]) for r in scored]))
    if not math.isclose(value, mean if rule.digits is None else round(mean, rule.digits), rel_tol=REL_TOL,
                        abs_tol=1e-9):
        return None
    return scored


def _as_mean(value: float, cell: list[dict[str, Any]] | None, rule: ErrorRule) -> ErrorBar | None:
    """The mean rule's error, when the value is its cell's mean score (else None: bootstrap)."""
    scored = mean_cell(value, cell, rule)
    if scored is None:
        return None
    scores = [float(r[rule.score]) for r in scored]
    groups = [_group(r, rule) for r in scored] if rule.cluster else None
    return mean_error(scores, groups, rule.cluster_name, rule.scale)


def _seed(rule: ErrorRule, name: str) -> np.random.Generator:
    return np.random.default_rng([rule.seed % 2**63, zlib.crc32(name.encode())])


def resample_plan(records: list[dict[str, Any]], rule: ErrorRule) -> list[list[np.ndarray]]:
    """Per stratum its clusters, each the indices of its records."""
    strata: dict[Any, dict[Any, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, r in enumerate(records):
        strata[tuple(r.get(f) for f in rule.strata)][repr(_group(r, rule))].append(i)
    return [[np.asarray(c) for c in clusters.values()] for clusters in strata.values()]


def _draw(plan: list[list[np.ndarray]], rng: np.random.Generator) -> np.ndarray:
    """The record indices of one resample: each stratum's clusters drawn with replacement."""
    parts = []
    for clusters in plan:
        picks = rng.integers(0, len(clusters), size=len(clusters))
        if all(len(c) == 1 for c in clusters):  # independent samples: one index each
            parts.append(np.concatenate(clusters)[picks])
        else:
            parts.extend(clusters[c] for c in picks)
    return np.concatenate(parts) if parts else np.empty(0, dtype=int)


def bootstrap(records: list[dict[str, Any]], estimate: Estimate, rule: ErrorRule, name: str,
              wanted: Iterable[tuple[str, str, str]]) -> tuple[dict[tuple[str, str, str], list[float]], int, str]:
    """Draws of each wanted value over seeded resamples (whole clusters within strata) of the
    records through `estimate`; the resamples made; an error's text if the aggregate failed."""
    wanted = list(wanted)
    plan = resample_plan(records, rule)
    resamples = min(rule.resamples, max(MIN_RESAMPLES, BOOTSTRAP_BUDGET // max(len(records), 1)))
    rng = _seed(rule, name)
    pool = np.empty(len(records), dtype=object)
    pool[:] = records
    draws: dict[tuple[str, str, str], list[float]] = {k: [] for k in wanted}
    for _ in range(resamples):
        try:
            values = _values(estimate(pool[_draw(plan, rng)].tolist()))
        except Exception as e:  # noqa: BLE001 - a task's aggregate on a resample: said in the reason, not raised
            return draws, resamples, f"{type(e).__name__}: {e}"
        for k in wanted:
            v = values.get(k)
            if v is not None and math.isfinite(v):
                draws[k].append(float(v))
    return draws, resamples, ""


def _boot_bar(draws: list[float], resamples: int, failed: str, rule: ErrorRule) -> ErrorBar:
    if failed:
        return none(f"the bootstrap's aggregate failed on a resample ({failed})")
    if len(draws) < max(2, DEFINED_SHARE * resamples):
        return none(f"defined in only {len(draws)} of {resamples} bootstrap resamples")
    x = np.asarray(draws)
    low, high = np.percentile(x, [2.5, 97.5])
    return ErrorBar(stderr=float(x.std(ddof=1)), low=float(low), high=float(high), method="bootstrap",
                    cluster=rule.cluster_name, resamples=resamples)


def attach(result: TaskResult, records: list[dict[str, Any]], rule: ErrorRule, estimate: Estimate,
           name: str = "") -> TaskResult:
    """Give every metric and series point of `result` its `ErrorBar` (in place; returned)."""
    pending: list[tuple[tuple[str, str, str], Metric | Point]] = []

    def settle(key: tuple[str, str, str], item: Metric | Point, label: str, better: bool | None,
               coords: Mapping[str, Any]) -> None:
        if item.value is None:
            item.error = none("no value")
        elif better is None or label in rule.measured:
            item.error = none(rule.measured.get(label, MEASUREMENT))
        else:
            cells = rule.series_cells.get(label, rule.cells) if isinstance(item, Point) else rule.cells
            item.error = _as_mean(item.value, _cell(records, coords, cells), rule)
        if item.error is None:
            pending.append((key, item))

    for m in result.metrics:
        settle(_key("metric", None, m.name), m, m.name, m.higher_is_better, {})
    for s in result.series:
        for p in s.points:
            settle(_key("point", s, s.name, p), p, s.name, s.higher_is_better, {s.axis: p.key, **s.at})
    if pending:
        draws, resamples, failed = bootstrap(records, estimate, rule, name or result.headline, [k for k, _ in pending])
        for k, item in pending:
            item.error = _boot_bar(draws[k], resamples, failed, rule)
    return result


def unmeasured(result: TaskResult, reason: str) -> TaskResult:
    """Method `none` with `reason` on every value (a sequential search's answer, ...)."""
    for m in result.metrics:
        m.error = none(reason)
    for s in result.series:
        for p in s.points:
            p.error = none(reason)
    return result


# --- two runs of a task, column by column ----------------------------------------------


def compare_columns(base: TaskResult, base_records: list[dict[str, Any]], other: TaskResult,
                    other_records: list[dict[str, Any]], rule: ErrorRule | None, same_samples: str | None,
                    select: str | None = None) -> dict[str, dict[str, Any]]:
    """Per column both results have: `other` minus `base` with its standard error and 95%
    interval. Paired (the mean difference over the sample ids both cells hold, clustered by the
    rule's contexts) where `same_samples` says why the runs' samples are the same and the column
    is its cell's mean score in both; else unpaired (the two errors combined as independent),
    with the reason in `note`; no interval where a value has no error."""
    out: dict[str, dict[str, Any]] = {}
    theirs = other.column_items(select)
    for name, (item, source, coords) in base.column_items(select).items():
        if name not in theirs:
            continue
        mine, _, _ = theirs[name]
        if item.value is None or mine.value is None:
            continue
        label = source.name
        note = ""
        if rule is not None and same_samples is not None:
            cells = rule.series_cells.get(label, rule.cells) if isinstance(source, Series) else rule.cells
            a = mean_cell(item.value, _cell(base_records, coords, cells), rule)
            b = mean_cell(mine.value, _cell(other_records, coords, cells), rule)
            if a is not None and b is not None:
                groups = {r["id"]: repr(_group(r, rule)) for r in a} if rule.cluster else None
                d = paired_difference({r["id"]: float(r[rule.score]) for r in a},
                                      {r["id"]: float(r[rule.score]) for r in b}, groups, rule.scale)
                if d is not None:
                    out[name] = {**d.as_dict(), "note": f"paired over {d.n} samples both ran ({same_samples})"}
                    continue
                note = "fewer than two samples in common"
            else:
                note = "not a mean of per-sample scores: the two errors combined"
        else:
            note = f"unpaired: {'the runs did not share their samples' if same_samples is None else 'no rule'}"
        ea, eb = item.error, mine.error
        if ea is None or eb is None or ea.stderr is None or eb.stderr is None:
            why = next((e.reason for e in (ea, eb) if e is not None and e.reason), "no error recorded")
            out[name] = {"difference": mine.value - item.value, "stderr": None, "low": None, "high": None,
                         "paired": False, "n": None, "method": "none", "clusters": None, "excludes_zero": None,
                         "note": why}
            continue
        se = math.hypot(ea.stderr, eb.stderr)
        diff = mine.value - item.value
        d = Difference(diff, se, diff - Z95 * se, diff + Z95 * se, False, min(item.n, mine.n), "unpaired")
        out[name] = {**d.as_dict(), "note": note}
    return out
