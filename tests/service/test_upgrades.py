"""Upgrades of homes an older lctx made (service/upgrades.py, #61): a home written at schema 0006
(before 0007 stored leaderboard rows: made with that revision's migrations, its job rows and
results.json as that release wrote them, tests.helpers.old_home) upgraded to head has the
leaderboard a fresh write of the same jobs gives; an upgrade killed (kill -9) midway and started
again ends with every row once; while it runs, /healthz says how far it is and /readyz answers
503; and ties in any sort are broken newest first."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

from evaluators.results import TaskResult, metric, series
from service.api.leaderboard import leaderboard
from service.app import create_app
from service.core.settings import Settings
from service.core.status import SUCCEEDED
from service.standings import record_results, record_results_many
from service.store import Store
from service.store.db import _alembic
from service.store.models import ResultValueRow, TaskResultRow
from service.upgrades import upgrade
from tests.helpers import ThreadServer, make_settings, new_postgres_database, old_home

NIGHT0 = datetime(2026, 3, 1, 2, 0)
REPO = Path(__file__).resolve().parents[2]


def entry(value: float, lengths: tuple[int, ...] = (512, 1024)) -> dict[str, Any]:
    """A passkey result of `value` at every length (equal scores night after night when fixed)."""
    result = TaskResult(headline="accuracy", metrics=[metric("accuracy", value, True, "fraction", 4 * len(lengths))],
                        series=[series("accuracy", "length", "fraction", True, [(n, value, 4) for n in lengths])],
                        summary="")
    return {"passkey": {"task": "passkey", "result": result.model_dump(mode="json"),
                        "context": {"trained": 512, "beyond": [n for n in lengths if n > 512]}}}


def jobs_of(settings: Settings, nights: int, equal_nights: int = 0) -> list[dict[str, Any]]:
    """Three lineages evaluated night after night (each night a checkpoint of its own, one in four
    with YaRN), and `equal_nights` nights of one checkpoint name, `ck07`, retrained each night (a
    fingerprint a night) scoring the same every night."""
    jobs = []
    for night in range(nights):
        for run in range(3):
            name = f"run{run}-step{night:04d}"
            jobs.append({"checkpoint": name, "checkpoint_path": str(settings.roots[0] / f"run{run}" / name),
                         "fingerprint": f"{run}{night:05d}".ljust(64, "a"),
                         "rope": {"rope_type": "yarn", "factor": 4} if night % 4 == 1 else None,
                         "finished_at": NIGHT0 + timedelta(days=night, minutes=run),
                         "results": entry(round(((night * 7 + run * 3) % 10) / 10, 1))})
    for night in range(equal_nights):
        jobs.append({"checkpoint": "ck07", "checkpoint_path": str(settings.roots[0] / "nightly" / "ck07"),
                     "fingerprint": f"7{night:05d}".ljust(64, "b"), "schedule": "nightly",
                     "finished_at": NIGHT0 + timedelta(days=night, hours=5), "results": entry(0.5)})
    for i, job in enumerate(jobs):
        job["id"] = hashlib.sha256(f"job{i}".encode()).hexdigest()[:32]  # ids in no order of their nights
        job["tasks"] = [{"name": "passkey", "lengths": [512, 1024], "trials": 4}]
    return jobs


def fresh(settings: Settings, jobs: list[dict[str, Any]], lost: set[str] = frozenset()) -> Store:
    """The same jobs in a home of this code: rows at head, each succeeded job's leaderboard rows
    written at its end by the coordinator's writer (record_results), in the order they finished."""
    old_home(settings, jobs, revision="head")
    store = Store(settings.database)
    for job in sorted(jobs, key=lambda j: j["finished_at"]):
        if job["id"] not in lost:
            record_results(settings, store, job["id"], job["results"])
    return store


QUERIES = [{}, {"per": "lineage"}, {"checkpoint": "ck07", "limit": 10}, {"sort": "finished_at"},
           {"sort": "accuracy.length=1024", "limit": 25, "offset": 5}, {"lineage": "run1"}, {"rope": "yarn:4"},
           {"sort": "checkpoint", "order": "desc"}, {"checkpoint_prefix": "run2-", "limit": 7}]


def boards(store: Store) -> list[dict[str, Any]]:
    return [leaderboard("passkey", store, **{"limit": 100, **q}).model_dump() for q in QUERIES]


