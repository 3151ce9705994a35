"""What a submission reads of a task's files before it queues a job (service/submission.py),
through the API in-process (no lifespan: nothing starts): a file option or data file that
could only fail when the job runs is a 422 saying what was wrong and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.store import Store
from tests.helpers import make_settings, tiny_checkpoint


@pytest.fixture
def api(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    settings = make_settings(tmp_path, data_dir=data)
    tiny_checkpoint(settings.roots[0] / "tiny")
    store = Store(settings.database)
    store.create_all()
    app = create_app(settings)
    app.state.store, app.state.dispatcher = store, None
    c = TestClient(app)
    assert c.post("/v1/checkpoints", json={"name": "tiny", "path": "tiny"}).status_code == 201
    yield c, data
    store.close()


def test_file_options_that_hold_no_text_are_refused_at_submission(api) -> None:
    c, data = api
    (data / "empty.txt").write_text("")
    (data / "blank.txt").write_text(" \n\n\t ")
    (data / "no-txt").mkdir()
    (data / "no-txt" / "a.md").write_text("words")
    (data / "blanks").mkdir()
    (data / "blanks" / "a.txt").write_text("\n")
    (data / "hay.txt").write_text("Grass grows. Birds fly. " * 20)
    (data / "qasper.jsonl").write_text("")
    needle = {"name": "needle", "lengths": [128], "depths": [50]}
    perplexity = {"name": "perplexity", "lengths": [16], "max_tokens": 32}
    cases = [
        ({**needle, "haystack_file": "empty.txt"}, "tasks[0].haystack_file: empty.txt: it is empty; give a file"),
        ({**needle, "haystack_file": "blank.txt"}, "tasks[0].haystack_file: blank.txt: it holds only whitespace"),
        ({**perplexity, "text_file": "empty.txt"}, "tasks[0].text_file: empty.txt: it is empty"),
        ({**perplexity, "text_file": "blank.txt"}, "tasks[0].text_file: blank.txt: it holds only whitespace"),
        ({**perplexity, "text_file": "no-txt"}, "tasks[0].text_file: no-txt has no .txt files; put one document"),
        ({**perplexity, "text_file": "blanks"}, "tasks[0].text_file: blanks has only .txt files with no text"),
        ({"name": "longbench", "datasets": ["qasper"]}, "data files that hold nothing: qasper.jsonl (it is empty)"),
    ]
    for task, why in cases:
        r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [task]})
        assert r.status_code == 422 and why in r.json()["detail"], (task, r.text)
        assert str(data) not in r.text
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{**needle, "haystack_file": "hay.txt"}]})
    assert r.status_code == 202, r.text
    assert c.get("/v1/jobs").json()["total"] == 1


def test_data_from_before_a_benchmarks_fix_is_accepted_with_a_warning(api) -> None:
    """Graphwalks files whose BFS prompts are in the wording before the 2026-02-27 fix: the job
    is accepted (202) and its answer warns, naming the task and the file (no server path); the
    fixed files are answered no warning; a later GET answers none (the results carry them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    c, data = api
    (data / "graphwalks").mkdir()
    path = data / "graphwalks" / "graphwalks_128k_and_shorter.parquet"

    def submit(prompt: str) -> dict:
        pq.write_table(pa.Table.from_pylist([{"prompt": prompt, "answer_nodes": ["b"], "problem_type": "bfs",
                                              "prompt_chars": len(prompt)}]), path)
        r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [
            {"name": "graphwalks", "sets": ["128k_and_shorter"], "chat_template": False}]})
        assert r.status_code == 202, r.text
        return r.json()

    job = submit("a -> b\nOperation:\nPerform a BFS from node a with depth 1.")
    [warning] = job["warnings"]
    assert warning.startswith("tasks[0] (graphwalks): graphwalks_128k_and_shorter.parquet: its bfs prompts ask for "
                              "the nodes at \"depth N\" without \"exactly\"")
    assert str(data) not in warning and "huggingface.co/datasets/openai/graphwalks" in warning
    assert c.get(f"/v1/jobs/{job['id']}").json()["warnings"] == []
    assert submit("a -> b\nOperation:\nPerform a BFS from node a and return only the nodes at exactly depth 1."
                  )["warnings"] == []
