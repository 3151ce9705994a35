"""End to end over real HTTP with real Ray: register checkpoints, submit jobs, poll to
completion, read results, samples and plots, cancel, leaderboard, metrics."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from tests.helpers import ThreadServer, make_settings, points, tiny_checkpoint, wait_for, wait_job

pytestmark = pytest.mark.integration  # a server on loopback and Ray

PASSKEY = {"name": "passkey", "lengths": [128, 256], "trials": 2, "seed": 0}
REPO = Path(__file__).resolve().parents[3]
HOTPOTQA = [{"input": "Which city is the capital of France?", "context": "Passage 1: Paris is the capital of France. "
             "Passage 2: Berlin is the capital of Germany.", "answers": ["Paris"], "length": 20,
             "dataset": "hotpotqa", "language": "en", "all_classes": None, "_id": f"hp-{i}"} for i in range(2)]


@pytest.fixture(scope="module")
def service(ray_cluster: str, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("api")
    models = tmp / "models"
    tiny_checkpoint(models / "tiny-a", seed=0)
    tiny_checkpoint(models / "tiny-b", seed=1)
    data = tmp / "data"  # LongBench files in the official layout: <dir>/<dataset>.jsonl
    data.mkdir()
    shutil.copy(REPO / "tests" / "evaluators" / "data" / "longbench" / "qasper.jsonl", data / "qasper.jsonl")
    (data / "hotpotqa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in HOTPOTQA))
    # one worker per job: its units run in order (the partial-results test needs passkey finished
    # before LongBench fails; spreading is tests/service/runner/test_runner_scale_out.py's)
    settings = make_settings(tmp, executor=True, ray_address=ray_cluster, replica_id="api-test", data_dir=data,
                             job_workers=1)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        for name in ("tiny-a", "tiny-b"):
            assert c.post("/v1/checkpoints", json={"name": name, "path": str(models / name)}).status_code == 201
        yield c, settings, models


def test_passkey_jobs_run_to_results_samples_plots_and_leaderboard(service) -> None:
    c, settings, models = service
    r = c.post("/v1/jobs", json={"checkpoint": "tiny-a", "tasks": [PASSKEY], "backend": "auto"})
    assert r.status_code == 202, r.text
    a = r.json()
    assert a["status"] == "queued" and a["checkpoint"] == "tiny-a"
    # submission by path inside the roots works too, with a RoPE override in both forms
    b = c.post("/v1/jobs", json={"checkpoint": str(models / "tiny-b"), "tasks": [PASSKEY],
                                 "rope": {"rope_type": "yarn", "factor": 2.0}}).json()
    assert b["checkpoint"] == "tiny-b"
    for job in (a, b):
        done = wait_job(c, job["id"])
        assert done["status"] == "succeeded", done
        assert done["progress"]["passkey"]["done"] == done["progress"]["passkey"]["total"] > 0
        assert done["started_at"] and done["finished_at"] and done["duration_s"] >= 0

    results = c.get(f"/v1/jobs/{a['id']}/results").json()
    assert results["job"] == a["id"] and results["checkpoint"]["name"] == "tiny-a"
    assert results["checkpoint"]["fingerprint"] == c.get("/v1/checkpoints/tiny-a").json()["fingerprint"]
    assert "passkey" in results["results"] and results["versions"]["torch"]
    assert results["model"]["backend"] and results["started_at"] <= results["finished_at"]
    rb = c.get(f"/v1/jobs/{b['id']}/results").json()
    assert rb["model"]["rope"]["rope_type"] == "yarn"

    lines = c.get(f"/v1/jobs/{a['id']}/samples").text.splitlines()
    records = [json.loads(line) for line in lines]
    total = c.get(f"/v1/jobs/{a['id']}").json()["progress"]["passkey"]["total"]
    assert len(records) == total
    for plot in results["plots"]:
        r = c.get(plot["url"])
        assert r.status_code == 200 and r.content[:8] == b"\x89PNG\r\n\x1a\n"

    assert c.get("/v1/jobs", params={"status": "succeeded", "task": "passkey"}).json()["total"] >= 2
    assert c.get("/v1/jobs", params={"checkpoint": "tiny-b"}).json()["items"][0]["id"] == b["id"]
    board = c.get("/v1/leaderboard", params={"task": "passkey"}).json()
    assert {row["checkpoint"] for row in board["rows"]} == {"tiny-a", "tiny-b"}
    assert board["columns"] and all(set(row["values"]) == set(board["columns"]) for row in board["rows"])
    assert "accuracy.length=128" in board["columns"]  # per length
    assert board["headline"] == "accuracy" and board["columns"][0] == "accuracy"  # metrics first
    assert {c["name"]: c["higher_is_better"] for c in board["column_info"]}["accuracy.length=128"] is True
    best = [row["values"]["accuracy"] for row in board["rows"]]
    assert best == sorted(best, reverse=True)  # sorted by the headline, higher is better

    metrics = c.get("/metrics").text
    assert 'lctx_jobs{status="succeeded"}' in metrics
    assert "lctx_job_duration_seconds_count" in metrics


def test_longbench_job_as_in_the_issue(service) -> None:
    c, _, _ = service
    body = {"checkpoint": "tiny-a", "tasks": [
        {"name": "passkey", "lengths": [128], "trials": 1},
        {"name": "longbench", "datasets": ["qasper", "hotpotqa"], "max_length": 512}],
        "rope": "yarn:4", "backend": "auto"}
    job = c.post("/v1/jobs", json=body).json()
    done = wait_job(c, job["id"])
    assert done["status"] == "succeeded", done
    assert done["progress"]["longbench"]["done"] == done["progress"]["longbench"]["total"] > 0
    results = c.get(f"/v1/jobs/{job['id']}/results").json()
    assert set(results["results"]) == {"passkey", "longbench"}
    assert set(points(results["results"]["longbench"], "score", "dataset")) == {"qasper", "hotpotqa"}
    assert results["model"]["rope"]["rope_type"] == "yarn"
    records = [json.loads(x) for x in c.get(f"/v1/jobs/{job['id']}/samples", params={"task": "longbench"}).text.splitlines()]
    assert {r["dataset"] for r in records} == {"qasper", "hotpotqa"}
    board = c.get("/v1/leaderboard", params={"task": "longbench/qasper"}).json()
    assert [row["checkpoint"] for row in board["rows"]] == ["tiny-a"] and "score" in board["columns"]
    assert board["rows"][0]["values"]["score"] == points(results["results"]["longbench"], "score", "dataset")[
        "qasper"].value



def test_longbench_v2_and_babilong_jobs_run_to_results_and_leaderboard(service) -> None:
    """Both tasks through the real server and Ray: files in the official layouts in the data
    directory, a job, its typed results, its samples and the leaderboard's own columns."""
    c, settings, _ = service
    data = settings.data_dir
    (data / "LongBench-v2").mkdir(exist_ok=True)
    (data / "LongBench-v2" / "data.json").write_text(json.dumps([{
        "_id": "q0", "domain": "Code", "sub_domain": "s", "difficulty": "hard", "length": "short",
        "question": "Which?", "choice_A": "a", "choice_B": "b", "choice_C": "c", "choice_D": "d", "answer": "B",
        "context": "A document. " * 40}]))
    babi = data / "tasks_1-20_v1-2" / "en-10k"
    babi.mkdir(parents=True, exist_ok=True)
    (babi / "qa1_single-supporting-fact_train.txt").write_text(
        "".join(f"1 Mary went to the room{i}.\n2 Where is Mary? \troom{i}\t1\n" for i in range(4)))
    (data / "pg19" / "test").mkdir(parents=True, exist_ok=True)
    (data / "pg19" / "test" / "book.txt").write_text(" ".join(f"Line {i} of a quiet old book about the sea." for i in
                                                               range(400)))
    tasks = [{"name": "longbench_v2", "max_length": 200}, {"name": "babilong", "tasks": ["qa1"], "lengths": [0],
                                                             "samples": 2}]
    job = c.post("/v1/jobs", json={"checkpoint": "tiny-b", "tasks": tasks}).json()
    done = wait_job(c, job["id"])
    assert done["status"] == "succeeded", done
    results = c.get(f"/v1/jobs/{job['id']}/results").json()["results"]
    assert results["longbench_v2"]["result"]["headline"] == "overall"
    assert set(points(results["babilong"], "accuracy", "length", task="qa1")) == {0}
    records = c.get(f"/v1/jobs/{job['id']}/samples", params={"task": "babilong"}).text.splitlines()
    assert len(records) == 2
    board = c.get("/v1/leaderboard", params={"task": "longbench_v2"}).json()
    assert board["headline"] == "overall" and {"easy", "hard", "short", "medium", "long"} <= set(board["columns"])
    board = c.get("/v1/leaderboard", params={"task": "babilong"}).json()
    assert board["headline"] == "average" and "accuracy.task=qa1.length=0" in board["columns"]

