"""The labels the server computes for people (the dashboard shows them as given)."""

from __future__ import annotations

from datetime import UTC, datetime

from service.labels import own_rope_label, rope_label
from service.schemas import CheckpointOut, JobOut, ScheduleOut


def test_rope_labels_as_people_write_them() -> None:
    assert rope_label(None) == rope_label("") == rope_label(" Checkpoint ") == "checkpoint"
    assert rope_label("YaRN:4") == "yarn:4" and rope_label("none") == "none"
    assert rope_label({"rope_type": "yarn", "factor": 4.0, "beta_fast": 16}) == "yarn:4 beta_fast=16"
    assert rope_label({"type": "linear", "factor": 2.5}) == "linear:2.5"
    assert rope_label({"rope_type": "llama3", "low_freq_factor": 1.0}) == "llama3 low_freq_factor=1.0"
    assert own_rope_label({"rope_theta": 500000.0, "rope_type": "yarn", "factor": 4}) == "yarn:4 (θ=500000)"
    assert own_rope_label({"rope_theta": 10000.0}) == "default (θ=10000)" and own_rope_label(None) is None


def test_the_api_answers_each_label_beside_its_setting() -> None:
    now = datetime.now(UTC)
    job = JobOut(id="j", checkpoint="c", checkpoint_path="/c", fingerprint="f", tasks=[], rope={"rope_type": "yarn",
                 "factor": 4}, backend="auto", priority=0, status="queued", progress={}, error=None, attempts=0,
                 schedule=None, created_at=now, started_at=None, finished_at=None, duration_s=None)
    assert job.model_dump(mode="json")["rope_label"] == "yarn:4"
    checkpoint = CheckpointOut(name="c", path="/c", fingerprint="f", variant="softmax", parameters=1, created_at=now,
                               rope={"rope_theta": 10000.0})
    assert checkpoint.model_dump(mode="json")["rope_label"] == "default (θ=10000)"
    schedule = ScheduleOut(name="s", cron="0 2 * * *", watch=["/c"], suite={"rope": "ntk:8"}, next_run_at=now,
                           last_run_at=None, created_at=now)
    assert schedule.model_dump(mode="json")["rope_label"] == "ntk:8"


def test_a_job_on_a_served_model_is_not_labelled_with_the_checkpoints_rope():
    """lctx applies no RoPE to a served model: its job says the server's, never `checkpoint`."""
    from service.labels import SERVED_ROPE, job_rope_label

    assert job_rope_label(None, "qwen7b") == SERVED_ROPE == "server's"
    assert job_rope_label(None, None) == "checkpoint" and job_rope_label("yarn:4", None) == "yarn:4"
