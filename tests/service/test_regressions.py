"""Nightly regressions and webhooks (service/regressions.py, service/notify.py) on a real store
and a real loopback receiver: a history of ten nights with one real drop and nine noisy nights
flags exactly the drop and POSTs one notification; a drop within the noise is not flagged; a
webhook is retried with backoff, carries a Slack-compatible `text`, its secret only in its
header, and no server path or secret in its body."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service import notify, regressions
from service.api.regressions import list_regressions
from service.core.errors import InvalidRequest
from service.core.status import FAILED, SUCCEEDED
from service.store import ScheduleRow, Store, now
from tests.helpers import ThreadServer, make_settings, new_postgres_database, passkey_run

pytestmark = pytest.mark.integration  # a receiver on loopback


class Receiver:
    """A webhook receiver: records each POST's body and headers; the first `fail` answers are 503."""

    def __init__(self, fail: int = 0, status: int = 503) -> None:
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.attempts = 0
        self.fail, self.status = fail, status
        self.app = FastAPI()

        @self.app.post("/hook")
        async def hook(request: Request) -> JSONResponse:
            self.attempts += 1
            if self.attempts <= self.fail:
                return JSONResponse({"error": "later"}, status_code=self.status)
            self.bodies.append(await request.json())
            self.headers.append(dict(request.headers))
            return JSONResponse({"ok": True})


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path: Path):
    """A store on SQLite, or on a database of its own in the session's PostgreSQL."""
    overrides = {}
    if request.param == "postgres":
        overrides["database_url"] = new_postgres_database(request.getfixturevalue("postgres_url"), "regress")
    settings = make_settings(tmp_path, **overrides)
    store = Store(settings.database)
    store.create_all()
    yield settings, store
    store.close()


def nights(count: int, drop_night: int | None, flip: float = 0.03, drop: float = 0.25) -> list[dict[int, list[float]]]:
    """Per night, per length 150 trials: a checkpoint answers most trials as the one before did
    (each flips with probability `flip`); on `drop_night` it also loses `drop` of its right answers."""
    base = {n: np.random.default_rng(n).random(150) < 0.7 for n in (256, 512)}
    out = []
    for night in range(count):
        rng = np.random.default_rng(100 + night)
        scores = {}
        for n, right in base.items():
            now_right = right ^ (rng.random(150) < flip)
            if night == drop_night:
                now_right = now_right & (rng.random(150) >= drop)
            scores[n] = [float(x) for x in now_right]
        out.append(scores)
    return out


def schedule(store: Store, receiver_url: str | None, threshold: float, events: list[str] | None = None) -> None:
    hooks = [{"url": f"{receiver_url}/hook", "events": events or ["regression"]}] if receiver_url else []
    store.add_schedule(ScheduleRow(name="nightly", cron="0 2 * * *", watch=["/runs"], suite={"tasks": []},
                                   suite_hash="h", next_run_at=now(), created_at=now(),
                                   alerts={"threshold": threshold, "webhooks": hooks}))


def run_history(settings, store, history, sender) -> list[str]:
    jobs = []
    for i, scores in enumerate(history):
        job = passkey_run(settings, store, scores, checkpoint=f"step{i}", checkpoint_path=f"/runs/a/step{i}",
                          fingerprint=f"fp{i}", schedule="nightly")
        thread = regressions.job_ended(settings, store, job, SUCCEEDED, sender)
        assert thread is not None
        thread.join(timeout=30)
        jobs.append(job)
    return jobs


