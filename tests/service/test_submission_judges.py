"""Judges at submission and in the worker (service/submission.py check_judges, service/runner/worker.py
job_judge), through the API in-process (no lifespan: nothing starts): a task that needs a
judge is refused when it names none, names what is not registered, a checkpoint without a
chat template, an endpoint not in chat style or one that does not answer; accepted, the job
records the judge as `name@identity`, which the leaderboard's row key holds, and a worker
refuses a judge that is no longer that model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from checkpoints.fingerprint import inspect_checkpoint
from evaluators.errors import EvaluatorError
from service.app import create_app
from service.comparison import scoring_options
from service.runner.resolve import judge_spec, worker_config
from service.runner.worker import job_judge
from service.store import EndpointRow, Store
from tests.helpers import (
    aa_lcr_files,
    chat_checkpoint,
    free_port,
    make_settings,
    store_results,
    tiny_checkpoint,
)


@pytest.fixture
def api(tmp_path: Path):
    data = tmp_path / "data"
    aa_lcr_files(data)
    settings = make_settings(tmp_path, data_dir=data)
    tiny_checkpoint(settings.roots[0] / "tiny")
    chat_checkpoint(settings.roots[0] / "judge", seed=1)
    store = Store(settings.database)
    store.create_all()
    app = create_app(settings)
    app.state.store, app.state.dispatcher = store, None
    c = TestClient(app)
    for name in ("tiny", "judge"):
        assert c.post("/v1/checkpoints", json={"name": name, "path": name}).status_code == 201
    yield c, store, settings
    store.close()


def endpoint(name: str, api_style: str = "chat") -> EndpointRow:
    """A registration whose server is gone (a port nothing listens on)."""
    return EndpointRow(name=name, base_url=f"http://127.0.0.1:{free_port()}/v1", served_model="m", api_style=api_style,
                       tokenizer=None, context_length=512, concurrency=1, timeout_s=5.0, max_retries=0,
                       api_key_env=None, capabilities={})


def submit(c: TestClient, **task: object):
    """An aa_lcr job on `tiny` (no chat template: the card's prompt as it is)."""
    spec = {"name": "aa_lcr", "limit": 1, "chat_template": False, **task}
    return c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [spec]})


def test_judges_are_refused_at_submission_saying_what_to_do(api) -> None:
    c, store, _ = api
    store.add_endpoint(endpoint("gone"))
    store.add_endpoint(endpoint("plain", "completions"))
    cases = [
        ({}, "tasks[0] (aa_lcr): aa_lcr: needs a judge and none is given; name a judge: a registered endpoint"),
        ({"judge": "nobody"}, "tasks[0] (aa_lcr).judge: 'nobody' is neither a registered endpoint (registered: gone, "
                              "plain) nor a registered checkpoint (registered: judge, tiny)"),
        ({"judge": "tiny"}, "checkpoint 'tiny' has no chat template"),
        ({"judge": "plain"}, "endpoint 'plain' is registered in completions style; a judge is asked chat messages"),
        ({"judge": "gone"}, "endpoint 'gone' does not answer as an OpenAI-compatible server now; start its server"),
        ({"judge": "judge@000000000000"}, "the judge judge is now another model"),
    ]
    for task, why in cases:
        r = submit(c, **task)
        assert r.status_code == 422 and why in r.json()["detail"], (task, r.text)
        assert "127.0.0.1:" not in r.text  # the refusal of a dead endpoint names no port
    assert c.get("/v1/jobs").json()["total"] == 0


def test_an_accepted_job_records_its_judge_by_identity_and_the_worker_checks_it(api) -> None:
    c, store, settings = api
    path = settings.roots[0] / "judge"
    identity = inspect_checkpoint(path).fingerprint
    r = submit(c, judge="judge")
    assert r.status_code == 202, r.text
    job = store.get_job(r.json()["id"])
    assert job.tasks[0]["judge"] == f"judge@{identity[:12]}"
    assert c.get(f"/v1/jobs/{job.id}").json()["tasks"][0]["judge"] == f"judge@{identity[:12]}"
    assert scoring_options(job.tasks[0])["judge"] == f"judge@{identity[:12]}"  # the leaderboard row's key
    judge = job_judge(judge_spec(store, settings, job.tasks[0]["judge"]), worker_config(settings))
    assert (judge.ref, judge.kind, judge.details) == (job.tasks[0]["judge"], "checkpoint", {"checkpoint": "judge"})
    chat_checkpoint(path, seed=2)  # retrained in place: another judge under the same name
    with pytest.raises(EvaluatorError, match="the judge judge is now another model"):
        job_judge(judge_spec(store, settings, job.tasks[0]["judge"]), worker_config(settings))