def test_cancel_stops_a_running_job_and_others_go_on(service) -> None:
    c, settings, _ = service
    long = c.post("/v1/jobs", json={"checkpoint": "tiny-a", "priority": 5,
                                    "tasks": [{"name": "passkey", "lengths": [256] * 1, "trials": 500}]}).json()
    wait_for(lambda: c.get(f"/v1/jobs/{long['id']}").json()["status"] == "running", 60, what="job running")
    r = c.post(f"/v1/jobs/{long['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert c.post(f"/v1/jobs/{long['id']}/cancel").status_code == 409
    partial = c.get(f"/v1/jobs/{long['id']}/results")  # what finished before the cancel, marked partial
    assert partial.status_code == 200 and partial.json()["partial"] is True
    assert partial.json()["status"] == "cancelled" and partial.json()["results"]["passkey"]["partial"] is True
    after = c.post("/v1/jobs", json={"checkpoint": "tiny-a", "tasks": [PASSKEY]}).json()
    assert wait_job(c, after["id"])["status"] == "succeeded"
    assert c.get(f"/v1/jobs/{long['id']}").json()["status"] == "cancelled"


def test_a_failing_job_fails_with_a_message_and_the_service_goes_on(service) -> None:
    c, settings, models = service
    shutil.copytree(models / "tiny-a", models / "doomed")
    assert c.post("/v1/checkpoints", json={"name": "doomed", "path": str(models / "doomed")}).status_code == 201
    (models / "doomed" / "model.safetensors").unlink()  # gone between registration and run
    bad = c.post("/v1/jobs", json={"checkpoint": "doomed", "tasks": [PASSKEY]}).json()
    good = c.post("/v1/jobs", json={"checkpoint": "tiny-b", "tasks": [PASSKEY]}).json()
    failed = wait_job(c, bad["id"])
    assert failed["status"] == "failed" and "no weights" in failed["error"]
    assert wait_job(c, good["id"])["status"] == "succeeded"
    assert c.get("/readyz").status_code == 200


def test_a_failed_jobs_finished_tasks_are_served_as_partial_results(service) -> None:
    """The guide's example shape (docs/guide/service.md) (passkey, then LongBench): LongBench's file is there at
    submission but broken, so the job fails after passkey finished; nothing is lost."""
    c, settings, _ = service
    (settings.data_dir / "multifieldqa_en.jsonl").write_text("{not json\n")
    job = c.post("/v1/jobs", json={"checkpoint": "tiny-a", "tasks": [
        PASSKEY, {"name": "longbench", "datasets": ["multifieldqa_en"]}]})
    assert job.status_code == 202, job.text
    failed = wait_job(c, job.json()["id"])
    assert failed["status"] == "failed" and "not valid JSON" in failed["error"]
    r = c.get(f"/v1/jobs/{failed['id']}/results")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["partial"] is True and body["status"] == "failed" and "not valid JSON" in body["error"]
    passkey = body["results"]["passkey"]
    assert passkey["samples"] == 4 and passkey["result"]["headline"] == "accuracy"  # finished: the whole entry
    assert body["results"]["longbench"]["partial"] is True and body["results"]["longbench"]["samples_done"] == 0
    assert passkey["samples_file"] == "tasks/passkey/samples.jsonl"  # relative to the job folder
    assert str(settings.home.absolute()) not in r.text


def test_ruler_job_on_a_demo_checkpoint_and_missing_files_refused_at_submission(service) -> None:
    c, _, models = service
    demo = models / "demo-softmax"
    if not demo.exists():
        shutil.copytree(REPO / "demo" / "checkpoints" / "softmax", demo)
    ruler = {"name": "ruler", "tasks": ["niah_single_1"], "lengths": [1024], "samples": 2, "bootstrap": 50}
    job = c.post("/v1/jobs", json={"checkpoint": str(demo), "tasks": [ruler]})
    assert job.status_code == 202, job.text
    done = wait_job(c, job.json()["id"])
    assert done["status"] == "succeeded", done
    assert {k: done["progress"]["ruler"][k] for k in ("done", "total")} == {"done": 2, "total": 2}
    results = c.get(f"/v1/jobs/{done['id']}/results").json()
    entry = results["results"]["ruler"]
    assert points(entry, "score", "length", task="niah_single_1")[1024].n == 2
    assert {Path(p["url"]).name for p in results["plots"]} >= {"ruler_tasks.png", "ruler_average.png"}
    # the fixture's data directory has no essays: refused when it arrives, with the paths looked for
    r = c.post("/v1/jobs", json={"checkpoint": str(demo), "tasks": [{**ruler, "tasks": ["niah_single_2"]}]})
    assert r.status_code == 422, r.text
    assert "PaulGrahamEssays.json not found" in r.text and "download_paulgraham_essay.py" in r.text
