"""Warm workers (service/runner/warm.py): idle workers kept by model key, least recently used out
first, within a count and a memory budget, let go when idle too long; and over real HTTP
with real Ray, the second job of a checkpoint runs on the worker the first one left warm
(no load), while a job of another checkpoint loads its own."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from service.core.layout import job_results
from service.runner.warm import WarmPool, same_weights
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint, wait_job

pytestmark = pytest.mark.integration  # a server on loopback and Ray


class Fake:
    def __init__(self, name: str) -> None:
        self.name, self.killed = name, False

    def kill(self) -> None:
        self.killed = True


def test_the_pool_keeps_the_most_recent_within_its_budget() -> None:
    pool = WarmPool(max_workers=2, budget_bytes=100, idle_seconds=60)
    a, b, c, d = Fake("a"), Fake("b"), Fake("c"), Fake("d")
    pool.put(a, ("m1",), 40)
    pool.put(b, ("m2",), 40)
    pool.put(c, ("m1",), 40)  # over the budget (120 > 100) and the count: a, the oldest, goes
    assert a.killed and not b.killed and len(pool) == 2
    assert pool.take(("m3",)) is None
    assert pool.take(("m1",)) is c and len(pool) == 1
    pool.put(d, ("m1",), 200)  # larger than the whole budget: never kept
    assert d.killed
    assert pool.evict_one(keep=("m2",)) is False and pool.evict_one(keep=("m1",)) is True and b.killed
    g = Fake("g")
    pool.put(g, ("m2",), 10)  # with any_key, a worker of the same key goes when no other is idle
    assert pool.evict_one(keep=("m2",), any_key=True) is True and g.killed and len(pool) == 0
    assert pool.evict_one(keep=("m2",), any_key=True) is False
    e = Fake("e")
    pool.put(e, ("m1",), 10)
    pool.idle_seconds = 0.01
    time.sleep(0.02)
    pool.expire()
    assert e.killed and len(pool) == 0
    h, i = Fake("h"), Fake("i")
    pool.idle_seconds = 60
    pool.put(h, ("m1", "yarn"), 10)
    pool.put(i, ("m2", "none"), 10)
    near = lambda key: key[0] == "m1"  # noqa: E731 - the same weights, another setting
    assert pool.take(("m1", "none")) is None and pool.take(("m1", "none"), near=near) is h
    assert pool.take(("m1", "none"), near=near) is None and len(pool) == 1
    off = WarmPool(max_workers=0, budget_bytes=100, idle_seconds=60)
    f = Fake("f")
    off.put(f, ("m1",), 1)
    assert f.killed


def test_a_second_job_of_a_checkpoint_runs_on_the_warm_worker(ray_cluster: str, tmp_path: Path) -> None:
    tiny_checkpoint(tmp_path / "models" / "tiny-a", seed=0)
    tiny_checkpoint(tmp_path / "models" / "tiny-b", seed=1)
    settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="warm-test", job_workers=1)
    job = {"tasks": [{"name": "passkey", "lengths": [128], "trials": 2, "seed": 0}]}

    def run(checkpoint: str, c: httpx.Client) -> dict:
        r = c.post("/v1/jobs", json={**job, "checkpoint": str(tmp_path / "models" / checkpoint)})
        assert r.status_code == 202, r.text
        done = wait_job(c, r.json()["id"], timeout=120)
        assert done["status"] == "succeeded", done
        return json.loads((job_results(settings, done["id"])).read_text())

    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        first = run("tiny-a", c)
        second = run("tiny-a", c)
        other = run("tiny-b", c)
        again = run("tiny-a", c)  # the pool kept tiny-a's worker beside tiny-b's
    assert first["work"]["warm_workers"] == 0 and second["work"]["warm_workers"] == 1
    assert other["work"]["warm_workers"] == 0 and again["work"]["warm_workers"] == 1
    # the same answers as a cold worker's: nothing of the first job leaks into the second
    assert second["results"]["passkey"]["result"] == first["results"]["passkey"]["result"]


def test_another_rope_setting_of_the_same_weights_loads_in_the_idle_workers_process(ray_cluster: str,
                                                                                    tmp_path: Path) -> None:
    """A RoPE sweep: each job of the checkpoint under another setting takes the worker the one
    before left idle, which keeps the weights it holds (no actor start, no torch import, no
    read), and its results are those of the setting, not of the model the process held before."""
    a = ("checkpoint", "/m/a", "f1", "none", "torch", "cpu")
    assert same_weights(a, a[:3] + ("yarn:2",) + a[4:]) and same_weights(a, a[:4] + ("triton", "cpu"))
    assert not same_weights(a, ("checkpoint", "/m/b", "f2") + a[3:]) and not same_weights(a, a[:5] + ("cuda",))
    assert not same_weights(("endpoint", "e"), ("endpoint", "e"))
    tiny_checkpoint(tmp_path / "models" / "tiny-a", seed=0)
    settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="rekey-test", job_workers=1)
    path = str(tmp_path / "models" / "tiny-a")
    tasks = [{"name": "passkey", "lengths": [128, 256], "trials": 3, "seed": 0}]

    def run(rope: str, c: httpx.Client) -> dict:
        r = c.post("/v1/jobs", json={"checkpoint": path, "tasks": tasks, "rope": rope})
        assert r.status_code == 202, r.text
        done = wait_job(c, r.json()["id"], timeout=120)
        assert done["status"] == "succeeded", done
        return json.loads((job_results(settings, done["id"])).read_text())

    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        plain = run("none", c)
        scaled = run("yarn:4", c)
        again = run("none", c)
    assert [r["work"]["reloaded_workers"] for r in (plain, scaled, again)] == [0, 1, 1]
    assert all(r["work"]["warm_workers"] == 0 for r in (plain, scaled, again))
    assert scaled["model"]["rope"] != plain["model"]["rope"] and again["model"]["rope"] == plain["model"]["rope"]
    # the setting's own answers: nothing of YaRN's tables stays in the process that held them
    assert again["results"]["passkey"]["result"] == plain["results"]["passkey"]["result"]


def test_a_worker_waiting_for_resources_gets_those_idle_warm_workers_hold(ray_cluster: str, tmp_path: Path) -> None:
    """One worker slot (a job asks for both CPUs), three jobs at once behind a warm worker:
    only one new worker can be placed; the others wait for Ray, and each time a job ends its
    worker is kept warm, holding the slot. Those waiting must get it (the executor lets idle
    warm workers go for them), or a job waits forever: the CI failure this test reproduces."""
    for name, seed in (("tiny-a", 0), ("tiny-b", 1), ("tiny-c", 2)):
        tiny_checkpoint(tmp_path / "models" / name, seed=seed)
    settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="warm-wait", job_workers=1,
                             job_cpus=2, max_running_jobs=3)
    job = {"tasks": [{"name": "passkey", "lengths": [128], "trials": 2, "seed": 0}]}

    def submit(checkpoint: str, c: httpx.Client) -> str:
        r = c.post("/v1/jobs", json={**job, "checkpoint": str(tmp_path / "models" / checkpoint)})
        assert r.status_code == 202, r.text
        return r.json()["id"]

    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        assert wait_job(c, submit("tiny-a", c), timeout=120)["status"] == "succeeded"  # its worker stays warm
        ids = [submit(name, c) for name in ("tiny-b", "tiny-b", "tiny-c")]
        ended = [wait_job(c, job_id, timeout=180) for job_id in ids]
    assert [e["status"] for e in ended] == ["succeeded"] * 3, ended