def every_index_there(store: Store) -> bool:
    """Every index the models declare is in the database (the backfill drops most of the leaderboard
    tables' while it fills them from empty and makes them again at its end)."""
    with store.read_engine.connect() as conn:
        found = {t: {ix["name"] for ix in inspect(conn).get_indexes(t)} for t in ("task_results", "result_values")}
    return all(ix.name in found[t.name] for t in (TaskResultRow.__table__, ResultValueRow.__table__) for ix in t.indexes)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def urls(request: pytest.FixtureRequest) -> tuple[dict[str, str], dict[str, str]]:
    """Two empty databases (the old home's, the fresh write's) as Settings overrides."""
    if request.param == "sqlite":
        return {}, {}
    server = request.getfixturevalue("postgres_url")
    return ({"database_url": new_postgres_database(server, "upgrade_old")},
            {"database_url": new_postgres_database(server, "upgrade_new")})


def test_a_home_of_0006_upgraded_has_the_leaderboard_a_fresh_write_gives(tmp_path: Path, urls) -> None:
    old_db, new_db = urls
    settings = make_settings(tmp_path / "old", upgrade_batch=7, **old_db)  # several batches
    jobs = jobs_of(settings, nights=8, equal_nights=30)
    lost = {jobs[4]["id"]}
    old_home(settings, jobs)
    (settings.results / jobs[4]["id"] / "results.json").unlink()  # a job whose results are gone: skipped
    store = Store(settings.database)
    other = make_settings(tmp_path / "new", **new_db)
    written = fresh(other, jobs_of(other, nights=8, equal_nights=30), lost)
    try:
        assert upgrade(store, settings) == _alembic()[1].get_current_head()
        with store.read_engine.connect() as conn:
            m = conn.execute(text("SELECT * FROM data_migrations WHERE name = 'leaderboard'")).one()
        assert (m.done, m.total, m.filled, m.finished_at is not None) == (len(jobs), len(jobs), len(jobs) - 1, True)
        assert boards(store) == boards(written) and every_index_there(store)
        ck07 = leaderboard("passkey", store, checkpoint="ck07", limit=10)
        assert ck07.total == 30 and ck07.rows[0].finished_at == NIGHT0 + timedelta(days=29, hours=5)
        assert upgrade(store, settings) and boards(store) == boards(written)  # a second start: nothing again
    finally:
        store.close()
        written.close()


UPGRADE = """
import logging, sys
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s %(message)s")
from service.core.settings import get_settings
from service.store import Store
from service.upgrades import upgrade
upgrade(Store(get_settings().database), get_settings())
print("upgraded", flush=True)
"""


