"""SCROLLS' metrics on hand-computed cases: ROUGE without stemming, multi-reference max,
geometric mean, F1 and EM."""

from __future__ import annotations

import math

import pytest

from evaluators.scrolls.metrics import geometric_mean, rouge_max, scrolls_aggregate, scrolls_sample_scores


def test_scrolls_rouge_without_stemming() -> None:
    # Stemming would make "cats"/"cat" and "runs"/"run" match; without it only "the" does.
    r = rouge_max("the cats runs", ["the cat run"])
    assert r["rouge1"] == pytest.approx(1 / 3) and r["rouge2"] == 0.0


def test_scrolls_rouge_geometric_mean_and_reference_max() -> None:
    # pred vs ref 1: R-1 = 5/6, R-2 = 3/5, R-L = 5/6; ref 2 shares nothing.
    s = scrolls_sample_scores("gov_report", "the cat sat on the mat", ["zzz", "the cat sat on a mat"])
    assert s["rouge1"] == pytest.approx(500 / 6) and s["rouge2"] == pytest.approx(60)
    assert s["rougeL"] == pytest.approx(500 / 6)
    agg = scrolls_aggregate("gov_report", [s])
    assert agg["score"] == pytest.approx((500 / 6 * 60 * 500 / 6) ** (1 / 3))
    assert geometric_mean([4.0, 1.0, 2.0]) == pytest.approx(2.0) and geometric_mean([0.0, 5.0]) == 0.0


def test_scrolls_f1_and_exact_match() -> None:
    # "three new schools" vs "funding for three new schools": P = 1, R = 3/5 -> 75; vs "a library": 0.
    f = scrolls_sample_scores("qasper", "three new schools", ["funding for three new schools", "a library"])
    assert f == {"f1": pytest.approx(75.0)}
    assert scrolls_sample_scores("quality", "(c) Three.", ["(C) three"]) == {"exact_match": 100.0}
    assert scrolls_sample_scores("contract_nli", "Entailment", ["Contradiction"]) == {"exact_match": 0.0}
    agg = scrolls_aggregate("qasper", [{"f1": 75.0}, {"f1": 25.0}])
    assert agg["score"] == 50.0 and agg["n"] == 2 and not math.isnan(agg["f1"])
