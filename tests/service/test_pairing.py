"""Paired comparisons (service/pairing.py through `/v1/compare`'s function on a real store):
two jobs that ran the same samples get each difference over the samples both ran, with its
interval, tighter than the unpaired one on the same data; jobs on other samples get unpaired
intervals, said so; every value carries its error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from service.api.leaderboard import compare
from service.core.layout import job_results
from service.store import Store
from tests.helpers import make_settings, passkey_run


@pytest.fixture
def store_settings(tmp_path: Path):
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()
    yield settings, store
    store.close()


def _scores(seed: int, drop: float = 0.0) -> dict[int, list[float]]:
    """Two lengths x 120 trials; each trial's difficulty fixed across jobs (seeded by trial), so
    two jobs agree on most trials: what pairing exploits."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in (256, 512):
        difficulty = np.random.default_rng(n).random(120)
        out[n] = [float(rng.random() * 0.2 + 0.4 > d + drop) for d in difficulty]
    return out


def test_same_samples_are_paired_and_tighter(store_settings) -> None:
    settings, store = store_settings
    a = passkey_run(settings, store, _scores(1))
    b = passkey_run(settings, store, _scores(2, drop=0.15))
    out = compare("passkey", [a, b], store, settings)
    base, other = out.rows
    assert base.error_bars["accuracy"] is not None and base.error_bars["accuracy"].method == "clt"
    assert base.error_bars["accuracy.length=256"].stderr > 0
    assert other.pairing.startswith("paired: same configuration hash")
    d = other.uncertainty["accuracy"]
    assert d.paired and d.n == 240 and d.method == "clt"
    assert d.difference == pytest.approx(other.difference["accuracy"])
    assert d.excludes_zero and d.high < 0  # the drop is beyond the noise
    unpaired = np.hypot(base.error_bars["accuracy"].stderr, other.error_bars["accuracy"].stderr)
    assert d.stderr < 0.8 * unpaired  # the pairs share each trial's difficulty
    assert base.uncertainty == {}


def test_other_samples_are_unpaired_and_said(store_settings) -> None:
    settings, store = store_settings
    a = passkey_run(settings, store, _scores(1))
    b = passkey_run(settings, store, {256: _scores(2)[256][:100]} | {512: _scores(2)[512]}, config="cfg")
    # the second job ran other trial counts: its scoring options are the same, so it still pairs by id
    same = compare("passkey", [a, b], store, settings).rows[1]
    assert same.uncertainty["accuracy.length=256"].paired and same.uncertainty["accuracy.length=256"].n == 100
    # a job on another task version's samples: unpaired, with the reason
    c = passkey_run(settings, store, _scores(3))
    path = job_results(settings, c)
    doc = json.loads(path.read_text())
    doc["results"]["passkey"]["evaluator_version"] = "1"
    path.write_text(json.dumps(doc))
    row = compare("passkey", [a, c], store, settings).rows[1]
    assert row.pairing.startswith("unpaired")
    base = compare("passkey", [a, c], store, settings).rows[0]
    d = row.uncertainty["accuracy"]
    assert not d.paired and d.method == "unpaired"
    assert d.stderr == pytest.approx(np.hypot(row.error_bars["accuracy"].stderr, base.error_bars["accuracy"].stderr))


def test_the_leaderboard_stores_each_values_standard_error(store_settings) -> None:
    from service.api.leaderboard import job_standings, leaderboard

    settings, store = store_settings
    job = passkey_run(settings, store, {256: [1.0] * 80 + [0.0] * 20})
    row = leaderboard("passkey", store).rows[0]
    assert row.errors["accuracy"] == pytest.approx(np.sqrt(0.8 * 0.2 / 99))
    assert row.errors["accuracy.length=256"] == pytest.approx(np.sqrt(0.8 * 0.2 / 99))
    assert job_standings(job, store).tasks[0].row.errors == row.errors
