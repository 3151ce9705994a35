"""One job spread over workers: work units, their files folded into one samples.jsonl,
results equal to a one-worker run, a dead worker's unit run again with only its unfinished
samples, cancel across every unit. The Ray tests run real actors on the session's Ray."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from ray.exceptions import WorkerCrashedError

from evaluators.errors import EvaluationCancelled
from evaluators.run import part_of
from evaluators.samplelog import SAMPLES_FILE, UNITS_DIR, merge_units, sample_files
from evaluators.task import Sample
from service.core.layout import job_results, task_dir
from service.core.status import CANCELLED, FAILED, RUNNING, SUCCEEDED
from service.runner.calls import Load, RunUnit, WorkerCall
from service.runner.coordinator import JobRun, LocalHandle, run_job
from service.runner.progress import unit_notes
from service.runner.resolve import worker_config
from service.runner.units import plan_units
from service.store import Store
from tests.helpers import KILL_MID_UNIT_BATCH, make_settings, tiny_checkpoint, wait_for

pytestmark = pytest.mark.integration  # Ray

PASSKEY = {"name": "passkey", "lengths": [128, 256], "trials": 5, "seed": 1}
NEEDLE = {"name": "needle", "lengths": [128], "depths": [0, 50, 100], "trials": 1, "seed": 1}


def test_units_cover_every_planned_sample_once() -> None:
    units = plan_units({"passkey": dict(PASSKEY, trials=50), "needle": NEEDLE,
                        "seq": dict(PASSKEY, search="sequential"), "lb": {"name": "longbench"}},
                       unit_samples=32, workers=3)
    counts = {key: [u.count for u in units if u.key == key] for key in ("passkey", "needle", "seq", "lb")}
    assert counts == {"passkey": [4] * 4, "needle": [1], "seq": [1], "lb": [3] * 3}  # 100 samples: 4 units of <= 32
    samples = [Sample(str(i)) for i in range(100)]
    parts = [part_of(samples, (i, 4)) for i in range(4)]
    assert [s.id for p in parts for s in p] == [s.id for s in samples] and max(map(len, parts)) <= 32
    with pytest.raises(ValueError, match="part 4 of 4 does not exist"):
        part_of(samples, (4, 4))
    # Sized by work when no sample count is set: 100 passkey samples, 19,200 prompt tokens and 10
    # generated each (20,200 tokens of work), in units of about 5,100 tokens; a tiny task stays one unit.
    by_work = plan_units({"passkey": dict(PASSKEY, trials=50), "small": dict(PASSKEY, trials=1)}, None, 3,
                         unit_tokens=5_100)
    assert [u.count for u in by_work if u.key == "passkey"] == [4] * 4
    assert [u.count for u in by_work if u.key == "small"] == [1]


def test_merging_unit_files_keeps_each_sample_once(tmp_path: Path) -> None:
    rec = {"task": "passkey", "config": "c"}
    (tmp_path / SAMPLES_FILE).write_text(json.dumps({**rec, "id": "a", "score": 1}) + "\n")
    units = tmp_path / UNITS_DIR
    units.mkdir()
    # a unit run that died after recording b (and half of c), and its re-run that recorded b again, then c
    (units / "u00000of00001-1.jsonl").write_text(json.dumps({**rec, "id": "b", "score": 0}) + '\n{"task": "pa')
    (units / "u00000of00001-2.jsonl").write_text("".join(json.dumps({**rec, "id": i, "score": 1}) + "\n"
                                                         for i in ("b", "c", "a")))
    (units / "u00000of00001-2.json").write_text('{"tokens": 5}')  # its note stays: progress and prefix use read it
    assert merge_units(tmp_path) == 2
    ids = [json.loads(line)["id"] for line in (tmp_path / SAMPLES_FILE).read_text().splitlines()]
    assert ids == ["a", "b", "c"] and sample_files(tmp_path) == [tmp_path / SAMPLES_FILE]
    assert [p.name for p in units.iterdir()] == ["u00000of00001-2.json"]
    assert merge_units(tmp_path) == 0


@pytest.fixture
def env(tmp_path: Path):
    settings = make_settings(tmp_path, unit_samples=4, job_workers=2, max_attempts=2)
    store = Store(settings.database)
    store.create_all()
    path = tiny_checkpoint(settings.roots[0] / "tiny")
    yield settings, store, path
    store.close()


def claim(store: Store, path: Path, tasks: list[dict]) -> Any:
    job = store.add_job(checkpoint="tiny", checkpoint_path=str(path), fingerprint="f" * 64, tasks=tasks,
                        rope=None, backend="auto", priority=0)
    claimed = store.claim_next("test")
    assert claimed.id == job.id
    return claimed


def records(settings, job_id: str, key: str) -> list[dict]:
    return [json.loads(line) for line in (task_dir(settings, job_id, key) / SAMPLES_FILE).read_text().splitlines()]


def comparable(entry: dict) -> dict:
    """A task entry without what differs between two runs of the same work (paths, timings, reuse)."""
    return {k: v for k, v in entry.items() if k not in ("samples_file", "plots", "prefix_cache")}


class LoadTogether:
    """Real Ray workers whose first `workers` `load` futures resolve only once all of them
    have loaded, so that every worker is idle when the first unit is handed out (on a busy
    machine one worker could otherwise run every unit before the other one has loaded). A
    failed load, and any later worker's, passes straight through; the rest is the real actor."""

    def __init__(self, settings, job_id: str, workers: int) -> None:
        self.settings, self.job_id, self.workers = settings, job_id, workers
        self.lock = threading.Lock()
        self.loads: list[tuple[Future, Future]] = []  # (the actor's, the one handed out)

    def spawn(self) -> Any:
        from service.runner.executor import ActorHandle

        return _Gated(ActorHandle(self.settings, self.job_id, 0), self)

    def gate(self, real: Future) -> Future:
        gated: Future = Future()
        with self.lock:
            self.loads.append((real, gated))
        real.add_done_callback(lambda _: self.release())
        return gated

    def release(self) -> None:
        with self.lock:
            first = self.loads[: self.workers]
            together = len(first) == self.workers and all(real.done() for real, _ in first)
            for i, (real, gated) in enumerate(self.loads):
                if real.done() and not gated.done() and (together or i >= self.workers or real.exception()):
                    if real.exception():
                        gated.set_exception(real.exception())
                    else:
                        gated.set_result(real.result())


