"""The stored leaderboard (service/standings.py, service/store/results.py) answers what the
leaderboard answered when it read every job's results.json: the old path is kept below
(`files_leaderboard`, the router's loop before #52) and both run on one seeded history (two
training runs of checkpoints, RoPE and backend settings, superseded reruns, results lost,
data revisions, a select view); then pages, lineages, filters, sorts and refusals; the
migration that fills the tables from the files of jobs already run; the job counts /metrics
reads against a scan of every job."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import select, text, update

from checkpoints.jsonfiles import write_json_atomic
from evaluators.graphwalks.evaluator import typed as graphwalks_typed
from evaluators.results import TaskResult, metric, series
from service.api.leaderboard import compare, leaderboard
from service.app import create_app
from service.comparison import Scored, column_info, column_order, headline_column, scored
from service.core.layout import job_results
from service.core.settings import Settings
from service.core.status import CANCELLED, FAILED, QUEUED, SUCCEEDED
from service.schemas import Leaderboard, LeaderboardRow
from service.store import JobRow, Store
from service.store.db import _alembic
from service.store.jobs import samples_done
from service.upgrades import upgrade
from tests.helpers import make_settings, new_postgres_database, store_results

NIGHT0 = datetime(2026, 1, 1, 3, 0)


def files_leaderboard(settings: Settings, store: Store, task: str, checkpoint: str | None = None,
                      rope: str | None = None, backend: str | None = None) -> Leaderboard:
    """The leaderboard as it was computed before #52: every succeeded job of the task read from
    its results.json, newest first, the first job of a setting its row."""
    with store.reading() as s:
        jobs = list(s.scalars(select(JobRow).where(JobRow.status == SUCCEEDED)
                              .where(JobRow.task_names.contains(f",{task.split('/')[0]},", autoescape=True))
                              .order_by(JobRow.finished_at.desc())))
    entries: dict[tuple, Scored] = {}
    for job in jobs:
        if checkpoint is not None and job.checkpoint != checkpoint:
            continue
        entry = scored(settings, job, task)
        if entry is None or entry.key in entries:
            continue
        if (rope is not None and entry.rope != rope.strip().lower()) or (backend is not None and entry.backend != backend):
            continue
        entries[entry.key] = entry
    columns = column_info(list(entries.values()))
    names = column_order(columns)

    def row(e: Scored) -> LeaderboardRow:
        context = e.context or {}
        return LeaderboardRow(checkpoint=e.job.checkpoint, fingerprint=e.job.fingerprint, rope=e.rope, backend=e.backend,
                              thinking=e.thinking, data_revision=e.data, options=e.options, setting=e.setting,
                              job=e.job.id, finished_at=e.job.finished_at, trained_context=context.get("trained"),
                              beyond_context=context.get("beyond", []),
                              values={c: e.values[c][0] if c in e.values else None for c in names},
                              errors={c: e.errors.get(c) for c in names})

    rows = [row(e) for e in entries.values()]
    headline = headline_column(next(iter(entries.values())), task) if entries else None
    better = columns[headline].higher_is_better if headline in columns else None
    if better is not None:
        rows.sort(key=lambda r: r.finished_at, reverse=True)  # ties: newest first
        rows.sort(key=lambda r: (r.values[headline] is None, -(r.values[headline] or 0) if better
                                 else (r.values[headline] or 0), r.checkpoint, r.setting))
    return Leaderboard(task=task, columns=names, headline=headline if better is not None else None,
                       column_info=[columns[c] for c in names], rows=rows)


def passkey_entry(night: int, step: int, lengths: tuple[int, ...]) -> dict[str, Any]:
    """A passkey result that improves with the training step, some lengths unscored."""
    points = [(n, None if (night + n) % 7 == 0 else min(1.0, (step % 13) / 13 + n / 8192), 4) for n in lengths]
    scored_points = [v for _, v, _ in points if v is not None]
    headline = None if night % 11 == 5 else (sum(scored_points) / len(scored_points) if scored_points else None)
    result = TaskResult(headline="accuracy", metrics=[metric("accuracy", headline, True, "fraction", 4 * len(lengths))],
                        series=[series("accuracy", "length", "fraction", True, points)], summary="")
    return {"task": "passkey", "result": result.model_dump(mode="json"),
            "context": {"trained": 1024, "beyond": [n for n in lengths if n > 1024]}}


def graphwalks_entry(f1: float, revision: str | None) -> dict[str, Any]:
    rows = [{"problem_type": p, "bin": "128k_and_shorter", "f1": f1 / (i + 1), "f1_card_literal": f1, "overlap": 1,
             "parse_error": False, "parsed": ["n1"], "n_truth": 1, "beyond_context": False}
            for i, p in enumerate(("bfs", "parents"))]
    entry: dict[str, Any] = {"task": "graphwalks", "result": graphwalks_typed(rows).model_dump(mode="json")}
    if revision:
        entry["data"] = {"revision": revision, "files": [], "hub": [], "warnings": []}
    return entry


def seed_history(settings: Settings, store: Store, nights: int = 12) -> list[str]:
    """Two training runs (a folder each, a checkpoint per night) evaluated every night under
    three settings, one night run twice, a few results lost (not recorded, no file), and
    graphwalks on two data revisions. Returns the job ids, oldest first."""
    ids = []
    n = 0
    for night in range(nights):
        for run in ("runA", "runB"):
            step = (night + 1) * 100
            name = f"{run}-step{step:05d}"
            settings_of = [(None, "auto"), ({"rope_type": "yarn", "factor": 4}, "auto"), (None, "torch")]
            for rope, backend in settings_of + ([(None, "auto")] if night == 3 else []):  # night 3 runs twice
                tasks = [{"name": "passkey", "lengths": [512, 1024, 2048]}, {"name": "graphwalks"}]
                job = store.add_job(fingerprint=f"{run}-{step}".ljust(64, "0"), checkpoint=name,
                                    checkpoint_path=str(settings.roots[0] / run / name), tasks=tasks, rope=rope,
                                    backend=backend, priority=0, schedule="nightly" if run == "runA" else None)
                assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
                n += 1
                with store.writing() as s:  # a night apart, each job its own minute
                    s.execute(update(JobRow).where(JobRow.id == job.id).values(
                        finished_at=NIGHT0 + timedelta(days=night, minutes=n)))
                ids.append(job.id)
                if n % 17 == 0:
                    continue  # its results are gone: no rows, no file
                lengths = (512, 1024) if night % 4 == 0 else (512, 1024, 2048)
                store_results(settings, store, job.id, {
                    "passkey": passkey_entry(night, step + n, lengths),
                    "graphwalks": graphwalks_entry(0.1 + (n % 9) / 10, "aaaaaaaaaaaa" if night % 2 else "bbbbbbbbbbbb")})
    return ids


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def history(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One seeded history per database, read by the module's tests (none of them writes)."""
    settings, store = fresh_store(request, tmp_path_factory.mktemp("history"), request.param, "standings")
    ids = seed_history(settings, store)
    yield settings, store, ids
    store.close()


