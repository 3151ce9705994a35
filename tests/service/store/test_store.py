"""The store against SQLite (WAL) and a real PostgreSQL 15: every state change is a
conditional update, so concurrent claimers and replicas never double-run or
double-submit."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from service.core.errors import Conflict, NotFound
from service.core.status import CANCELLED, QUEUED, RUNNING, SUCCEEDED
from service.store import ScheduleRow, Store, now


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'lctx.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    s = Store(url)
    if request.param == "postgres":  # one server for the session: start each test from empty tables
        from service.store import Base

        with s.write_engine.begin() as conn:
            Base.metadata.drop_all(conn)
    s.create_all()
    yield s
    s.close()


def job(store: Store, name: str = "passkey", checkpoint: str = "ck", priority: int = 0, **kw):
    return store.add_job(checkpoint=checkpoint, checkpoint_path=f"/m/{checkpoint}", fingerprint="f" * 64,
                         tasks=[{"name": name, "lengths": [256]}], rope=None, backend="auto",
                         priority=priority, **kw)


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    s = Store(f"sqlite:///{tmp_path / 'x.db'}")
    s.create_all()
    with s.read_engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    s.close()


def test_checkpoints_register_get_list_delete(store: Store) -> None:
    store.add_checkpoint("a", "/m/a", "1" * 64, "softmax", 10)
    store.add_checkpoint("a", "/m/a", "2" * 64, "softmax", 10)  # same path again: refreshed
    assert store.get_checkpoint("a").fingerprint == "2" * 64
    with pytest.raises(Conflict, match="already registered for /m/a"):
        store.add_checkpoint("a", "/m/other", "3" * 64, "softmax", 10)
    store.add_checkpoint("b", "/m/b", "4" * 64, "tda", 10)
    assert [c.name for c in store.list_checkpoints()] == ["a", "b"]
    assert store.checkpoint_by_path("/m/b").name == "b"
    store.delete_checkpoint("a")
    with pytest.raises(NotFound, match="^no checkpoint named 'a'$") as missing:  # the store names no HTTP route
        store.get_checkpoint("a")
    assert (missing.value.kind, missing.value.name) == ("checkpoint", "a")


def test_jobs_are_claimed_by_priority_then_age(store: Store) -> None:
    low = job(store, priority=0)
    high = job(store, priority=5)
    low2 = job(store, priority=0)
    order = [store.claim_next("r1").id for _ in range(3)]
    assert order == [high.id, low.id, low2.id]
    assert store.claim_next("r1") is None
    claimed = store.get_job(high.id)
    assert claimed.status == RUNNING and claimed.owner == "r1" and claimed.attempts == 1
    assert claimed.started_at is not None


def test_concurrent_claimers_never_share_a_job(store: Store) -> None:
    ids = {job(store).id for _ in range(20)}
    other = Store(store.url)  # a second replica: its own engine and connections
    claimed: list[str] = []
    lock = threading.Lock()

    def worker(s: Store, owner: str) -> None:
        while (j := s.claim_next(owner)) is not None:
            with lock:
                claimed.append(j.id)

    threads = [threading.Thread(target=worker, args=(s, f"r{i}")) for i, s in enumerate([store, other, store, other])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert sorted(claimed) == sorted(ids)  # each exactly once


def test_finish_is_conditional_so_a_cancel_wins(store: Store) -> None:
    j = job(store)
    store.claim_next("r1")
    assert store.cancel(j.id).status == CANCELLED
    assert store.finish(j.id, SUCCEEDED) is False
    assert store.get_job(j.id).status == CANCELLED
    with pytest.raises(Conflict, match="already cancelled"):
        store.cancel(j.id)


def test_progress_and_finish(store: Store) -> None:
    j = job(store)
    store.claim_next("r1")
    store.set_progress(j.id, {"passkey": {"done": 3, "total": 10}})
    assert store.get_job(j.id).progress == {"passkey": {"done": 3, "total": 10}}
    assert store.samples_scored() == 3
    assert store.finish(j.id, SUCCEEDED)
    done = store.get_job(j.id)
    assert done.status == SUCCEEDED and done.duration_s is not None and done.duration_s >= 0
    assert store.count_by_status()[SUCCEEDED] == 1


def test_recover_requeues_own_and_stale_jobs_only(store: Store) -> None:
    mine, theirs, stale = job(store), job(store), job(store)
    for owner in ("me", "them", "dead"):
        store.claim_next(owner)
    with store.writing() as s:
        s.execute(text("UPDATE jobs SET heartbeat_at = :t WHERE owner = 'dead'"), {"t": now() - timedelta(hours=1)})
    assert sorted(store.recover(60, owner="me")) == sorted([mine.id, stale.id])
    assert store.get_job(mine.id).status == QUEUED and store.get_job(theirs.id).status == RUNNING
    assert store.recover(60) == []


def test_list_jobs_filters_and_pages(store: Store) -> None:
    a = [job(store, "passkey", "ck1") for _ in range(3)]
    b = [job(store, "longbench", "ck2") for _ in range(2)]
    store.claim_next("r")
    rows, total = store.list_jobs(task="longbench")
    assert total == 2 and {r.id for r in rows} == {j.id for j in b}
    rows, total = store.list_jobs(checkpoint="ck1", limit=2, offset=0)
    rows2, _ = store.list_jobs(checkpoint="ck1", limit=2, offset=2)
    assert total == 3 and {r.id for r in rows + rows2} == {j.id for j in a}
    assert store.list_jobs(status=RUNNING)[1] == 1
    assert store.list_jobs(task="pass")[1] == 0  # whole task names only
    assert store.list_jobs(task="%")[1] == 0  # LIKE wildcards are escaped


def test_submission_pair_is_unique_across_replicas(store: Store) -> None:
    other = Store(store.url)
    results: list[object] = []

    def submit(s: Store) -> None:
        results.append(s.add_job_once("fp", "suite", checkpoint="ck", checkpoint_path="/m/ck",
                                      tasks=[{"name": "passkey"}], rope=None, backend="auto", priority=0))

    threads = [threading.Thread(target=submit, args=(s,)) for s in (store, other, store, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert sum(r is not None for r in results) == 1
    assert store.list_jobs()[1] == 1
    assert store.add_job_once("fp", "other-suite", checkpoint="ck", checkpoint_path="/m/ck",
                              tasks=[{"name": "passkey"}], rope=None, backend="auto", priority=0) is not None


def test_schedule_tick_is_claimed_once(store: Store) -> None:
    t0 = now().replace(microsecond=0)
    store.add_schedule(ScheduleRow(name="nightly", cron="0 2 * * *", watch=["/m"], suite={"tasks": []},
                                   suite_hash="h", next_run_at=t0, created_at=t0))
    with pytest.raises(Conflict, match="exists"):
        store.add_schedule(ScheduleRow(name="nightly", cron="0 2 * * *", watch=["/m"], suite={"tasks": []},
                                       suite_hash="h", next_run_at=t0, created_at=t0))
    due = store.due_schedules(t0 + timedelta(seconds=1))
    assert [d.name for d in due] == ["nightly"]
    later = t0 + timedelta(days=1)
    assert store.claim_tick("nightly", due[0].next_run_at, later, t0)
    assert not store.claim_tick("nightly", due[0].next_run_at, later, t0)  # a second replica loses
    assert store.due_schedules(t0 + timedelta(seconds=1)) == []
