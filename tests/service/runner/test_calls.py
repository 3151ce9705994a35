"""The worker's protocol (service/runner/calls.py): a worker is asked only its typed calls and
answers each with the type the call declares, in-process and through a real Ray actor; the
coordinator fails a job whose worker answers with anything else, saying so."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest

from service.core.status import FAILED
from service.runner.calls import (
    Drain,
    FinishTask,
    Load,
    Loaded,
    RunUnit,
    TaskFinished,
    UnitRan,
    WorkerCall,
    checked_answer,
)
from service.runner.coordinator import JobRun, LocalHandle
from service.runner.mail import Mail
from service.runner.resolve import worker_config
from service.runner.spec import JobSpec
from service.runner.units import Unit
from service.runner.worker import Worker
from service.store import Store
from tests.helpers import make_settings, tiny_checkpoint

TASK = {"name": "passkey", "lengths": [128], "trials": 2, "seed": 1}


def spec_of(path: Path) -> JobSpec:
    return JobSpec(id="j1", attempt=1, tasks=[TASK], checkpoint={"name": "tiny", "path": str(path),
                                                                 "fingerprint": "f" * 64}, rope=None, backend="auto")


def test_a_worker_is_asked_its_calls_only(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    worker = Worker(worker_config(settings))
    for wrong in ("load", ("load",), {"method": "drain"}, Mail()):
        with pytest.raises(TypeError, match="a worker is not asked .*: its calls are Load, RunUnit, FinishTask, "
                                            "Drain"):
            worker.answer(wrong)  # type: ignore[arg-type]
    handle = LocalHandle(worker_config(settings))
    try:
        with pytest.raises(TypeError, match="a worker is not asked str"):
            handle.call("drain")  # type: ignore[arg-type]
        assert isinstance(handle.call(Drain()).result(timeout=10), Mail)
    finally:
        handle.kill()


def test_an_answer_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match="a worker answered Drain with dict, not Mail"):
        checked_answer(Drain(), {"records": {}, "notes": {}})
    with pytest.raises(TypeError, match="answered RunUnit with Mail, not UnitRan"):
        checked_answer(RunUnit(Unit("passkey", TASK)), Mail())
    ran = UnitRan(1, 1, Mail())
    assert checked_answer(RunUnit(Unit("passkey", TASK)), ran) is ran


class OldWorker:
    """A worker of another version: it answers `load` with the dict older workers sent."""

    def __init__(self, settings) -> None:
        self.inner = LocalHandle(worker_config(settings))

    def call(self, call: WorkerCall) -> Future:
        if not isinstance(call, Load):
            return self.inner.call(call)
        future: Future = Future()
        future.set_result({"pid": 1, "host": "h", "warm": False, "model_bytes": 0, "max_batch": 4, "model": {}})
        return future

    def kill(self) -> None:
        self.inner.kill()


def test_a_job_whose_worker_answers_untyped_fails_saying_so(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()
    try:
        path = tiny_checkpoint(settings.roots[0] / "tiny")
        store.add_job(checkpoint="tiny", checkpoint_path=str(path), fingerprint="f" * 64, tasks=[TASK], rope=None,
                      backend="auto", priority=0)
        job = store.claim_next("test")
        assert JobRun(settings, store, job, lambda: OldWorker(settings), 1).run() == FAILED
        assert "a worker answered Load with dict, not Loaded" in store.get_job(job.id).error
    finally:
        store.close()


@pytest.mark.integration  # Ray
@pytest.mark.timeout(180)
def test_typed_calls_and_answers_round_trip_through_a_ray_actor(ray_cluster: str, tmp_path: Path) -> None:
    import ray
    from ray.exceptions import RayTaskError

    from service.runner.executor import ActorHandle

    settings = make_settings(tmp_path)
    path = tiny_checkpoint(settings.roots[0] / "tiny")
    handle = ActorHandle(settings, "j1", 0)
    try:
        loaded = handle.call(Load(spec_of(path), ("k",))).result(timeout=120)
        assert isinstance(loaded, Loaded) and loaded.warm is False and loaded.model_bytes > 0
        assert loaded.max_batch and loaded.model["device"] == "cpu"
        assert isinstance(handle.call(Drain()).result(timeout=30), Mail)  # the control group answers too
        ran = handle.call(RunUnit(Unit("passkey", TASK))).result(timeout=120)
        assert isinstance(ran, UnitRan) and ran.total == ran.done == 2
        records = [r for rs in ran.mail.records.values() for r in rs]
        finished = handle.call(FinishTask("passkey", TASK, records)).result(timeout=120)
        assert isinstance(finished, TaskFinished) and finished.entry["samples"] == 2 and finished.plots
        with pytest.raises(TypeError, match="a worker is not asked str"):
            handle.call("load")  # type: ignore[arg-type]  # refused before it is sent
        with pytest.raises(RayTaskError, match="a worker is not asked str"):  # and by the actor itself
            ray.get(handle.actor.answer.remote("load"), timeout=30)
    finally:
        handle.kill()