def dumped(board: Leaderboard) -> dict[str, Any]:
    return board.model_dump(exclude={"total", "limit", "offset"})


@pytest.mark.parametrize("task", ["passkey", "graphwalks", "graphwalks/bfs", "passkey/2048"])
def test_stored_rows_equal_the_rows_read_from_files(history, task: str) -> None:
    settings, store, _ = history
    new = leaderboard(task, store, limit=5000)
    old = files_leaderboard(settings, store, task)
    assert len(old.rows) > 5 and new.total == len(old.rows)
    assert dumped(new) == dumped(old)


def test_filtered_rows_equal_the_rows_read_from_files(history) -> None:
    settings, store, _ = history
    for kwargs in ({"checkpoint": "runA-step00300"}, {"rope": "YaRN:4 "}, {"backend": "torch"},
                   {"rope": "checkpoint", "backend": "auto"}):
        new = leaderboard("passkey", store, limit=5000, **kwargs)
        old = files_leaderboard(settings, store, "passkey", **kwargs)
        assert new.rows and [r.model_dump() for r in new.rows] == [r.model_dump() for r in old.rows], kwargs


def test_pages_lineages_filters_and_sorts(history) -> None:
    settings, store, _ = history
    whole = leaderboard("passkey", store, limit=5000)
    pages = [leaderboard("passkey", store, limit=7, offset=o) for o in range(0, whole.total, 7)]
    assert [r.job for p in pages for r in p.rows] == [r.job for r in whole.rows]
    assert all(p.total == whole.total and p.columns == whole.columns for p in pages)
    # one row per lineage and setting: that run's newest checkpoint
    per_run = leaderboard("passkey", store, per="lineage", limit=5000)
    assert sorted((r.checkpoint.split("-")[0], r.setting) for r in per_run.rows) == sorted(
        {(r.checkpoint.split("-")[0], r.setting) for r in whole.rows})
    newest = {}
    for r in whole.rows:
        k = (r.checkpoint.split("-")[0], r.setting)
        if k not in newest or r.finished_at > newest[k].finished_at:
            newest[k] = r
    assert {r.job for r in per_run.rows} == {r.job for r in newest.values()}
    # one lineage's curve over nights, oldest first
    curve = leaderboard("passkey", store, lineage="runB", sort="finished_at", order="asc", limit=5000)
    assert curve.rows and all(r.checkpoint.startswith("runB-") for r in curve.rows)
    assert [r.finished_at for r in curve.rows] == sorted(r.finished_at for r in curve.rows)
    assert curve.total == sum(r.checkpoint.startswith("runB-") for r in whole.rows)
    assert leaderboard("passkey", store, checkpoint_prefix="runB-", limit=5000).total == curve.total
    assert {r.checkpoint for r in leaderboard("passkey", store, schedule="nightly", limit=5000).rows} == \
        {r.checkpoint for r in whole.rows if r.checkpoint.startswith("runA-")}
    week = leaderboard("passkey", store, finished_after=NIGHT0 + timedelta(days=2),
                       finished_before=NIGHT0 + timedelta(days=4), limit=5000)
    assert week.rows and all(NIGHT0 + timedelta(days=2) <= r.finished_at < NIGHT0 + timedelta(days=4) for r in week.rows)
    # any column, either way, rows without a value last
    column = "accuracy.length=2048"
    up = leaderboard("passkey", store, sort=column, order="asc", limit=5000)
    values = [r.values[column] for r in up.rows]
    have = [v for v in values if v is not None]
    assert have == sorted(have) and values[len(have):] == [None] * (len(values) - len(have)) and len(have) < len(values)
    down = leaderboard("passkey", store, sort=column, limit=5000)  # best first
    assert [r.values[column] for r in down.rows][:len(have)] == sorted(have, reverse=True)
    worst = leaderboard("passkey", store, order="asc", limit=5000)
    assert [r.values["accuracy"] for r in worst.rows if r.values["accuracy"] is not None] == \
        sorted(r.values["accuracy"] for r in whole.rows if r.values["accuracy"] is not None)


