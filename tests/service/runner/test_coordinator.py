"""The job runner called directly (no Ray): results.json layout and atomic write,
failures recorded with their message, cancelled jobs not run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from checkpoints.jsonfiles import write_json_atomic
from evaluators.samplelog import SAMPLES_FILE
from evaluators.suite import task_keys
from service.app import create_app
from service.core.layout import job_results, task_dir
from service.core.status import CANCELLED, FAILED, SUCCEEDED
from service.runner.coordinator import run_job
from service.runner.units import Unit, UnitQueue
from service.store import Store
from tests.helpers import make_settings, ruler_draw_threads, tiny_checkpoint

PASSKEY = {"name": "passkey", "lengths": [128], "trials": 2, "seed": 0}


@pytest.fixture
def env(tmp_path: Path):
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()
    path = tiny_checkpoint(settings.roots[0] / "tiny")
    yield settings, store, path
    store.close()


def queue(store: Store, path: Path, tasks: list[dict]) -> str:
    return store.add_job(checkpoint="tiny", checkpoint_path=str(path), fingerprint="f" * 64, tasks=tasks,
                         rope=None, backend="auto", priority=0).id


def test_task_keys_are_unique() -> None:
    assert task_keys([{"name": "passkey"}, {"name": "needle"}, {"name": "passkey"}]) == ["passkey", "needle", "passkey#2"]


def test_the_unit_queue_runs_a_dead_workers_unit_next_and_finishes_a_task_once_its_units_are_done() -> None:
    a0, a1, b0 = Unit("a", {}, 0, 2), Unit("a", {}, 1, 2), Unit("b", {}, 0, 1)
    queue = UnitQueue([a0, a1, b0], ["a", "b"])
    assert queue.take() is a0 and queue.take() is a1 and len(queue) == 1
    assert queue.died_in(a0) == 2 and queue.died_in(a0) == 3  # its second run, then its third
    queue.put_back(a0)
    assert queue.take() is a0 and queue.take_task() is None
    queue.unit_done(a1)
    queue.unit_done(a0)
    assert queue.has_work() and queue.take_task() == "a" and queue.take_task() is None
    queue.finish_again("a")
    assert queue.take_task() == "a" and queue.take() is b0 and not queue.has_work()


def test_write_json_atomic_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"b": [1, 2]})
    assert json.loads(target.read_text()) == {"b": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_run_job_writes_results_and_progress(env) -> None:
    settings, store, path = env
    job_id = queue(store, path, [PASSKEY, dict(PASSKEY, lengths=[64])])
    store.claim_next("t")
    assert run_job(settings, job_id, store) == SUCCEEDED
    job = store.get_job(job_id)
    assert job.status == SUCCEEDED and set(job.progress) == {"passkey", "passkey#2"}
    assert all(p["done"] == p["total"] > 0 for p in job.progress.values())
    # every prompt token was reported, those the prefix cache served included (a finished task reads all
    # of its tokens; 128 is shorter than the protocol's fixed blocks: the prompts run over it), and the
    # planned tokens were known from the options
    read = [json.loads(line)["prompt_tokens"]
            for line in (task_dir(settings, job_id, "passkey") / SAMPLES_FILE).read_text().splitlines()]
    results = json.loads((job_results(settings, job_id)).read_text())
    reused = results["results"]["passkey"]["prefix_cache"]["reused_tokens"]
    assert job.progress["passkey"]["planned_tokens"] == 256
    assert reused > 0 and job.progress["passkey"]["tokens"] == sum(read)
    assert all(p["eta_s"] == 0.0 for p in job.progress.values())
    assert set(results["results"]) == {"passkey", "passkey#2"}
    # the coordinator stored the leaderboard's rows as the job succeeded: what results.json holds
    stored = store.stored_result(job_id, "passkey")
    assert stored is not None and stored.finished_at == job.finished_at
    assert stored.values["accuracy"] == results["results"]["passkey"]["result"]["metrics"][0]["value"]
    assert store.stored_result(job_id, "passkey#2") is not None
    assert results["job"] == job_id and results["checkpoint"]["path"] == str(path)
    assert results["model"]["resolved_backend"] == "torch" and results["model"]["device"] == "cpu"
    assert results["versions"]["torch"] and results["attempts"] == 1
    for key in ("passkey", "passkey-2"):
        lines = (task_dir(settings, job_id, key) / SAMPLES_FILE).read_text().splitlines()
        assert len(lines) == job.progress[key.replace("-", "#")]["total"]


def test_a_broken_checkpoint_fails_the_job_with_its_message(env) -> None:
    settings, store, path = env
    job_id = queue(store, path, [PASSKEY])
    store.claim_next("t")
    (path / "model.safetensors").unlink()
    assert run_job(settings, job_id, store) == FAILED
    assert "no weights" in store.get_job(job_id).error


def test_a_cancelled_job_is_not_run(env) -> None:
    settings, store, path = env
    job_id = queue(store, path, [PASSKEY])
    store.claim_next("t")
    store.cancel(job_id)
    assert run_job(settings, job_id, store) == CANCELLED
    assert not (job_results(settings, job_id)).exists()


def test_a_sequential_search_job_runs_through_the_worker(env) -> None:
    """search: sequential through the job path: the result's headline is the effective
    length, the samples run are the search's, and progress ends complete."""
    settings, store, path = env
    task = {"name": "passkey", "lengths": [64, 128, 256], "trials": 10, "search": "sequential", "search_block": 2}
    job_id = queue(store, path, [task])
    store.claim_next("t")
    assert run_job(settings, job_id, store) == SUCCEEDED
    job = store.get_job(job_id)
    assert job.progress["passkey"]["done"] == job.progress["passkey"]["total"]
    entry = json.loads((job_results(settings, job_id)).read_text())["results"]["passkey"]
    search = entry["result"]["extra"]["search"]
    assert entry["result"]["headline"] == "effective_length" and search["finished"]
    lines = (task_dir(settings, job_id, "passkey") / SAMPLES_FILE).read_text().splitlines()
    assert len(lines) == search["samples_spent"] == job.progress["passkey"]["done"] < search["grid_samples"] == 30