def test_one_real_drop_in_ten_nights_is_flagged_and_posted_once(world) -> None:
    settings, store = world
    receiver = Receiver()
    sender = notify.Notifier(backoff_s=0.01)
    with ThreadServer(receiver.app) as srv:
        schedule(store, srv.url, threshold=0.08)
        jobs = run_history(settings, store, nights(10, drop_night=6), sender)
        assert sender.flush(10)
    found = list_regressions(store)
    assert found and {r.job_id for r in found} == {jobs[6]}  # exactly the drop
    assert {r.baseline_job_id for r in found} == {jobs[5]} and {r.against for r in found} == {"previous"}
    assert "accuracy" in {r.column for r in found}
    assert all(r.high < 0 and r.difference <= -0.08 for r in found)
    assert len(receiver.bodies) == 1  # one notification for the night's drops
    body = receiver.bodies[0]
    assert body["event"] == "regression" and body["job"] == jobs[6] and body["checkpoint"] == "step6"
    assert "regression in step6" in body["text"] and "accuracy" in body["text"]  # Slack's field
    assert "/runs/a" not in str(body) and str(settings.results) not in str(body)  # no server path
    assert [r.job_id for r in list_regressions(store, job=jobs[5])] == []
    # a check run again (a coordinator restarted) stores nothing twice and tells nobody again
    assert regressions.after_end(settings, store, jobs[6], SUCCEEDED, sender) == []
    assert len(list_regressions(store)) == len(found)


def test_a_drop_within_the_noise_is_not_flagged(world) -> None:
    settings, store = world
    schedule(store, None, threshold=0.0)
    history = nights(2, drop_night=None)
    history[1][256][:3] = [0.0, 0.0, 0.0]  # three trials lost of 300: within the noise
    run_history(settings, store, history, notify.Notifier())
    assert list_regressions(store) == []


def test_a_pinned_baseline_is_compared_too(world) -> None:
    settings, store = world
    history = nights(3, drop_night=None, flip=0.0)
    pinned = passkey_run(settings, store, {n: [1.0] * 150 for n in (256, 512)}, checkpoint="release",
                         checkpoint_path="/runs/release/v1", fingerprint="fp-release")
    store.add_schedule(ScheduleRow(name="nightly", cron="0 2 * * *", watch=["/runs"], suite={"tasks": []},
                                   suite_hash="h", next_run_at=now(), created_at=now(),
                                   alerts={"threshold": 0.0, "baseline": pinned, "webhooks": []}))
    jobs = run_history(settings, store, history, notify.Notifier())
    found = list_regressions(store)
    assert {r.against for r in found} == {"pinned"} and {r.job_id for r in found} == set(jobs)


def test_webhook_retries_with_backoff_and_keeps_secrets_out_of_the_body(world, monkeypatch) -> None:
    settings, store = world
    secret = "s3cr3t-hook-value-57"
    monkeypatch.setenv("LCTX_ENDPOINT_KEY_HOOK", secret)
    receiver = Receiver(fail=2)
    sender = notify.Notifier(backoff_s=0.01)
    with ThreadServer(receiver.app) as srv:
        store.add_schedule(ScheduleRow(
            name="nightly", cron="0 2 * * *", watch=["/runs"], suite={"tasks": []}, suite_hash="h",
            next_run_at=now(), created_at=now(),
            alerts={"webhooks": [{"url": f"{srv.url}/hook", "events": ["failed"], "secret_env": "LCTX_ENDPOINT_KEY_HOOK",
                                  "secret_header": "X-Hook-Token"}]}))
        job = store.add_job(fingerprint="fp", checkpoint="step0", checkpoint_path="/runs/a/step0",
                            tasks=[{"name": "passkey"}], rope=None, backend="auto", priority=0, schedule="nightly")
        assert store.claim_next("test").id == job.id
        store.finish(job.id, FAILED, f"the worker said {secret}")
        regressions.job_ended(settings, store, job.id, FAILED, sender).join(timeout=30)
        assert sender.flush(10)
    assert receiver.attempts == 3 and len(receiver.bodies) == 1  # two 503s, then delivered
    body, headers = receiver.bodies[0], receiver.headers[0]
    assert body["event"] == "failed" and body["job"] == job.id and body["text"].startswith("lctx: job")
    assert headers["x-hook-token"] == secret  # the secret in its header only
    assert secret not in str(body) and "***" in body["error"]
    assert "/runs/a" not in str(body)