def test_compare_reads_the_stored_rows(history) -> None:
    settings, store, ids = history
    board = leaderboard("passkey", store, limit=2)
    pair = compare("passkey", [board.rows[0].job, board.rows[1].job], store, settings)
    assert [r.job for r in pair.rows] == [board.rows[0].job, board.rows[1].job]
    assert pair.rows[1].difference["accuracy"] == pytest.approx(board.rows[1].values["accuracy"]
                                                                - board.rows[0].values["accuracy"])
    assert pair.rows[0].values == {c: board.rows[0].values.get(c) for c in pair.columns}


def test_a_jobs_standings_are_its_stored_rows(history) -> None:
    """GET /v1/jobs/{id}/standings (what the job page shows): per task key of the job's results
    the row the leaderboard shows, from the stored rows even when results.json is gone; none
    for a job whose results were never recorded; 404 for no job."""
    settings, store, ids = history
    app = create_app(settings)
    app.state.store, app.state.dispatcher = store, None
    c = TestClient(app)
    job = leaderboard("passkey", store, limit=1).rows[0].job
    r = c.get(f"/v1/jobs/{job}/standings")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["job"] == job and [t["task"] for t in body["tasks"]] == ["graphwalks", "passkey"]  # no graphwalks/bfs
    passkey = body["tasks"][1]
    board = leaderboard("passkey", store, checkpoint=passkey["row"]["checkpoint"], limit=5000)
    row = next(x for x in board.rows if x.job == job)
    assert passkey["headline"] == "accuracy" and passkey["row"]["setting"] == row.setting
    assert passkey["row"]["values"] == {c: v for c, v in row.values.items() if c in passkey["columns"]}
    assert passkey["columns"][0] == "accuracy" and passkey["columns"][1:] == sorted(
        passkey["columns"][1:], key=lambda n: int(n.rsplit("=", 1)[1]))  # metrics, then points by length
    info = {i["name"]: i for i in passkey["column_info"]}
    assert info["accuracy.length=512"] == {"name": "accuracy.length=512", "higher_is_better": True, "unit": "fraction",
                                           "kind": "point", "series": "accuracy", "axis": "length", "key": "512"}
    graphwalks = body["tasks"][0]
    assert graphwalks["row"]["values"] == store.stored_result(job, "graphwalks").values
    assert len(store.job_standings(job, views=True)) > len(body["tasks"])  # graphwalks/bfs and the rest
    path = job_results(settings, job)
    kept = path.read_bytes()
    path.unlink()  # results.json gone: the stored rows still answer
    try:
        assert c.get(f"/v1/jobs/{job}/standings").json() == body
    finally:
        path.write_bytes(kept)
    lost = ids[16]  # the 17th job: its results were never recorded
    assert c.get(f"/v1/jobs/{lost}/standings").json() == {"job": lost, "tasks": []}
    assert c.get("/v1/jobs/nosuchjob/standings").status_code == 404