def test_a_judged_job_runs_in_the_worker_and_the_next_asks_the_judge_nothing(api) -> None:
    """Two jobs of one suite run in-process (service.runner.coordinator.run_job): every judgment of the first
    is recorded and cached in the worker's node home (<home>/judgments), so the second job
    (a rerun, or a resumed job whose records were lost) finds each one there."""
    from service.core.layout import task_dir
    from service.core.status import SUCCEEDED
    from service.runner.coordinator import run_job

    c, store, settings = api
    records = []
    for _ in range(2):
        r = submit(c, judge="judge", repeats=2, categories=["Legal"], max_new_tokens=4, judge_max_new_tokens=4)
        assert r.status_code == 202, r.text
        assert store.claim_next("t").id == r.json()["id"]
        assert run_job(settings, r.json()["id"], store) == SUCCEEDED, store.get_job(r.json()["id"]).error
        lines = (task_dir(settings, r.json()["id"], "aa_lcr") / "samples.jsonl").read_text().splitlines()
        records.append(sorted((json.loads(line) for line in lines), key=lambda rec: rec["id"]))
    first, second = records
    assert [r["id"] for r in first] == ["aa_lcr/7/r0", "aa_lcr/7/r1"]
    assert sorted(r["judgment"]["cached"] for r in first) == [False, True]  # the repeats answered alike
    assert [r["judgment"]["cached"] for r in second] == [True, True]
    assert {r["judgment"]["judge"] for r in first + second} == {first[0]["judgment"]["judge"]}
    assert len(list((settings.home / "judgments").glob("*.jsonl"))) == 1  # written by the first job only


def test_the_leaderboard_keeps_two_judges_apart(api) -> None:
    """The same checkpoint graded by two judges: two rows, each naming its judge, never one
    row of the latest job."""
    from evaluators.aa_lcr.evaluator import typed
    from evaluators.registry import validate_task
    from service.core.layout import job_dir
    from service.core.status import SUCCEEDED

    c, store, settings = api
    fingerprint = c.get("/v1/checkpoints/tiny").json()["fingerprint"]
    records = [{"document_category": "Legal", "question_id": "7", "repeat": 0, "score": s, "verdict": v}
               for s, v in ((1.0, "CORRECT"), (0.0, "INCORRECT"))]
    for judge, record in (("a@aaaaaaaaaaaa", records[:1]), ("b@bbbbbbbbbbbb", records)):
        task = validate_task({"name": "aa_lcr", "judge": judge})
        job = store.add_job(fingerprint=fingerprint, checkpoint="tiny", checkpoint_path="/m/tiny", tasks=[task],
                            rope=None, backend="auto", priority=0)
        assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
        job_dir(settings, job.id).mkdir(parents=True)
        store_results(settings, store, job.id, {"aa_lcr": {
            "task": "aa_lcr", "result": typed(record, "v1.1").model_dump(mode="json")}})
    board = c.get("/v1/leaderboard", params={"task": "aa_lcr"}).json()
    rows = {row["options"]["judge"]: row for row in board["rows"]}
    assert board["headline"] == "accuracy" and sorted(rows) == ["a@aaaaaaaaaaaa", "b@bbbbbbbbbbbb"]
    assert rows["a@aaaaaaaaaaaa"]["values"]["accuracy"] == 1.0 and rows["b@bbbbbbbbbbbb"]["values"]["accuracy"] == 0.5
    assert "judge=a@aaaaaaaaaaaa" in rows["a@aaaaaaaaaaaa"]["setting"]
    assert rows["b@bbbbbbbbbbbb"]["values"]["accuracy.category=Legal"] == 0.5
