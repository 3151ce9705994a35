"""Cron schedules: a due schedule with a new checkpoint in a watch folder submits
exactly one job, and not again on the next tick, after a restart, or from a second
replica; a retrained checkpoint (new fingerprint) is submitted again."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.core.errors import Forbidden, InvalidRequest
from service.schedules import ScheduleTicker, create_schedule
from service.schemas import ScheduleCreate
from service.store import Store
from tests.helpers import make_settings, tiny_checkpoint

SUITE = {"tasks": [{"name": "passkey", "lengths": [64], "trials": 1}]}


@pytest.fixture
def env(tmp_path: Path):
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()
    watch = settings.roots[0] / "nightly"
    watch.mkdir()
    yield settings, store, watch
    store.close()


def test_due_schedule_submits_once_per_checkpoint(env) -> None:
    settings, store, watch = env
    schedule = create_schedule(store, settings, ScheduleCreate(name="nightly", cron="0 2 * * *",
                                                                watch=[str(watch)], suite=SUITE))
    scheduler = ScheduleTicker(settings, store)
    assert scheduler.tick(schedule.next_run_at - timedelta(seconds=1)) == []  # not due yet
    tiny_checkpoint(watch / "run-1")
    (watch / "not-a-checkpoint").mkdir()
    jobs = scheduler.tick(schedule.next_run_at)
    assert len(jobs) == 1 and jobs[0].schedule == "nightly" and jobs[0].checkpoint == "run-1"
    assert store.get_checkpoint("run-1").fingerprint == jobs[0].fingerprint  # registered on the way
    next_tick = store.get_schedule("nightly").next_run_at
    assert next_tick == schedule.next_run_at + timedelta(days=1)
    assert scheduler.tick(next_tick) == []  # the next night: nothing new
    assert ScheduleTicker(settings, Store(settings.database)).tick(next_tick + timedelta(days=1)) == []  # restarted
    tiny_checkpoint(watch / "run-2", seed=1)
    later = scheduler.tick(next_tick + timedelta(days=2))
    assert [j.checkpoint for j in later] == ["run-2"]
    tiny_checkpoint(watch / "run-1", seed=7)  # retrained in place: new weights, new fingerprint
    again = scheduler.tick(next_tick + timedelta(days=3))
    assert [j.checkpoint for j in again] == ["run-1"] and again[0].fingerprint != jobs[0].fingerprint
    assert store.list_jobs()[1] == 3


def test_two_replicas_ticking_at_once_submit_once(env) -> None:
    settings, store, watch = env
    tiny_checkpoint(watch / "run-1")
    schedule = create_schedule(store, settings, ScheduleCreate(name="n", cron="*/5 * * * *",
                                                                watch=[str(watch)], suite=SUITE))
    replicas = [ScheduleTicker(settings, Store(settings.database)) for _ in range(3)]
    out: list[int] = []
    threads = [threading.Thread(target=lambda s=s: out.append(len(s.tick(schedule.next_run_at)))) for s in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(out) == 1 and store.list_jobs()[1] == 1
    # even if a tick is taken twice (clock skew between replicas), the pair is unique
    assert replicas[0].run_schedule(store.get_schedule("n")) == []


def test_schedule_requests_are_validated(env) -> None:
    settings, store, watch = env
    with pytest.raises(InvalidRequest, match="has 2 fields; use five"):
        create_schedule(store, settings, ScheduleCreate(name="x", cron="every night", watch=[str(watch)],
                                                        suite=SUITE))
    with pytest.raises(InvalidRequest, match="not a valid cron"):
        create_schedule(store, settings, ScheduleCreate(name="x", cron="0 2 * * funday", watch=[str(watch)],
                                                        suite=SUITE))
    with pytest.raises(InvalidRequest, match="has 6 fields"):  # croniter's seconds field: every second
        create_schedule(store, settings, ScheduleCreate(name="x", cron="* * * * * *", watch=[str(watch)],
                                                        suite=SUITE))
    with pytest.raises(Forbidden, match="allowed roots"):
        create_schedule(store, settings, ScheduleCreate(name="x", cron="0 2 * * *", watch=["/etc"], suite=SUITE))
    with pytest.raises(ValidationError, match="unknown task"):  # the request model refuses it
        create_schedule(store, settings, ScheduleCreate(name="x", cron="0 2 * * *", watch=[str(watch)],
                                                        suite={"tasks": [{"name": "nope"}]}))


def test_a_watch_folder_given_twice_is_refused_naming_both(env) -> None:
    """The same folder twice, or spelled two ways ("nightly", "nightly/", its absolute path)."""
    settings, store, watch = env
    (settings.roots[0] / "other").mkdir()
    for given, names in ((["nightly", "other", "nightly"], "watch[2] 'nightly' is the folder watch[0] 'nightly'"),
                         (["nightly", "nightly/"], "watch[1] 'nightly/' is the folder watch[0] 'nightly'"),
                         ([str(watch), "nightly"], f"watch[1] 'nightly' is the folder watch[0] '{watch}'")):
        with pytest.raises(InvalidRequest, match="give each folder once") as e:
            create_schedule(store, settings, ScheduleCreate(name="x", cron="0 2 * * *", watch=given, suite=SUITE))
        assert names in str(e.value), str(e.value)
    assert store.list_schedules() == []
    assert create_schedule(store, settings, ScheduleCreate(name="x", cron="0 2 * * *", watch=["nightly", "other"],
                                                           suite=SUITE)).watch == [str(watch), str(watch.parent / "other")]


def test_run_now_lists_what_it_submitted_and_why_it_skipped_each_checkpoint(env) -> None:
    settings, store, watch = env
    tiny_checkpoint(watch / "run-1")
    tiny_checkpoint(watch / "run-2", seed=1)
    (watch / "broken").mkdir()
    (watch / "broken" / "config.json").write_text("{}")  # a checkpoint folder whose config says nothing
    first = create_schedule(store, settings, ScheduleCreate(name="a", cron="0 2 * * *", watch=[str(watch)],
                                                             suite=SUITE))
    scheduler = ScheduleTicker(settings, store)
    woken = []
    scheduler.on_submit = lambda: woken.append(1)
    out = {o.folder.name: o for o in scheduler.run_now("a")}
    assert sorted(out) == ["broken", "run-1", "run-2"] and woken == [1]
    assert out["run-1"].job is not None and out["run-1"].skipped is None and out["run-2"].job is not None
    assert out["broken"].job is None and "no weights in" in out["broken"].skipped
    assert store.get_schedule("a").next_run_at == first.next_run_at  # ticked now; its cron is unchanged
    again = {o.folder.name: o for o in scheduler.run_now("a")}
    assert again["run-1"].job is None and f"by this schedule (job {out['run-1'].job.id}" in again["run-1"].skipped
    assert woken == [1]  # nothing submitted: nothing to wake
    # a second schedule with the same suite over the same folder: covered by the first
    create_schedule(store, settings, ScheduleCreate(name="b", cron="0 3 * * *", watch=[str(watch)], suite=SUITE))
    other = {o.folder.name: o for o in scheduler.run_now("b")}
    assert other["run-2"].job is None and "already covered by schedule 'a'" in other["run-2"].skipped
    assert store.list_jobs()[1] == 2
    with pytest.raises(Exception, match="schedule"):
        scheduler.run_now("missing")


def test_alerts_are_checked_and_kept(env) -> None:
    """A schedule's webhooks are refused off the allowed hosts or with a secret variable off the
    allow-list, and a pinned baseline must exist; accepted alerts are stored with the schedule."""
    from service.core.errors import Missing

    settings, store, watch = env

    def make(alerts: dict, name: str = "x"):
        return create_schedule(store, settings, ScheduleCreate(name=name, cron="0 2 * * *", watch=[str(watch)],
                                                               suite=SUITE, alerts=alerts))

    with pytest.raises(InvalidRequest, match="webhook host 'hooks.example.com' is not allowed"):
        make({"webhooks": [{"url": "https://hooks.example.com/x"}]})
    with pytest.raises(InvalidRequest, match="LCTX_API_TOKEN"):
        make({"webhooks": [{"url": "http://127.0.0.1:9/x", "secret_env": "LCTX_API_TOKEN"}]})
    with pytest.raises(Missing):
        make({"baseline": "nosuchjob"})
    with pytest.raises(ValidationError):  # a negative threshold, an unknown event
        make({"threshold": -1})
    kept = make({"threshold": 0.05, "webhooks": [{"url": "http://127.0.0.1:9/x", "events": ["regression"]}]})
    assert store.get_schedule(kept.name).alerts == {
        "threshold": 0.05, "baseline": None,
        "webhooks": [{"url": "http://127.0.0.1:9/x", "events": ["regression"], "secret_env": None,
                      "secret_header": "Authorization"}]}
    from service.views import schedule_out

    shown = schedule_out(store.get_schedule(kept.name), settings).alerts
    assert shown["webhooks"][0]["url"] == "http://127.0.0.1:9/…"  # the path (a receiver's token) not answered