def test_a_client_error_is_final_and_a_dead_receiver_gives_up(world) -> None:
    receiver = Receiver(fail=5, status=404)
    sender = notify.Notifier(attempts=4, backoff_s=0.01)
    with ThreadServer(receiver.app) as srv:
        sender.send(notify.Hook(f"{srv.url}/hook"), {"event": "finished", "text": "x"})
        assert sender.flush(10)
    assert receiver.attempts == 1 and sender.failed == 1  # a 404 is not retried
    sender.send(notify.Hook("http://127.0.0.1:9/hook"), {"event": "finished", "text": "x"})  # nothing listens
    assert sender.flush(10) and sender.failed == 2


def test_webhook_urls_must_be_on_the_allowed_hosts(world) -> None:
    settings, _ = world
    with pytest.raises(InvalidRequest, match="not allowed"):
        notify.check_webhook(settings, "https://hooks.example.com/services/x", None)
    with pytest.raises(InvalidRequest, match="api_key_env"):
        notify.check_webhook(settings, "http://127.0.0.1:9/hook", "LCTX_API_TOKEN")
    assert notify.check_webhook(settings, "http://127.0.0.1:9/hook", None) == "http://127.0.0.1:9/hook"
    assert notify.hooks_for(settings, {"webhooks": [{"url": "https://elsewhere.example/x"}]}, "finished") == []
    # the service's own hooks (LCTX_WEBHOOKS) for every job, beside a schedule's, each URL once
    every = make_settings(settings.home / "other", webhooks="http://127.0.0.1:9/all,http://127.0.0.1:9/x")
    assert every.webhooks == ["http://127.0.0.1:9/all", "http://127.0.0.1:9/x"]
    urls = [h.url for h in notify.hooks_for(every, {"webhooks": [{"url": "http://127.0.0.1:9/x",
                                                                  "events": ["regression"]}]}, "regression")]
    assert urls == ["http://127.0.0.1:9/all", "http://127.0.0.1:9/x"]


def test_the_api_lists_regressions(world) -> None:
    settings, store = world
    from service.app import create_app

    schedule(store, None, threshold=0.0)
    run_history(settings, store, nights(2, drop_night=1), notify.Notifier())
    with ThreadServer(create_app(settings)) as srv:
        rows = httpx.get(f"{srv.url}/v1/regressions", params={"schedule": "nightly"}).json()
        assert rows and rows[0]["checkpoint"] == "step1" and rows[0]["low"] <= rows[0]["difference"] <= rows[0]["high"]
        assert httpx.get(f"{srv.url}/v1/regressions", params={"schedule": "other"}).json() == []


def test_a_job_run_by_its_coordinator_is_told_to_the_services_webhooks(tmp_path: Path) -> None:
    """The whole way: a job run by the coordinator (no Ray) ends, and the hook of LCTX_WEBHOOKS
    hears of it from the thread the coordinator started, the job not waiting for it."""
    from service.runner.coordinator import run_job
    from tests.helpers import tiny_checkpoint, wait_for

    receiver = Receiver()
    with ThreadServer(receiver.app) as srv:
        settings = make_settings(tmp_path, webhooks=f"{srv.url}/hook")
        store = Store(settings.database)
        store.create_all()
        try:
            path = tiny_checkpoint(settings.roots[0] / "tiny")
            job = store.add_job(checkpoint="tiny", checkpoint_path=str(path), fingerprint="f" * 64, rope=None,
                                tasks=[{"name": "passkey", "lengths": [64], "trials": 1}], backend="auto", priority=0)
            assert store.claim_next("test").id == job.id
            assert run_job(settings, job.id, store) == SUCCEEDED
            wait_for(lambda: receiver.bodies, timeout=30, what="the webhook's POST")
        finally:
            store.close()
    body = receiver.bodies[0]
    assert body["event"] == "finished" and body["job"] == job.id and body["status"] == "succeeded"
    assert body["link"].endswith(f"/jobs/{job.id}") and str(tmp_path) not in str(body)