def test_results_json_names_its_plots_and_the_api_answers_their_urls(env) -> None:
    """The worker writes no URL: a plot is its task and name; the results route answers each
    with the URL that serves it, for a results.json written before (with a URL of its own) too."""
    settings, store, path = env
    job_id = queue(store, path, [PASSKEY])
    store.claim_next("t")
    assert run_job(settings, job_id, store) == SUCCEEDED
    written = json.loads(job_results(settings, job_id).read_text())
    assert written["plots"] == [{"task": "passkey", "name": "passkey"}]
    app = create_app(settings)
    app.state.store = store  # no lifespan: nothing starts
    c = TestClient(app)
    url = f"/v1/jobs/{job_id}/plots/passkey.png"
    assert c.get(f"/v1/jobs/{job_id}/results").json()["plots"] == [{"task": "passkey", "name": "passkey", "url": url}]
    assert c.get(url).content[:8] == b"\x89PNG\r\n\x1a\n"
    write_json_atomic(job_results(settings, job_id), {**written, "plots": [dict(written["plots"][0], url=url)]})
    assert c.get(f"/v1/jobs/{job_id}/results").json()["plots"] == [{"task": "passkey", "name": "passkey", "url": url}]


def test_a_worker_draws_the_first_samples_while_its_model_loads(env, monkeypatch) -> None:
    """The worker starts RULER's draw on its `lctx-draw` thread before the weights load (as
    `lctx eval` does); the unit builds from it and draws nothing more."""
    import shutil

    settings, store, _ = env
    demo = shutil.copytree(Path(__file__).resolve().parents[3] / "demo" / "checkpoints" / "softmax",
                           settings.roots[0] / "demo")
    threads = ruler_draw_threads(monkeypatch)
    task = {"name": "ruler", "tasks": ["niah_single_1"], "lengths": [1024], "samples": 2, "bootstrap": 0, "seed": 7}
    job_id = queue(store, demo, [task])
    store.claim_next("t")
    assert run_job(settings, job_id, store) == SUCCEEDED
    assert len(threads) == 1 and threads[0].startswith("lctx-draw"), threads
    assert store.get_job(job_id).progress["ruler"]["done"] == 2


def test_a_failed_jobs_answers_and_stored_error_hold_no_server_path(env) -> None:
    """The job's error names its folder as a client path in the store, its status answer and
    its results answer alike (the results once carried the absolute path)."""
    settings, store, path = env
    folder = settings.roots[0] / "no-text"
    folder.mkdir()
    job_id = queue(store, path, [{"name": "perplexity", "text_file": str(folder), "lengths": [16], "max_tokens": 32}])
    store.claim_next("t")
    assert run_job(settings, job_id, store) == FAILED
    app = create_app(settings)
    app.state.store = store  # no lifespan: nothing starts
    c = TestClient(app)
    status, results = c.get(f"/v1/jobs/{job_id}").text, c.get(f"/v1/jobs/{job_id}/results").text
    error = store.get_job(job_id).error
    assert "no-text has no .txt files" in error and "no-text has no .txt files" in results, results
    for text in (error, status, results):
        for server in {str(settings.home.absolute()), str(settings.roots[0]), str(settings.roots[0].resolve())}:
            assert server not in text, (server, text)