def test_bad_queries_are_refused_with_what_to_do(history) -> None:
    settings, store, _ = history
    app = create_app(settings)
    app.state.store, app.state.dispatcher = store, None
    c = TestClient(app)
    r = c.get("/v1/leaderboard", params={"task": "passkey", "sort": "accuracy.length=99"})
    assert r.status_code == 422 and "give one of its columns" in r.json()["detail"]
    r = c.get("/v1/leaderboard", params={"task": "passkey", "finished_after": "2026-01-05",
                                         "finished_before": "2026-01-02"})
    assert r.status_code == 422 and "must be before" in r.json()["detail"]
    for bad in ({"per": "night"}, {"order": "up"}, {"limit": 0}, {"offset": -1}, {"finished_after": "soon"}):
        assert c.get("/v1/leaderboard", params={"task": "passkey", **bad}).status_code == 422, bad
    r = c.get("/v1/leaderboard", params={"task": "passkey", "limit": 3})
    assert r.status_code == 200 and len(r.json()["rows"]) == 3 and r.json()["total"] > 3


def test_the_migration_fills_the_rows_from_results_files_and_skips_lost_ones(tmp_path: Path, caplog) -> None:
    settings = make_settings(tmp_path)
    config, _ = _alembic()
    store = Store(settings.database)
    try:
        with store.write_engine.begin() as conn:  # a database of the layout before #52
            config.attributes["connection"] = conn
            command.upgrade(config, "0006")
            for i, kept in enumerate((True, False, True)):
                job_id = f"job{i}"
                conn.execute(text(
                    "INSERT INTO jobs (id, checkpoint, checkpoint_path, fingerprint, request, task_names, priority, "
                    "status, progress, attempts, created_at, finished_at) VALUES (:id, :name, :path, :fp, :request, "
                    "',passkey,', 0, 'succeeded', :progress, 1, :t, :t)"),
                    {"id": job_id, "name": f"ck{i}", "path": str(settings.roots[0] / "run" / f"ck{i}"),
                     "fp": f"fp{i}", "request": '{"tasks": [{"name": "passkey"}], "rope": null, "backend": "auto"}',
                     "progress": '{"passkey": {"done": 5, "total": 5}}', "t": NIGHT0 + timedelta(hours=i)})
                if kept:
                    job_results(settings, job_id).parent.mkdir(parents=True)
                    write_json_atomic(job_results(settings, job_id),
                                      {"job": job_id, "results": {"passkey": passkey_entry(1, 100 * i, (512, 1024))}})
        with caplog.at_level(logging.WARNING, logger="lctx.standings"):
            upgrade(store, settings)
        assert "job1" in caplog.text
        board = leaderboard("passkey", store, limit=100)
        assert sorted(r.job for r in board.rows) == ["job0", "job2"]
        assert dumped(board) == dumped(files_leaderboard(settings, store, "passkey"))
        assert store.count_by_status()[SUCCEEDED] == 3 and store.samples_scored() == 15
        assert [j.id for j in store.list_jobs(task="passkey")[0]] == ["job2", "job1", "job0"]
    finally:
        store.close()