class _Gated:
    def __init__(self, handle: Any, together: LoadTogether) -> None:
        self.handle, self.together = handle, together

    def call(self, call: WorkerCall) -> Future:
        future = self.handle.call(call)
        return self.together.gate(future) if isinstance(call, Load) else future

    def kill(self) -> None:
        self.handle.kill()


def spread_run(settings, store, job, workers: int = 2) -> JobRun:
    from service.runner.executor import DIED

    return JobRun(settings, store, job, LoadTogether(settings, job.id, workers).spawn, workers, died=DIED)


@pytest.mark.timeout(240)
def test_a_job_spread_over_two_ray_workers_equals_the_one_worker_run(ray_cluster: str, env) -> None:
    settings, store, path = env
    spread = claim(store, path, [PASSKEY, NEEDLE])
    run = spread_run(settings, store, spread)
    assert run.run() == SUCCEEDED, store.get_job(spread.id).error
    assert run.units == 4 and run.unit_runs == 4 and not run.reruns  # passkey: 10 samples in 3 units; needle: 1
    single = claim(store, path, [PASSKEY, NEEDLE])
    assert run_job(settings, single.id, store) == SUCCEEDED

    results = {j.id: json.loads((job_results(settings, j.id)).read_text()) for j in (spread, single)}
    assert results[spread.id]["work"] == {"workers": 2, "units": 4, "unit_runs": 4, "reruns": [], "warm_workers": 0,
                                           "reloaded_workers": 0}
    for key in ("passkey", "needle"):
        assert comparable(results[spread.id]["results"][key]) == comparable(results[single.id]["results"][key])
        spread_records, single_records = records(settings, spread.id, key), records(settings, single.id, key)
        assert sorted(r["id"] for r in spread_records) == sorted(r["id"] for r in single_records)
        assert len({r["id"] for r in spread_records}) == len(spread_records)  # each sample exactly once
        assert {r["id"]: r["prediction"] for r in spread_records} == {r["id"]: r["prediction"] for r in single_records}
        assert not list((task_dir(settings, spread.id, key) / UNITS_DIR).glob("*.jsonl"))
    notes = unit_notes(task_dir(settings, spread.id, "passkey"))
    assert len(notes) == 3 and len({n["pid"] for n in notes}) == 2  # both workers took passkey units
    assert results[spread.id]["results"]["passkey"]["prefix_cache"]["prompt_tokens"] == \
        sum(n["prompt_tokens"] for n in notes)
    progress = store.get_job(spread.id).progress
    assert {k: (p["done"], p["total"]) for k, p in progress.items()} == {"passkey": (10, 10), "needle": (3, 3)}


