"""A job's cost before it runs (service/cost.py): samples and tokens planned at submission, the
time from the speed this service measured or the stated rule, the warning of a long job and the
LCTX_MAX_JOB_SECONDS cap, for a job, a dry run, a schedule and a schedule's jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.registry import parse_task
from service.cost import measured_speed, plan_job, record_throughput
from service.errors import InvalidRequest
from service.schedules import Scheduler, create_schedule
from service.schemas import JobCreate, ScheduleCreate
from service.store import Store
from service.submission import submit
from tests.helpers import make_settings, tiny_checkpoint

HUGE = {"name": "passkey", "lengths": [1_048_576], "trials": 5}


def test_a_million_token_passkey_on_cpu_is_planned_and_warned_of(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, device="cpu")
    cost = plan_job([parse_task(HUGE)], settings)
    task = cost.tasks[0]
    assert task.samples == 5 and task.prompt_tokens == 5 * 1_048_576 and task.generated_tokens > 0
    assert "no run measured yet: assumed 2,000 prefill tok/s and 20 decode tok/s on CPU" == cost.basis
    assert cost.seconds is not None and cost.seconds > 2600  # 5.2M tokens at 2,000 tok/s
    assert cost.warnings and "this job is estimated at" in cost.warnings[0] and "tasks[0] (passkey)" in cost.warnings[0]
    assert "no limit is set (LCTX_MAX_JOB_SECONDS)" in cost.warnings[0]
    small = plan_job([parse_task({"name": "passkey", "lengths": [256], "trials": 2})], settings)
    assert small.warnings == [] and small.samples == 2


def test_ruler_defaults_are_a_long_job_on_a_cpu_and_said_so(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, device="cpu")
    cost = plan_job([parse_task({"name": "ruler", "tasks": ["niah_single_1"]})], settings)
    assert cost.samples >= 500 and cost.seconds > 12 * 3600  # 4k-128k x 500: hours even at a linear rate
    assert " h " in cost.warnings[0] and "129,024,000 tokens to prefill" in cost.warnings[0]


def test_the_measured_speed_replaces_the_rule_per_checkpoint_then_overall(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, device="cpu")
    assert measured_speed(settings, "abc") is None
    record_throughput(settings, "abc", 10_000, 2.0)
    record_throughput(settings, "abc", 30_000, 2.0)
    rate, basis = measured_speed(settings, "abc")
    assert rate == 10_000 and "last 2 job(s) on this checkpoint" in basis
    assert "any checkpoint" in measured_speed(settings, "other")[1]
    cost = plan_job([parse_task({"name": "passkey", "lengths": [1000], "trials": 10})], settings, "abc")
    task = cost.tasks[0]
    assert cost.basis.startswith("measured: 10,000 tokens/s") and \
        task.seconds == round((task.prompt_tokens + task.generated_tokens) / 10_000, 1)


@pytest.fixture
def env(tmp_path: Path):
    settings = make_settings(tmp_path, device="cpu", max_job_seconds=600)
    store = Store(settings.database)
    store.create_all()
    tiny_checkpoint(settings.roots[0] / "tiny")
    yield settings, store
    store.close()


def test_over_the_cap_is_refused_saying_by_how_much_and_what_to_lower(env) -> None:
    settings, store = env
    with pytest.raises(InvalidRequest) as refused:
        submit(store, settings, JobCreate(checkpoint="./tiny", tasks=[HUGE]))
    message = refused.value.message
    assert "over its limit of 10 min 00 s (LCTX_MAX_JOB_SECONDS)" in message
    assert "tasks[0] (passkey): 5 samples, 5,242,880 tokens to prefill" in message
    assert "Lower its lengths (largest 1,048,576)" in message and "trials" in message and "33 min 44 s over" in message
    assert store.list_jobs()[1] == 0
    with pytest.raises(InvalidRequest, match="LCTX_MAX_JOB_SECONDS"):  # a dry run is refused the same way
        submit(store, settings, JobCreate(checkpoint="./tiny", tasks=[HUGE]), dry_run=True)


def test_a_dry_run_plans_without_queuing(env) -> None:
    settings, store = env
    job, cost = submit(store, settings, JobCreate(checkpoint="./tiny", tasks=[{"name": "passkey", "lengths": [64],
                                                                            "trials": 3}]), dry_run=True)
    assert job is None and cost.samples == 3 and cost.prompt_tokens == 192 and store.list_jobs()[1] == 0
    job, cost = submit(store, settings, JobCreate(checkpoint="./tiny", tasks=[{"name": "passkey", "lengths": [64],
                                                                            "trials": 3}]))
    assert job is not None and cost.samples == 3 and store.list_jobs()[1] == 1


def test_a_schedule_over_the_cap_is_refused_and_its_jobs_skipped_with_the_reason(env) -> None:
    settings, store = env
    watch = settings.roots[0] / "runs"
    watch.mkdir()
    with pytest.raises(InvalidRequest, match="over its limit"):
        create_schedule(store, settings, ScheduleCreate(name="big", cron="0 2 * * *", watch=[str(watch)],
                                                        suite={"tasks": [HUGE]}))
    small = {"tasks": [{"name": "passkey", "lengths": [64], "trials": 1}]}
    create_schedule(store, settings, ScheduleCreate(name="ok", cron="0 2 * * *", watch=[str(watch)], suite=small))
    tiny_checkpoint(watch / "step-1")
    record_throughput(settings, "slow", 1, 10.0)  # measured since: 0.1 tokens/s of work, any checkpoint
    [outcome] = Scheduler(settings, store).run_now("ok")
    assert outcome.job is None and "over its limit" in outcome.skipped