@pytest.mark.integration  # a Python process started and killed
def test_an_upgrade_killed_midway_resumes_and_writes_every_row_once(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "old", upgrade_batch=3)
    jobs = jobs_of(settings, nights=40)
    old_home(settings, jobs)
    env = {**os.environ, "LCTX_HOME": str(settings.home), "LCTX_CHECKPOINT_ROOTS": str(settings.roots[0]),
           "LCTX_UPGRADE_BATCH": "3", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", UPGRADE], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # the first progress line comes after the first batch is committed
            if "upgrading:" in line:
                proc.send_signal(signal.SIGKILL)
                break
        assert proc.wait(60) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
    store = Store(settings.database)
    try:
        with store.read_engine.connect() as conn:
            done = conn.execute(text("SELECT done FROM data_migrations WHERE name = 'leaderboard'")).scalar()
            assert 3 <= done < len(jobs), done  # killed midway: some batches committed, not all
            assert conn.execute(text("SELECT count(DISTINCT job_id) FROM task_results")).scalar() == done
        with store.read_engine.connect() as conn:  # dropped by the first batch, the tables being empty
            assert "ix_task_results_board" not in {ix["name"] for ix in inspect(conn).get_indexes("task_results")}
        upgrade(store, settings)  # started again: resumes after the last committed batch
        assert every_index_there(store)  # made again by the last batch
        with store.read_engine.connect() as conn:
            assert conn.execute(text("SELECT count(DISTINCT job_id) FROM task_results")).scalar() == len(jobs)
            assert conn.execute(text("SELECT count(*) FROM (SELECT job_id, task FROM task_results GROUP BY job_id, "
                                     "task HAVING count(*) > 1) d")).scalar() == 0
        other = make_settings(tmp_path / "new")
        written = fresh(other, jobs_of(other, nights=40))
        try:
            assert boards(store) == boards(written)
        finally:
            written.close()
    finally:
        store.close()


@pytest.mark.integration  # a server on loopback, through an upgrade of 150 batches
def test_while_an_upgrade_runs_healthz_says_how_far_and_readyz_is_503(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, upgrade_batch=1)
    jobs = jobs_of(settings, nights=50)
    old_home(settings, jobs)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        health, ready = c.get("/healthz"), c.get("/readyz")
        assert health.status_code == 200 and "upgrading" in health.json(), health.json()
        upgrading = health.json()["upgrading"]
        assert upgrading["migration"] == "leaderboard" and upgrading["total"] in (None, len(jobs))
        assert ready.status_code == 503 and "upgrading" in ready.json()["detail"], ready.json()
        deadline = time.monotonic() + 120
        seen = []
        while (ready := c.get("/readyz")).status_code != 200:
            assert time.monotonic() < deadline, ready.json()
            seen.append(c.get("/healthz").json().get("upgrading"))
            time.sleep(0.05)
        done = [s["done"] for s in seen if s and s["total"]]
        assert done == sorted(done) and any(0 < d < len(jobs) for d in done), seen  # progress, as it went
        assert any(s and s["rate_per_s"] and s["eta_s"] is not None for s in seen), seen
        assert "upgrading" not in c.get("/healthz").json()
        assert c.get("/v1/leaderboard", params={"task": "passkey", "limit": 1}).json()["total"] == len(jobs)


def test_ties_in_every_sort_show_a_checkpoints_newest_night_first(tmp_path: Path) -> None:
    """500 nights of ck07 with equal scores: its newest night is the first row of the first page,
    whatever the sort (the headline, a point, its name, the finishing time ascending)."""
    settings = make_settings(tmp_path)
    jobs = jobs_of(settings, nights=0, equal_nights=500)
    with TestClient(create_app(settings)) as c:
        store = c.app.state.store
        ids = []
        for job in jobs:  # the rows as the service keeps them, in the order the nights finished
            ids.append(store.add_job(checkpoint=job["checkpoint"], checkpoint_path=job["checkpoint_path"],
                                     fingerprint=job["fingerprint"], tasks=job["tasks"], rope=None, backend="auto",
                                     priority=0, schedule="nightly").id)
        assert [j.id for j in store.claim_many("t", len(ids))] == ids
        assert all(store.finish_many([(job_id, {"passkey": {"done": 8, "total": 8}}) for job_id in ids], SUCCEEDED))
        with store.write_engine.begin() as conn:  # each night's own finishing time (finish_many stamps now)
            conn.execute(text("UPDATE jobs SET finished_at = :at WHERE id = :id"),
                         [{"at": job["finished_at"], "id": job_id} for job, job_id in zip(jobs, ids, strict=True)])
        record_results_many(settings, store, [(job_id, job["results"]) for job, job_id in zip(jobs, ids, strict=True)])
        newest = ids[-1]
        for sort in ({}, {"sort": "accuracy.length=1024"}, {"sort": "accuracy"}, {"sort": "checkpoint"},
                     {"sort": "setting"}, {"per": "lineage"}):
            page = c.get("/v1/leaderboard", params={"task": "passkey", "checkpoint": "ck07", **sort}).json()
            assert page["rows"][0]["job"] == newest, sort
            if "per" not in sort:
                assert page["total"] == 500 and page["rows"][1]["job"] == ids[-2], sort


def test_batches_read_ahead_are_written_only_where_the_progress_stands(tmp_path: Path) -> None:
    """The reading thread's batches (on PostgreSQL, read while the one before is written) are
    written only where the committed progress stands: when another replica moved it meanwhile
    (here a batch written on another connection), the batch read ahead is dropped and the next
    one read in the transaction, and every job ends with its rows once."""
    import threading

    from service.upgrades import MIGRATIONS, Ahead, batch

    settings = make_settings(tmp_path / "old", upgrade_batch=5)
    jobs = jobs_of(settings, nights=8)  # 24 jobs: 5 batches
    old_home(settings, jobs)
    store = Store(settings.database)
    try:
        store.upgrade()
        with store.read_engine.connect() as conn:
            start = conn.execute(text("SELECT * FROM data_migrations WHERE name = 'leaderboard'")).one()
        stop = threading.Event()
        ahead = Ahead(store, settings, MIGRATIONS["leaderboard"], start, 5, stop)
        try:
            with store.write_engine.connect() as conn, store.write_engine.connect() as replica:
                assert batch(conn, settings, "leaderboard", 5, ahead).done == 5 and not ahead.off  # read ahead
                assert batch(replica, settings, "leaderboard", 5).done == 10  # another replica's batch
                row = batch(conn, settings, "leaderboard", 5, ahead)  # the one read ahead starts at 5: dropped
                assert ahead.off and row.done == 15
                while row.finished_at is None:
                    row = batch(conn, settings, "leaderboard", 5, ahead)
        finally:
            stop.set()
            ahead.close()
        assert (row.done, row.filled) == (len(jobs), len(jobs))
        with store.read_engine.connect() as conn:
            assert conn.execute(text("SELECT count(DISTINCT job_id) FROM task_results")).scalar() == len(jobs)
            assert conn.execute(text("SELECT count(*) FROM (SELECT job_id, task FROM task_results GROUP BY job_id, "
                                     "task HAVING count(*) > 1) d")).scalar() == 0
    finally:
        store.close()
