"""A job's cost before it runs (service/cost.py): samples and tokens planned at submission, the
time from the speed this service measured for the same model or the stated rule, the warning
of a long job and the LCTX_MAX_JOB_SECONDS cap, for a job, a dry run, a schedule and a
schedule's jobs; and the two ways the cap was talked past (issue #60, findings 1 and 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.registry import parse_task
from service.core.errors import InvalidRequest
from service.cost import (
    ModelFacts,
    Shape,
    check_cost,
    checkpoint_facts,
    plan_job,
    read_throughput,
    record_throughput,
    throughput_path,
)
from service.schedules import ScheduleTicker, create_schedule
from service.schemas import JobCreate, ScheduleCreate
from service.store import Store
from service.submission import submit
from tests.helpers import aa_lcr_files, make_settings, tiny_checkpoint

HUGE = {"name": "passkey", "lengths": [1_048_576], "trials": 5}
FAST_SERVER = "http://127.0.0.1:8001/v1#standin"  # a served model's identity (served_identity's shape does not matter)


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


def test_rulers_generated_tokens_are_counted(tmp_path: Path) -> None:
    """Every RULER plan said "0 to generate": each task's tokens_to_generate counts now."""
    settings = make_settings(tmp_path, device="cpu")
    spec = parse_task({"name": "ruler", "tasks": ["niah_single_1", "vt"], "lengths": [4096], "samples": 10})
    assert plan_job([spec], settings).generated_tokens == 10 * (128 + 30)
    from evaluators.ruler.options import RULER_TASKS, TOKENS_TO_GENERATE
    from evaluators.ruler.protocol import TASKS

    assert {t: TASKS[t].spec.tokens_to_generate for t in RULER_TASKS} == TOKENS_TO_GENERATE


def test_a_measured_speed_is_used_for_its_own_model_only(tmp_path: Path) -> None:
    """Finding 1: seven jobs of a fast served model made an "overall" 131,589 tokens/s that let a
    4096 x 100 passkey job on a never-measured checkpoint through as 3.1 s. A speed is kept per
    checkpoint fingerprint and per endpoint and used only for it."""
    settings = make_settings(tmp_path, device="cpu", max_job_seconds=120)
    tiny = checkpoint_facts(tiny_checkpoint(settings.roots[0] / "tiny"))
    for _ in range(7):
        record_throughput(settings, FAST_SERVER, 1_315_890, 10.0)
    job = [parse_task({"name": "passkey", "lengths": [4096], "trials": 100})]
    served = plan_job(job, settings, FAST_SERVER, model=ModelFacts(served=True))
    assert served.seconds is not None and served.seconds < 5 and served.basis.startswith("measured: 131,589 tokens/s")
    never = plan_job(job, settings, "never-measured", model=tiny)
    assert never.seconds is not None and never.seconds > 200, never.basis  # the rule: 409,600 tokens at 2,000/s
    assert "no run measured yet" in never.basis
    with pytest.raises(InvalidRequest, match="over its limit"):
        check_cost(never, settings)


def test_a_never_measured_checkpoint_is_scaled_by_its_size_and_the_prompts_lengths(tmp_path: Path) -> None:
    """A checkpoint never run: its FLOPs (size, attention's length term) at the rule's rate plus
    the time a token of work took the checkpoints measured here besides their FLOPs; a
    checkpoint measured: its own FLOPs per second."""
    settings = make_settings(tmp_path, device="auto")  # CPU workers until the cluster says it has a GPU
    small = ModelFacts(Shape(parameters=1_000_000, layers=2, width=64))
    large = ModelFacts(Shape(parameters=100_000_000, layers=12, width=768))
    short = [parse_task({"name": "passkey", "lengths": [1000], "trials": 10})]
    measured = plan_job(short, settings, "small", model=small).tasks[0]
    work = measured.prompt_tokens + measured.generated_tokens
    record_throughput(settings, "small", work, 10.0, measured.flops, "cpu")
    again = plan_job(short, settings, "small", model=small)
    assert again.seconds == 10.0 and "of this checkpoint" in again.basis
    scaled = plan_job(short, settings, "large", model=large)
    assert "has not run here yet" in scaled.basis and "ms a token of work" in scaled.basis
    compute = (scaled.tasks[0].flops or 0) / 1e10  # at least its FLOPs at the CPU rule's rate, besides the overhead
    assert scaled.seconds > 10.0 + compute * 0.9 and scaled.seconds > 200
    tiny = ModelFacts(Shape(parameters=1_000, layers=1, width=8))  # next to nothing to compute: the overhead
    overhead = 10.0 - (measured.flops or 0) / 1e10  # what the measured run took besides its FLOPs at the rule's rate
    assert plan_job(short, settings, "tiny", model=tiny).seconds == pytest.approx(overhead, abs=0.2)
    longer = plan_job([parse_task({"name": "passkey", "lengths": [100_000], "trials": 10})], settings, "large",
                      model=large)
    assert longer.seconds > 100 * scaled.seconds  # 100x the tokens, and attention's length term on top
    gpu = plan_job(short, settings, "large", cluster_gpus=1, model=large)  # measured on CPU says nothing of a GPU
    assert "no run measured yet" in gpu.basis
    for _ in range(5):  # a fast model measured since cannot make another's compute cheaper
        record_throughput(settings, "fast", 10**9, 0.001, 10**6, "cpu")
    assert plan_job(short, settings, "large", model=large).seconds > compute * 0.9