@pytest.mark.timeout(240)
def test_a_cancel_stops_every_unit_and_keeps_what_they_recorded(ray_cluster: str, env) -> None:
    settings, store, path = env
    trials = 600
    # one sample at a time, so records come a sample apart; 600 samples, so the cancel lands mid-job
    # even on a fast machine (seen after up to ~2 s: a drain every 0.5 s, a status read every 1 s;
    # a CI machine did all of 60 in that time)
    settings = settings.model_copy(update={"engine_max_batch": KILL_MID_UNIT_BATCH})
    job = claim(store, path, [dict(PASSKEY, lengths=[2048], trials=trials)])
    run = spread_run(settings, store, job)
    thread = threading.Thread(target=run.run)
    thread.start()
    folder = task_dir(settings, job.id, "passkey")
    wait_for(lambda: sum(len(f.read_text().splitlines()) for f in sample_files(folder)) >= 2, 120, 0.1,
             "two samples recorded")
    store.cancel(job.id)
    thread.join(60)
    assert not thread.is_alive() and run.status == CANCELLED
    recorded = [json.loads(line)["id"] for f in sample_files(folder) for line in f.read_text().splitlines()
                if line.endswith("}")]
    assert 2 <= len(recorded) < trials and len(set(recorded)) == len(recorded)


class DiesOnce:
    """A worker handle whose first call of `method` dies with its worker (as a killed actor's
    future does). A dying `run_unit` first records its slice's first sample, which the next
    `drain` hands over (as one answered before the death does); its worker dies at the drain
    after. The rest is the real worker."""

    def __init__(self, settings, job_id: str, deaths: list[int], method: str = "run_unit") -> None:
        self.inner = LocalHandle(worker_config(settings))
        self.deaths, self.method = deaths, method
        self.dying: Future | None = None  # the dying unit's answer, failed at the second drain
        self.drains = 0

    def call(self, call: WorkerCall) -> Future:
        method = call.method
        if method == "drain" and self.dying is not None:
            self.drains += 1
            if self.drains == 2:
                self.dying.set_exception(WorkerCrashedError())
            return self.inner.call(call)
        if method != self.method or not self.deaths:
            return self.inner.call(call)
        self.deaths.pop()
        if method != "run_unit":
            return self.died()
        worker, checks = self.inner.worker, iter([False, True])  # true after the first record: it stops there
        real, worker.stopped = worker.stopped, type("Stop", (), {"is_set": lambda _: next(checks, True),
                                                                  "clear": lambda _: None})()
        try:
            worker.answer(call)
        except EvaluationCancelled:
            pass
        finally:
            worker.stopped = real
        self.dying = Future()
        return self.dying

    @staticmethod
    def died() -> Future:
        future: Future = Future()
        future.set_exception(WorkerCrashedError())
        return future

    def kill(self) -> None:
        self.inner.kill()


def test_a_dead_workers_unit_runs_again_with_only_its_unfinished_samples(env) -> None:
    settings, store, path = env
    job = claim(store, path, [dict(PASSKEY, lengths=[128], trials=4)])  # one unit of 4 samples
    deaths = [1]
    run = JobRun(settings, store, job, lambda: DiesOnce(settings, job.id, deaths), 1, died=(WorkerCrashedError,))
    assert run.run() == SUCCEEDED, store.get_job(job.id).error
    assert run.unit_runs == 2 and len(run.reruns) == 1 and "WorkerCrashedError" in run.reruns[0]
    ids = [r["id"] for r in records(settings, job.id, "passkey")]
    assert sorted(ids) == sorted(f"passkey/len=128/trial={t}" for t in range(4))  # 0 lost, 0 duplicated
    notes = unit_notes(task_dir(settings, job.id, "passkey"))
    assert sorted(n.get("prompt_tokens", 0) > 0 for n in notes) == [True, True]  # the re-run did the other 3