def test_the_store_says_failed_before_anything_else_tells_of_the_failure(env) -> None:
    """The coordinator's log line of a failure (and the results it serves from then on) come
    once the store says failed, with the error and the final progress in the same write: a
    client never reads the error while the job still reads running."""
    import logging

    settings, store, path = env
    folder = settings.roots[0] / "no-text"
    folder.mkdir()
    job_id = queue(store, path, [{"name": "perplexity", "text_file": str(folder), "lengths": [16], "max_tokens": 32}])
    store.claim_next("t")
    seen: list[tuple[str, str | None, dict]] = []

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "failed" in record.getMessage():
                job = store.get_job(job_id)
                seen.append((job.status, job.error, job.progress))

    watch = Watch()
    logging.getLogger("lctx.jobs").addHandler(watch)
    try:
        assert run_job(settings, job_id, store) == FAILED
    finally:
        logging.getLogger("lctx.jobs").removeHandler(watch)
    [(status, error, progress)] = seen
    assert status == FAILED and "no .txt files" in error
    assert progress["perplexity"]["done"] == 0 and progress["perplexity"]["eta_s"] is None


def test_work_counts_the_unit_runs_of_every_attempt(tmp_path: Path) -> None:
    """A job the service was killed under (kill -9) and that ran again once requeued: its first
    attempt's unit runs left their notes (as a worker writes them when a unit starts) and no
    result. results.json's `work` counts them with this attempt's runs, as many as the notes on
    disk, and says why each unit ran again."""
    from service.runner.progress import unit_notes, write_note

    settings = make_settings(tmp_path, unit_samples=1)
    store = Store(settings.database)
    store.create_all()
    job_id = queue(store, tiny_checkpoint(settings.roots[0] / "tiny"), [PASSKEY])  # 2 samples: 2 units
    store.claim_next("t")
    folder = task_dir(settings, job_id, "passkey")
    # the first attempt: part 1's worker died and it ran again, part 2 started, then the service died
    for index, run in ((0, "died"), (0, "killed"), (1, "killed")):
        unit = Unit("passkey", PASSKEY, index, 2)
        write_note(folder, f"{unit.stem}-{run}", {"unit": unit.stem, "label": unit.label, "attempt": 1,
                                                   "started": 0, "tokens": 0})
    assert store.requeue(job_id)  # what start-up's recovery does with a job left running
    assert store.claim_next("t").attempts == 2
    assert run_job(settings, job_id, store) == SUCCEEDED
    results = json.loads(job_results(settings, job_id).read_text())
    assert len(unit_notes(folder)) == results["work"]["unit_runs"] == 5 and results["attempts"] == 2
    assert results["work"]["units"] == 2
    assert results["work"]["reruns"] == ["passkey part 1/2: ran again in attempt 1 (its worker died)"] + [
        f"passkey part {i}/2: ran again in attempt 2 (the job was requeued or resumed)" for i in (1, 2)]
    store.close()


def test_a_succeeded_jobs_answers_name_no_server_path(env) -> None:
    """A perplexity job's text_file is stored resolved (the worker reads exactly the file
    checked); its status, results, samples and the leaderboard row show it as the client
    gave it (the leaderboard's options and setting once showed the server's path)."""
    settings, store, path = env
    doc = settings.roots[0] / "docs" / "a.txt"
    doc.parent.mkdir()
    doc.write_text("Grass grows. Birds fly. The sun is warm. " * 8)
    job_id = queue(store, path, [{"name": "perplexity", "text_file": str(doc), "lengths": [16], "max_tokens": 32}])
    store.claim_next("t")
    assert run_job(settings, job_id, store) == SUCCEEDED
    app = create_app(settings)
    app.state.store = store  # no lifespan: nothing starts
    c = TestClient(app)
    answers = {url: c.get(url) for url in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/results",
                                           f"/v1/jobs/{job_id}/samples", "/v1/leaderboard?task=perplexity")}
    assert all(r.status_code == 200 for r in answers.values()), answers
    [row] = answers["/v1/leaderboard?task=perplexity"].json()["rows"]
    assert row["options"]["text_file"] == "docs/a.txt" and "text_file=docs/a.txt" in row["setting"]
    for url, r in answers.items():
        assert str(settings.home.parent) not in r.text, (url, r.text[:2000])


def test_a_job_succeeds_with_its_leaderboard_rows_or_not_at_all(env) -> None:
    """The rows are written in the transaction that marks the job succeeded: when they cannot be
    written the job is not succeeded either (it is still running, and ends as its run decides)."""
    settings, store, path = env
    job_id = queue(store, path, [PASSKEY])
    store.claim_next("t")

    def broken(job: object) -> list:
        raise RuntimeError("the database went away while the rows were written")

    with pytest.raises(RuntimeError):
        store.finish(job_id, SUCCEEDED, rows=broken)
    assert store.get_job(job_id).status == "running" and store.stored_result(job_id, "passkey") is None
    assert run_job(settings, job_id, store) == SUCCEEDED
    job = store.get_job(job_id)
    assert store.stored_result(job_id, "passkey").finished_at == job.finished_at