def test_the_first_layout_and_bad_entries_are_read_as_data(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, device="cpu")
    throughput_path(settings).write_text('{"checkpoints": {"abc": [[10000, 2.0], ["x", 1], [5, -1]]}, '
                                         '"overall": [[99999999, 0.001]], "runs": {"def": "no"}}')
    assert read_throughput(settings) == {"runs": {"abc": [{"tokens": 10000, "flops": None, "seconds": 2.0,
                                                            "hardware": None}]}}
    job = [parse_task({"name": "passkey", "lengths": [1000], "trials": 10})]
    assert plan_job(job, settings, "abc").basis.startswith("measured: 5,000 tokens/s")
    assert "no run measured yet" in plan_job(job, settings, "other").basis  # "overall" is not read
    throughput_path(settings).write_text("[1, 2]")
    assert read_throughput(settings) == {"runs": {}}


def test_aa_lcr_without_a_limit_is_estimated_from_its_data_and_capped(tmp_path: Path) -> None:
    """Finding 2: AA-LCR with `repeats: 16, max_new_tokens: 30000` answered `seconds: null` and
    was accepted under a cap (1,440,000 generated tokens for 3,000 rows' worth). Its questions and
    prompt tokens come from the CSV (the card's counts, else the documents' bytes); every token
    it can spend counts: repeats, the answers', the think blocks' and the judge's."""
    data = tmp_path / "data"
    aa_lcr_files(data)
    settings = make_settings(tmp_path, device="cpu", data_dir=data, max_job_seconds=3600)
    spec = parse_task({"name": "aa_lcr", "repeats": 16, "max_new_tokens": 30_000, "judge": "j"})
    cost = plan_job([spec], settings)
    task = cost.tasks[0]
    assert task.samples == 2 * 16 and task.seconds is not None and cost.seconds is not None
    assert task.prompt_tokens == 16 * (78 + 2000 // 4) + 32 * (1024 + 30_000)  # the card's count, the bytes, the judge's
    assert task.generated_tokens == 32 * (30_000 + 256 + 2048)  # answers, the judge's verdict and think block
    assert any("estimated from its data files" in w for w in cost.warnings)
    with pytest.raises(InvalidRequest, match="over its limit"):
        check_cost(cost, settings)
    thinking = plan_job([parse_task({"name": "aa_lcr", "limit": 1, "repeats": 1, "judge": "j", "thinking": "on",
                                     "chat_template": True})], settings)
    assert thinking.generated_tokens == 4096 + 2048 + 256 + 2048  # thinking on: its budget counts
    default_on_a_thinker = plan_job([parse_task({"name": "aa_lcr", "limit": 1, "repeats": 1, "judge": "j"})],
                                    settings, model=ModelFacts(thinks=True))
    assert default_on_a_thinker.generated_tokens == thinking.generated_tokens


def test_a_task_whose_work_cannot_be_said_is_refused_under_a_cap(tmp_path: Path) -> None:
    spec = parse_task({"name": "aa_lcr", "judge": "j"})  # no data folder: nothing to estimate from
    free = make_settings(tmp_path, device="cpu")
    cost = plan_job([spec], free)
    assert cost.seconds is None and "not known before its data is read" in cost.warnings[0]
    check_cost(cost, free)  # no cap: accepted with the warning
    capped = make_settings(tmp_path, device="cpu", max_job_seconds=3600)
    with pytest.raises(InvalidRequest, match="give the task a `limit`"):
        check_cost(plan_job([spec], capped), capped)


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
    assert "Lower its lengths (largest 1,048,576)" in message and "trials" in message and " over " in message
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


def test_a_big_job_on_a_never_measured_checkpoint_is_refused_after_a_fast_servers_jobs(env) -> None:
    """Finding 1 through `submit`, as the attack ran it."""
    settings, store = env
    for _ in range(7):
        record_throughput(settings, FAST_SERVER, 1_315_890, 10.0)
    with pytest.raises(InvalidRequest, match="over its limit"):
        submit(store, settings, JobCreate(checkpoint="./tiny", tasks=[
            {"name": "passkey", "lengths": [4096], "trials": 1000}]), dry_run=True)


def test_a_schedule_over_the_cap_is_refused_and_its_jobs_skipped_with_the_reason(env) -> None:
    settings, store = env
    watch = settings.roots[0] / "runs"
    watch.mkdir()
    with pytest.raises(InvalidRequest, match="over its limit"):
        create_schedule(store, settings, ScheduleCreate(name="big", cron="0 2 * * *", watch=[str(watch)],
                                                        suite={"tasks": [HUGE]}))
    small = {"tasks": [{"name": "passkey", "lengths": [64], "trials": 1}]}
    create_schedule(store, settings, ScheduleCreate(name="ok", cron="0 2 * * *", watch=[str(watch)], suite=small))
    step = tiny_checkpoint(watch / "step-1")
    from checkpoints.fingerprint import inspect_checkpoint

    record_throughput(settings, inspect_checkpoint(step).fingerprint, 1, 10.0)  # this checkpoint measured: 0.1 tok/s
    [outcome] = ScheduleTicker(settings, store).run_now("ok")
    assert outcome.job is None and "over its limit" in outcome.skipped


def test_a_schedules_run_says_each_jobs_estimate(env) -> None:
    settings, store = env
    watch = settings.roots[0] / "runs"
    watch.mkdir()
    create_schedule(store, settings, ScheduleCreate(name="ok", cron="0 2 * * *", watch=[str(watch)], suite={
        "tasks": [{"name": "passkey", "lengths": [64], "trials": 1}]}))
    tiny_checkpoint(watch / "step-1")
    [outcome] = ScheduleTicker(settings, store).run_now("ok")
    assert outcome.job is not None and outcome.seconds is not None and "no run measured yet" in outcome.basis