def test_job_counts_follow_every_change_of_status(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()

    def scanned() -> tuple[dict[str, int], int]:
        with store.reading() as s:
            jobs = list(s.scalars(select(JobRow)))
        counts = {st: sum(j.status == st for j in jobs) for st in store.count_by_status()}
        return counts, sum(samples_done(j.progress) for j in jobs if j.status != QUEUED)

    try:
        ids = [store.add_job(checkpoint="c", checkpoint_path="/m/c", fingerprint="f", tasks=[{"name": "passkey"}],
                             rope=None, backend="auto", priority=0).id for _ in range(5)]
        for job_id, end in zip(ids[:3], (SUCCEEDED, FAILED, FAILED), strict=True):
            assert store.claim_next("t").id == job_id
            store.set_progress(job_id, {"passkey": {"done": 3, "total": 9}})
            assert store.finish(job_id, end, progress={"passkey": {"done": 4, "total": 9}})
        assert store.claim_next("t").id == ids[3]
        store.set_progress(ids[3], {"passkey": {"done": 2, "total": 9}})
        assert scanned() == (store.count_by_status(), store.samples_scored())
        store.cancel(ids[3])
        store.cancel(ids[4])
        store.resume(ids[1])
        assert not store.finish(ids[2], SUCCEEDED)  # no longer running: nothing counted twice
        assert scanned() == (store.count_by_status(), store.samples_scored())
        assert store.count_by_status()[CANCELLED] == 2 and store.samples_scored() == 4 + 4 + 2
        assert store.count_listed() == {k: v for k, v in scanned()[0].items() if v}
        assert store.list_jobs()[1] == 5
        # per task: the final statuses kept (job_task_counts), as a scan of the task's jobs counts them
        other = store.add_job(checkpoint="c", checkpoint_path="/m/c", fingerprint="f",
                              tasks=[{"name": "graphwalks"}, {"name": "passkey"}, {"name": "passkey"}], rope=None,
                              backend="auto", priority=0)
        store.cancel(other.id)
        store.resume(ids[3])
        with store.reading() as s:
            jobs = list(s.scalars(select(JobRow)))
        for task in ("passkey", "graphwalks", "nosuchtask"):
            mine = [j for j in jobs if task in {t["name"] for t in j.tasks}]
            by_status = {st: n for st in store.count_by_status() if (n := sum(j.status == st for j in mine))}
            assert store.count_listed(task=task) == by_status and store.list_jobs(task=task)[1] == len(mine), task
            assert store.count_listed(task=task, status=FAILED) == {k: v for k, v in by_status.items() if k == FAILED}
    finally:
        store.close()


def test_recording_a_job_twice_leaves_one_set_of_rows(tmp_path: Path) -> None:
    """A retried record (the coordinator's call after a restart) replaces the job's rows: the
    board, its counts and the newest-of-its-setting flags stay as one record left them."""
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()
    try:
        ids = []
        for night in range(3):  # one checkpoint's setting three nights running: the last is its row
            job = store.add_job(checkpoint="ck", checkpoint_path=str(settings.roots[0] / "run" / "ck"),
                                fingerprint="f" * 64, tasks=[{"name": "passkey"}], rope=None, backend="auto",
                                priority=0)
            assert store.claim_next("t").id == job.id and store.finish(job.id, SUCCEEDED)
            store_results(settings, store, job.id, {"passkey": passkey_entry(night, 100 * night, (512, 1024))})
            ids.append(job.id)
        once = leaderboard("passkey", store)
        for job_id in (ids[2], ids[0]):
            results = {"passkey": passkey_entry(ids.index(job_id), 100 * ids.index(job_id), (512, 1024))}
            store_results(settings, store, job_id, results)
        twice = leaderboard("passkey", store)
        assert [r.job for r in twice.rows] == [ids[2]] and dumped(twice) == dumped(once)
        with store.reading() as s:
            assert s.scalar(text("SELECT count(*) FROM task_results WHERE task = 'passkey'")) == 3
            assert s.scalar(text("SELECT max(rows) FROM result_columns WHERE task = 'passkey'")) == 1
    finally:
        store.close()


def fresh_store(request: pytest.FixtureRequest, tmp: Path, kind: str, prefix: str = "batch") -> tuple[Settings, Store]:
    """An empty store on SQLite, or on a database of its own in the session's PostgreSQL."""
    overrides = {}
    if kind == "postgres":
        overrides["database_url"] = new_postgres_database(request.getfixturevalue("postgres_url"), prefix)
    settings = make_settings(tmp, **overrides)
    store = Store(settings.database)
    store.create_all()
    return settings, store


def stored_tables(store: Store, jobs: list[str], times: bool = True) -> dict[str, list]:
    """Every row the two paths write, job ids as their place in `jobs` (and times left out
    unless `times`: one at a time and a batch run at different moments)."""
    at = {j: n for n, j in enumerate(jobs)}
    skip = {"id", "created_at", "started_at", "heartbeat_at", "finished_at", "duration_s",
            "checkpoint_path"}  # each store's own temp folder (the rows' lineages are compared)
    with store.reading() as s:
        def rows(sql: str) -> list[dict]:
            return [dict(r._mapping) for r in s.execute(text(sql))]

        out = {
            "jobs": sorted(({k: v for k, v in r.items() if k not in skip} | {"id": at[r["id"]]}
                            for r in rows("SELECT * FROM jobs")), key=lambda r: r["id"]),
            "job_tasks": sorted((at[r["job_id"]], r["task"]) for r in rows("SELECT * FROM job_tasks")),
            "job_counts": sorted(rows("SELECT * FROM job_counts"), key=lambda r: r["status"]),
            "task_results": [r | {"job_id": at[r["job_id"]]} | ({} if times else {"finished_at": None})
                             for r in rows("SELECT * FROM task_results ORDER BY id")],
            "result_values": rows('SELECT * FROM result_values ORDER BY result_id, "column"'),
            "result_columns": rows("SELECT * FROM result_columns ORDER BY task, name"),
            "board_counts": rows('SELECT * FROM board_counts WHERE rows <> 0 ORDER BY task, flag, dimension, value, '
                                 '"column"'),
            "job_task_counts": rows("SELECT * FROM job_task_counts WHERE jobs <> 0 ORDER BY task, status"),
        }
    return out


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_batch_stores_what_one_at_a_time_stores(request, tmp_path: Path, kind: str) -> None:
    """insert_results_many of rows in batches leaves the tables insert_results of each in turn
    leaves: rows finished out of order, at the same moment, keys shared within a batch and
    with stored rows, a column changing its meaning. Then the whole path of a seeded history:
    add_jobs, claim_many, finish_many and record_results_many against add_job, claim_next,
    finish and record_results, job for job."""
    import random

    from service.standings import record_results_many
    from service.store.results import Column, ResultRecord, insert_results, insert_results_many

    rng = random.Random(52)
    tables = []
    for path in ("one", "many"):
        settings, store = fresh_store(request, tmp_path / path, kind)
        try:
            jobs = store.add_jobs([dict(checkpoint=f"ck{n}", checkpoint_path=f"/m/ck{n}", fingerprint=f"{n:064d}",
                                        tasks=[{"name": "passkey"}], rope=None, backend="auto", priority=0)
                                   for n in range(60)])
            rng.seed(52)
            batches = []
            for job in jobs:
                records = []
                for task in ("passkey", "passkey/1024"):
                    names = rng.sample(["accuracy", "accuracy.length=512", "accuracy.length=1024", "x"], k=rng.randint(0, 3))
                    values = {c: rng.choice([None, rng.random()]) for c in names}
                    rank = None if values.get("accuracy") is None else -values["accuracy"]
                    records.append(ResultRecord(
                        task=task, checkpoint=job.checkpoint, fingerprint=job.fingerprint, lineage=None, schedule=None,
                        rope="none", backend="auto", thinking=None, data_revision=None, options={}, setting="s",
                        setting_key=f"s{rng.randint(0, 4)}", lineage_key=f"l{rng.randint(0, 2)}",
                        finished_at=NIGHT0 + timedelta(hours=rng.randint(0, 12)), trained_context=None,
                        beyond_context=[], headline="accuracy", rank=rank, values=values,
                        columns=[Column(name=c, higher_is_better=True if c != "x" else rng.choice([True, False, None]),
                                        unit=rng.choice(["fraction", "%"]), kind="metric") for c in names]))
                batches.append((job.id, records))
            with store.write_engine.begin() as conn:
                if path == "one":
                    for job_id, records in batches:
                        insert_results(conn, job_id, records)
                else:
                    for i, size in ((0, 7), (7, 1), (8, 30), (38, 22)):  # batches of several sizes, one of one
                        insert_results_many(conn, batches[i:i + size])
            tables.append(stored_tables(store, [j.id for j in jobs]))
        finally:
            store.close()
    assert tables[0] == tables[1]
    assert any(r["current"] for r in tables[0]["task_results"]) and any(not r["current"] for r in tables[0]["task_results"])
    assert kept_counts(store)[0] == kept_counts(store)[1]
    for kwargs in ({"sort": "x"}, {"sort": "x", "descending": False}, {"sort": "accuracy"}, {}):
        from service.store.results import BoardQuery

        q = BoardQuery(task="passkey", limit=500, **kwargs)  # "x" changed its direction: its ranks turned
        page = store.board(q)
        assert (page.total, sorted(page.columns), [r.job_id for r in page.rows]) == counted_board(store, q), kwargs

    tables = []
    for path in ("one", "many"):
        settings, store = fresh_store(request, tmp_path / f"{path}-store", kind)
        try:
            specs = []
            for n in range(40):
                run, night = ("runA", "runB")[n % 2], n // 2
                specs.append(dict(checkpoint=f"{run}-step{night:05d}", fingerprint=f"{run}{night}".ljust(64, "0"),
                                  checkpoint_path=str(settings.roots[0] / run / f"{run}-step{night:05d}"),
                                  tasks=[{"name": "passkey", "lengths": [512, 1024, 2048]}, {"name": "graphwalks"}],
                                  rope=None if n % 3 else {"rope_type": "yarn", "factor": 4}, backend="auto",
                                  priority=0, schedule="nightly" if run == "runA" else None))
            results = [{"passkey": passkey_entry(n // 2, 100 * n, (512, 1024) if n % 4 else (512, 1024, 2048)),
                        "graphwalks": graphwalks_entry(0.1 + (n % 9) / 10, "aaaaaaaaaaaa" if n % 5 else None)}
                       for n in range(40)]
            progress = {"passkey": {"done": 12, "total": 12}}
            ids = []
            if path == "one":
                for spec, result in zip(specs, results, strict=True):
                    job = store.add_job(**spec)
                    assert store.claim_next("bench").id == job.id
                    assert store.finish(job.id, SUCCEEDED, progress=progress)
                    store_results(settings, store, job.id, result)
                    ids.append(job.id)
            else:
                for i in range(0, 40, 16):
                    jobs = store.add_jobs(specs[i:i + 16])
                    assert [j.id for j in store.claim_many("bench", 16)] == [j.id for j in jobs]
                    assert store.finish_many([(j.id, progress) for j in jobs], SUCCEEDED) == [True] * len(jobs)
                    record_results_many(settings, store, [(j.id, r) for j, r in zip(jobs, results[i:i + 16], strict=True)])
                    ids += [j.id for j in jobs]
                with pytest.raises(ValueError, match="recorded already"):
                    record_results_many(settings, store, [(ids[0], results[0])])
            tables.append(stored_tables(store, ids, times=False))
            assert store.count_by_status()[SUCCEEDED] == 40 and store.samples_scored() == 40 * 12
        finally:
            store.close()
    assert tables[0] == tables[1]
    assert len(tables[0]["task_results"]) > 40 * 2 and tables[0]["job_counts"]


def counted_board(store: Store, q: Any) -> tuple[int, list[str], list[str]]:
    """A page as the board read it before migration 0009 (each count and column computed over the
    matching rows, a value sort a subquery per row): (total, column names, row job ids)."""
    from sqlalchemy import func, true

    from service.store.results import PER, C, T, V

    _, flag, count = PER[q.per]
    where = [T.c.task == q.task, T.c[flag] == true()]
    for name in ("checkpoint", "lineage", "schedule", "rope", "backend", "thinking"):
        if getattr(q, name) is not None:
            where.append(T.c[name] == getattr(q, name))
    if q.checkpoint_prefix is not None:  # case-sensitive on both (SQLite's LIKE was not: 0009 made it so)
        where.append(T.c.checkpoint.startswith(q.checkpoint_prefix, autoescape=True))
        where.append(func.substr(T.c.checkpoint, 1, len(q.checkpoint_prefix)) == q.checkpoint_prefix)
    if q.finished_after is not None:
        where.append(T.c.finished_at >= q.finished_after)
    if q.finished_before is not None:
        where.append(T.c.finished_at < q.finished_before)
    with store.read_engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(T).where(*where)).scalar()
        headline = conn.execute(select(T.c.headline).where(*where).order_by(T.c.finished_at.desc(), T.c.id.desc())
                                .limit(1)).scalar()
        if q.filtered():
            names = select(V.c.column).join(T, T.c.id == V.c.result_id).where(*where).distinct().subquery()
            catalog = conn.execute(select(C).where(C.c.task == q.task, C.c.name.in_(select(names.c.column))))
        else:
            catalog = conn.execute(select(C).where(C.c.task == q.task, C.c[count] > 0))
        columns = {c.name: c for c in catalog}
        ties = [T.c.checkpoint, T.c.setting, T.c.finished_at.desc(), T.c.id.desc()]
        if q.sort in ("checkpoint", "setting", "finished_at", "job"):
            col = T.c.job_id if q.sort == "job" else T.c[q.sort]
            down = q.descending if q.descending is not None else q.sort == "finished_at"
            order = [col.desc() if down else col.asc(), *ties]
        else:
            sort = q.sort or headline
            better = columns[sort].higher_is_better if sort in columns else None
            if q.sort is None and better is None:
                order = [T.c.finished_at.desc(), T.c.id.desc()]
            elif q.sort is None:
                best_first = q.descending is None or q.descending == better
                order = [T.c.unranked.asc(), T.c.rank.asc() if best_first else T.c.rank.desc(), *ties]
            else:
                value = select(V.c.value).where(V.c.result_id == T.c.id, V.c.column == sort).scalar_subquery()
                down = q.descending if q.descending is not None else better is not False
                order = [value.is_(None).asc(), value.desc() if down else value.asc(), *ties]
        jobs = conn.execute(select(T.c.job_id).where(*where).order_by(*order).limit(q.limit).offset(q.offset))
        return total, sorted(columns), list(jobs.scalars())


def kept_counts(store: Store) -> tuple[dict, dict]:
    """board_counts as stored (zeros left out), and as a scan of the flagged rows makes them."""
    from service.store.results import DIMENSIONS, _tally

    with store.reading() as s:
        stored = {(r.task, r.flag, r.dimension, r.value, r.column): r.rows
                  for r in s.execute(text('SELECT * FROM board_counts')) if r.rows}
        columns: dict[int, list[str]] = {}
        for rid, column in s.execute(text('SELECT result_id, "column" FROM result_values')):
            columns.setdefault(rid, []).append(column)
        scanned: dict = {}
        for r in s.execute(text(f"SELECT id, task, current, lineage_current, {', '.join(DIMENSIONS)} "
                                "FROM task_results")):
            for flag in ("current", "lineage_current"):
                if getattr(r, flag):
                    _tally(scanned, r.task, flag, r, columns.get(r.id, []), +1)
    return stored, {k: v for k, v in scanned.items() if v}


def test_kept_counts_equal_a_scan_of_the_rows(history) -> None:
    stored, scanned = kept_counts(history[1])
    assert stored == scanned and any(k[2] == "rope" for k in stored) and any(k[4] for k in stored)


QUERIES = [
    {}, {"per": "lineage"}, {"rope": "yarn:4"}, {"backend": "torch"}, {"schedule": "nightly"}, {"lineage": "runB"},
    {"checkpoint": "runA-step00300"}, {"checkpoint_prefix": "runB-"}, {"checkpoint_prefix": "runb-"},
    {"checkpoint_prefix": ""}, {"rope": "checkpoint", "backend": "auto"}, {"per": "lineage", "rope": "yarn:4"},
    {"finished_after": NIGHT0 + timedelta(days=2), "finished_before": NIGHT0 + timedelta(days=4)},
    {"sort": "accuracy.length=2048"}, {"sort": "accuracy.length=2048", "descending": False},
    {"sort": "accuracy.length=2048", "descending": True}, {"sort": "accuracy"}, {"sort": "accuracy", "descending": False},
    {"sort": "accuracy.length=2048", "rope": "yarn:4"}, {"sort": "accuracy.length=2048", "checkpoint_prefix": "runA-"},
    {"sort": "accuracy.length=2048", "per": "lineage"}, {"sort": "nosuchcolumn"}, {"sort": "finished_at"},
    {"sort": "finished_at", "descending": False, "lineage": "runA"}, {"sort": "checkpoint"}, {"descending": False},
]


@pytest.mark.parametrize("task", ["passkey", "graphwalks"])
def test_each_query_path_answers_what_counting_answered(history, task: str) -> None:
    """Every path of the board (kept counts, probed columns, the value walk and its tail of rows
    without a value, the filter indexes, the prefix as a range) against the queries it replaced,
    page by page across the boundary of the valued rows."""
    from service.store.results import BoardQuery

    _, store, _ = history
    for kwargs in QUERIES:
        whole = counted_board(store, BoardQuery(task=task, limit=5000, **kwargs))
        for limit, offset in ((5000, 0), (7, 0), (7, 7), (5, max(0, whole[0] - 3)), (4, max(0, whole[0] - 30)), (3, 5000)):
            q = BoardQuery(task=task, limit=limit, offset=offset, **kwargs)
            page = store.board(q)
            total, columns, jobs = counted_board(store, q)
            assert (page.total, page.total_exact, sorted(page.columns), [r.job_id for r in page.rows]) == \
                (total, True, columns, jobs), (kwargs, limit, offset)
        if kwargs and task == "passkey" and kwargs != {"sort": "nosuchcolumn"}:
            assert bool(whole[2]) == (kwargs != {"checkpoint_prefix": "runb-"}), kwargs  # names are case-sensitive


def test_a_count_of_other_filters_stops_at_its_bound(history, monkeypatch) -> None:
    """Beyond COUNT_BOUND matching rows a prefix's or a time range's `total` is the bound and says
    so; a kept count (the whole view, one fixed filter) stays exact."""
    from service.store import results

    _, store, _ = history
    monkeypatch.setattr(results, "COUNT_BOUND", 5)
    prefix = leaderboard("passkey", store, checkpoint_prefix="runB-", limit=2)
    assert (prefix.total, prefix.total_exact, len(prefix.rows)) == (5, False, 2)
    one = leaderboard("passkey", store, checkpoint="runA-step00300")
    assert one.total_exact and one.total == len(one.rows) <= 5
    for kwargs in ({}, {"lineage": "runB"}, {"rope": "yarn:4"}):
        board = leaderboard("passkey", store, limit=5000, **kwargs)
        assert board.total_exact and board.total == len(board.rows) > 5, kwargs


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_migration_0009_fills_what_the_writes_keep(request, tmp_path: Path, kind: str) -> None:
    """A store with history at 0008 (jobs finished, rerun, superseded, recorded twice, failed,
    cancelled) upgraded to 0009 has the counts, value ranks and task counts that writing the same
    history at 0009 kept: downgraded to 0008 (the tables and columns of 0009 gone), upgraded again."""
    settings, store = fresh_store(request, tmp_path, kind)
    try:
        ids = seed_history(settings, store, nights=4)
        store_results(settings, store, ids[5], {"passkey": passkey_entry(1, 7, (512, 1024))})  # recorded again
        for end in (FAILED, CANCELLED):
            job = store.add_job(checkpoint="x", checkpoint_path="/m/x", fingerprint="x" * 64,
                                tasks=[{"name": "passkey"}, {"name": "graphwalks"}], rope=None, backend="auto",
                                priority=0)
            if end == FAILED:
                assert store.claim_next("t").id == job.id and store.finish(job.id, FAILED)
            else:
                store.cancel(job.id)
        before = stored_tables(store, ids + [r.id for r in store.list_jobs(limit=500)[0] if r.id not in ids])
        assert kept_counts(store)[0] == kept_counts(store)[1]
        config, _ = _alembic()
        with store.write_engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0008")
            assert "board_counts" not in {r[0] for r in conn.execute(text(
                "SELECT name FROM sqlite_master" if kind == "sqlite" else
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))}
        assert store.upgrade(settings) == _alembic()[1].get_current_head()
        after = stored_tables(store, ids + [r.id for r in store.list_jobs(limit=500)[0] if r.id not in ids])
        assert after == before and after["board_counts"] and after["job_task_counts"]
        for kwargs in QUERIES:
            from service.store.results import BoardQuery

            q = BoardQuery(task="passkey", limit=9, offset=2, **kwargs)
            page = store.board(q)
            assert (page.total, sorted(page.columns), [r.job_id for r in page.rows]) == counted_board(store, q), kwargs
    finally:
        store.close()
