"""The dispatcher's supervisor (#27) on real child processes: small Python programs that die
on cue stand in for the dispatcher, so the restart back-off (doubling, capped, reset after
a stable life), the /readyz messages and the SIGTERM-then-SIGKILL stop are measured in
seconds. The real dispatcher's kill -9 and restart under a real server are in
test_dispatcher.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.core.settings import Settings
from service.runner.dispatcher import settings_json
from service.runner.supervisor import DispatcherSupervisor
from service.store import Store
from tests.helpers import make_settings, wait_for


def child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'lctx.db'}")
    s.upgrade()
    yield s
    s.close()


def gaps(starts: list[float]) -> list[float]:
    return [b - a for a, b in zip(starts, starts[1:], strict=False)]


@pytest.mark.timeout(30)
def test_a_dying_dispatcher_is_restarted_with_a_doubling_capped_back_off(tmp_path: Path, store: Store) -> None:
    settings = make_settings(tmp_path)
    sup = DispatcherSupervisor(settings, store, command=child("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
                               backoff_s=0.2, backoff_max_s=0.8, stable_after_s=30)
    sup.start()
    try:
        assert store.get_replica(settings.replica_id) is not None  # the replica id is claimed
        messages: set[str] = set()
        wait_for(lambda: messages.add(sup.not_ready() or "") or len(sup.deaths) >= 5, 20, 0.01, "five deaths")
    finally:
        sup.stop()
    assert all(d.returncode == -signal.SIGKILL for d in sup.deaths)
    assert "killed by SIGKILL" in sup.deaths[0].describe()
    assert any(m.startswith(f"dispatcher is restarting: pid {sup.deaths[0].pid} killed by SIGKILL after")
               and "next start in" in m for m in messages), messages
    delays = [0.2, 0.4, 0.8, 0.8]  # each start waits the back-off after the previous death
    for gap, delay in zip(gaps(sup.starts), delays, strict=False):
        assert delay <= gap < delay + 0.6, (gaps(sup.starts), delays)
    assert store.get_replica(settings.replica_id) is None  # a clean stop frees the id


@pytest.mark.timeout(30)
def test_the_back_off_starts_over_after_a_stable_life(tmp_path: Path, store: Store) -> None:
    sup = DispatcherSupervisor(make_settings(tmp_path), store,
                               command=child("import time, sys; time.sleep(0.5); sys.exit(7)"),
                               backoff_s=0.3, backoff_max_s=5, stable_after_s=0.4)
    sup.start()
    try:
        wait_for(lambda: len(sup.deaths) >= 3, 20, 0.02, "three deaths")
    finally:
        sup.stop()
    assert [d.returncode for d in sup.deaths[:3]] == [7, 7, 7]
    assert "exited with code 7 after 0." in sup.deaths[0].describe()
    for gap in gaps(sup.starts)[:2]:  # lived 0.5 s each (longer than stable): 0.3 s every time, no doubling
        assert 0.8 <= gap < 1.5, gaps(sup.starts)


@pytest.mark.timeout(30)
def test_stop_terminates_then_kills_a_dispatcher_that_ignores_sigterm(tmp_path: Path, store: Store) -> None:
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('up', flush=True); time.sleep(60)")
    sup = DispatcherSupervisor(make_settings(tmp_path), store, command=child(code), stop_timeout_s=1.0)
    sup.start()
    wait_for(lambda: sup.pid is not None, 10, 0.02, "a child")
    time.sleep(0.5)  # past its start-up: SIGTERM is ignored from here on
    pid = sup.pid
    assert sup.not_ready() == f"dispatcher is starting (pid {pid})"  # no report from it yet
    began = time.monotonic()
    sup.stop()
    assert 1.0 <= time.monotonic() - began < 5
    assert sup.returncode == -signal.SIGKILL and not Path(f"/proc/{pid}").exists()


@pytest.mark.timeout(30)
def test_stop_of_a_well_behaved_dispatcher_takes_no_kill(tmp_path: Path, store: Store) -> None:
    sup = DispatcherSupervisor(make_settings(tmp_path), store, command=child("import time; time.sleep(60)"),
                               stop_timeout_s=10)
    sup.start()
    wait_for(lambda: sup.pid is not None, 10, 0.02, "a child")
    sup.stop()
    assert sup.returncode == -signal.SIGTERM and not sup.deaths  # a stop is not a death: no restart


def test_the_settings_reach_the_dispatcher_whole_secrets_included(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, api_token="s3cret", replica_id="r-1", ray_address="10.0.0.1:6379",
                             nightly_suite={"tasks": [{"name": "passkey", "lengths": [256]}]})
    line = settings_json(settings)
    assert "\n" not in line
    again = Settings(**json.loads(line))
    assert again == settings and again.token == "s3cret"


def test_a_dispatcher_started_by_hand_says_who_starts_it() -> None:
    run = subprocess.run([sys.executable, "-m", "service.runner.dispatcher"], input="", capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "started by `lctx serve`" in run.stderr


@pytest.mark.timeout(30)
def test_job_durations_are_observed_once_each_for_this_replicas_jobs(tmp_path: Path, store: Store) -> None:
    from service.core.metrics import Metrics
    from service.core.status import FAILED, SUCCEEDED

    def finished_job(owner: str, status: str) -> str:
        job = store.add_job(checkpoint="ck", checkpoint_path="/m/ck", fingerprint="f" * 64,
                            tasks=[{"name": "passkey", "lengths": [256]}])
        assert store.claim_next(owner).id == job.id
        store.finish(job.id, status)
        return job.id

    settings = make_settings(tmp_path, replica_id="me")
    finished_job("me", SUCCEEDED)  # before this server started: not its to count
    metrics = Metrics(store)
    sup = DispatcherSupervisor(settings, store, metrics, command=child("import time; time.sleep(60)"))
    sup.start()
    try:
        finished_job("me", SUCCEEDED)
        finished_job("me", FAILED)
        finished_job("someone-else", SUCCEEDED)  # another replica's job: its histogram, not ours
        for _ in range(3):  # the watcher's ticks and scrapes race: still once each
            sup.observe_finished()
        time.sleep(1.5)  # the watcher's own pass
        finished_job("me", SUCCEEDED)
        sup.observe_finished()
    finally:
        sup.stop()

    def count(status: str) -> float:
        return metrics.registry.get_sample_value("lctx_job_duration_seconds_count", {"status": status}) or 0

    assert (count(SUCCEEDED), count(FAILED)) == (2, 1)
