"""Error bars: the math against closed forms and simulation, and the pass that gives every
value of a task result its error by the task's rule (evaluators/uncertainty.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluators import uncertainty as u
from evaluators.results import TaskResult, fmt_error, metric, series


def test_clt_is_the_closed_form_of_a_proportion() -> None:
    # 30 of 100 correct: s.d. with ddof 1 is sqrt(p(1-p) n/(n-1)); se = that / sqrt(n)
    x = [1.0] * 30 + [0.0] * 70
    mean, se = u.clt(x)
    assert mean == pytest.approx(0.3)
    assert se == pytest.approx(math.sqrt(0.3 * 0.7 / 99))
    bar = u.mean_error(x)
    assert bar.method == "clt"
    assert (bar.low, bar.high) == pytest.approx((0.3 - 1.959964 * se, 0.3 + 1.959964 * se))


def test_clustered_equals_clt_for_singletons_and_grows_with_shared_contexts() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    _, plain = u.clt(x)
    _, singletons, g = u.clustered(x, list(range(50)))
    assert g == 50 and singletons == pytest.approx(plain)
    # 20 contexts, 10 samples each; a context's effect moves its samples together
    effect = np.repeat(rng.normal(scale=1.0, size=20), 10)
    y = (effect + rng.normal(scale=0.3, size=200) > 0).astype(float)
    groups = np.repeat(np.arange(20), 10)
    _, se_plain = u.clt(y)
    _, se_cluster, g = u.clustered(y, list(groups))
    assert g == 20
    assert se_cluster > 2 * se_plain  # the design effect of strongly shared contexts
    # closed form: sqrt(G/(G-1) sum_c (sum_i e_ic)^2) / n
    e = y - y.mean()
    sums = np.array([e[groups == c].sum() for c in range(20)])
    assert se_cluster == pytest.approx(math.sqrt(20 / 19 * np.sum(sums ** 2)) / 200)
    bar = u.mean_error(list(y), list(groups), "haystack")
    assert bar.method == "clustered" and bar.cluster == "haystack" and bar.clusters == 20


def test_binomial_interval_covers_about_95_percent() -> None:
    # 4,000 seeded runs of 200 Bernoulli(0.7) samples, vectorised: the CLT interval's coverage
    rng = np.random.default_rng(57)
    runs, n, p = 4000, 200, 0.7
    x = (rng.random((runs, n)) < p).astype(float)
    mean = x.mean(axis=1)
    se = x.std(axis=1, ddof=1) / math.sqrt(n)
    covered = np.mean(np.abs(mean - p) <= u.Z95 * se)
    assert 0.93 <= covered <= 0.965
    # and the module's own function on a few of them agrees with the vectorised form
    for k in range(5):
        bar = u.mean_error(list(x[k]))
        assert bar.stderr == pytest.approx(se[k])


def test_paired_is_tighter_than_unpaired_on_the_same_questions() -> None:
    rng = np.random.default_rng(3)
    difficulty = rng.random(400)
    a = {f"q{i}": float(rng.random() > d) for i, d in enumerate(difficulty)}
    b = {f"q{i}": float(rng.random() > d - 0.05) for i, d in enumerate(difficulty)}
    paired = u.paired_difference(a, b)
    unpaired = u.unpaired_difference(list(a.values()), list(b.values()))
    assert paired is not None and unpaired is not None
    assert paired.paired and not unpaired.paired
    assert paired.difference == pytest.approx(unpaired.difference)
    assert paired.stderr < unpaired.stderr
    d = np.array([b[k] - a[k] for k in sorted(a)])
    assert paired.stderr == pytest.approx(d.std(ddof=1) / math.sqrt(len(d)))


def test_a_difference_within_noise_does_not_exclude_zero() -> None:
    same = {f"q{i}": float(i % 2) for i in range(100)}
    flipped = {k: (1.0 - v if int(k[1:]) < 4 else v) for k, v in same.items()}  # 4 answers flip both ways
    d = u.paired_difference(same, flipped)
    assert d is not None and not d.excludes_zero
    worse = {k: (0.0 if int(k[1:]) < 40 else v) for k, v in same.items()}  # 20 right answers lost
    d = u.paired_difference(same, worse)
    assert d is not None and d.excludes_zero and d.high < 0


def test_resolvable_difference_at_p_half() -> None:
    assert u.resolvable_difference(100) == pytest.approx(1.959964 * math.sqrt(0.5 / 100))
    assert u.resolvable_difference(400, variance=0.04) == pytest.approx(1.959964 * 0.01)


def _records() -> list[dict]:
    rng = np.random.default_rng(1)
    return [{"id": f"s{i}", "length": n, "score": float(rng.random() < (0.9 if n == 1024 else 0.5))}
            for i, n in enumerate([1024] * 60 + [4096] * 40)]


def _aggregate(records: list[dict]) -> TaskResult:
    by = {n: [r["score"] for r in records if r["length"] == n] for n in (1024, 4096)}
    means = {n: sum(v) / len(v) if v else None for n, v in by.items()}
    overall = sum(r["score"] for r in records) / len(records)
    per_length = [m for m in means.values() if m is not None]
    return TaskResult(headline="accuracy", summary="", metrics=[
        metric("accuracy", overall, True, "fraction", len(records)),
        metric("mean_over_lengths", sum(per_length) / len(per_length), True, "fraction", len(records)),
        metric("count", float(len(records)), None, "samples", len(records)),
    ], series=[series("accuracy", "length", "fraction", True, [(n, means[n], len(by[n])) for n in by])])


def test_attach_gives_every_value_its_rule() -> None:
    records = _records()
    result = u.attach(_aggregate(records), records, u.ErrorRule(), _aggregate, "toy")
    acc = result.metric("accuracy")
    assert acc.error is not None and acc.error.method == "clt"
    assert acc.error.stderr == pytest.approx(u.clt([r["score"] for r in records])[1])
    # an average over lengths is not a cell's mean: bootstrapped through the aggregate
    avg = result.metric("mean_over_lengths")
    assert avg.error is not None and avg.error.method == "bootstrap" and avg.error.resamples
    assert avg.error.low < avg.value < avg.error.high
    # closed form for an equal-weight mean of two independent means
    s1 = u.clt([r["score"] for r in records if r["length"] == 1024])[1]
    s2 = u.clt([r["score"] for r in records if r["length"] == 4096])[1]
    assert avg.error.stderr == pytest.approx(0.5 * math.hypot(s1, s2), rel=0.2)
    count = result.metric("count")
    assert count.error is not None and count.error.method == "none" and count.error.reason
    point = result.series[0].points[1]
    assert point.error is not None and point.error.method == "clt"
    assert point.error.stderr == pytest.approx(s2)
    assert "±" in fmt_error(point.value, point.error)


def test_attach_is_seeded_and_said_for_measurements() -> None:
    records = _records()
    rule = u.ErrorRule(measured={"accuracy": "given as a measurement"}, seed=5)
    one = u.attach(_aggregate(records), records, rule, _aggregate, "toy")
    two = u.attach(_aggregate(records), records, rule, _aggregate, "toy")
    assert one.model_dump() == two.model_dump()
    acc = one.metric("accuracy")
    assert acc.error is not None and acc.error.method == "none" and acc.error.reason == "given as a measurement"
    assert acc.error.stderr is None  # said, not zero


def test_clustered_cells_in_attach() -> None:
    rng = np.random.default_rng(2)
    records = []
    for h in range(12):  # 12 haystacks, 8 questions each, a haystack's effect shared
        base = rng.random() < 0.5
        records += [{"id": f"h{h}q{q}", "length": 1024, "haystack": h,
                     "score": float(base if rng.random() < 0.9 else not base)} for q in range(8)]
    plain = u.attach(_aggregate(records), records, u.ErrorRule(), _aggregate)
    clust = u.attach(_aggregate(records), records, u.ErrorRule(cluster=("haystack",)), _aggregate)
    p, c = plain.metric("accuracy").error, clust.metric("accuracy").error
    assert p is not None and c is not None
    assert c.method == "clustered" and c.clusters == 12 and c.cluster == "haystack"
    assert c.stderr > 1.5 * p.stderr