@pytest.mark.parametrize("method", ["finish_task", "load"])
def test_a_worker_dying_while_it_finishes_leaves_the_work_to_a_fresh_one(env, method: str) -> None:
    settings, store, path = env
    job = claim(store, path, [dict(PASSKEY, lengths=[128], trials=4)])
    deaths = [1]
    run = JobRun(settings, store, job, lambda: DiesOnce(settings, job.id, deaths, method), 1,
                 died=(WorkerCrashedError,))
    assert run.run() == SUCCEEDED, store.get_job(job.id).error
    assert not deaths and run.unit_runs == 1 and not run.reruns  # only the finishing step ran again
    results = json.loads((job_results(settings, job.id)).read_text())
    assert results["results"]["passkey"]["samples"] == 4
    assert sorted(r["id"] for r in records(settings, job.id, "passkey")) == \
        sorted(f"passkey/len=128/trial={t}" for t in range(4))


def test_a_unit_whose_worker_keeps_dying_fails_the_job_saying_so(env) -> None:
    settings, store, path = env
    job = claim(store, path, [dict(PASSKEY, lengths=[128], trials=2)])
    deaths = [1, 1, 1]
    run = JobRun(settings, store, job, lambda: DiesOnce(settings, job.id, deaths), 1, died=(WorkerCrashedError,))
    assert run.run() == FAILED
    error = store.get_job(job.id).error
    assert "passkey part 1/1: its worker died 2 times" in error and store.get_job(job.id).status != RUNNING


class Outstanding:
    """A real in-process worker that notes how many of its units were handed out and not yet
    finished each time it is given one."""

    def __init__(self, settings, job_id: str, seen: list[int]) -> None:
        self.inner, self.seen, self.open = LocalHandle(worker_config(settings)), seen, 0

    def call(self, call: WorkerCall) -> Future:
        if not isinstance(call, RunUnit):
            return self.inner.call(call)
        self.open += 1
        self.seen.append(self.open)
        future = self.inner.call(call)
        future.add_done_callback(lambda _: setattr(self, "open", self.open - 1))
        return future

    def kill(self) -> None:
        self.inner.kill()


def test_the_next_unit_is_handed_out_before_the_worker_goes_idle(env) -> None:
    """With more units left than workers, a worker's next unit is queued behind the one it
    runs (no round trip to the coordinator between them); in the last round it is not."""
    settings, store, path = env
    job = claim(store, path, [dict(PASSKEY, lengths=[128], trials=24)])  # 6 units of 4 on one worker
    seen: list[int] = []
    run = JobRun(settings, store, job, lambda: Outstanding(settings, job.id, seen), 1)
    assert run.run() == SUCCEEDED, store.get_job(job.id).error
    assert max(seen) == 2 and seen[-1] == 1 and run.unit_runs == run.units == 6
    ids = [r["id"] for r in records(settings, job.id, "passkey")]
    assert sorted(ids) == sorted(f"passkey/len=128/trial={t}" for t in range(24))


def test_a_worker_dying_with_a_unit_queued_leaves_both_to_a_fresh_one(env) -> None:
    settings, store, path = env
    job = claim(store, path, [dict(PASSKEY, lengths=[128], trials=16)])  # 4 units on one worker
    deaths = [1]
    run = JobRun(settings, store, job, lambda: DiesOnce(settings, job.id, deaths), 1, died=(WorkerCrashedError,))
    assert run.run() == SUCCEEDED, store.get_job(job.id).error
    assert len(run.reruns) == 1
    ids = [r["id"] for r in records(settings, job.id, "passkey")]
    assert sorted(ids) == sorted(f"passkey/len=128/trial={t}" for t in range(16))  # 0 lost, 0 duplicated
