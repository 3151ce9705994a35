"""The leaderboard keeps results on different data revisions apart (a row each, the revision in
the row and its setting label) and one revision's latest results in one row; results that name
no data stay one row as before. The router's function on a real store, no server."""

from __future__ import annotations

from pathlib import Path

from evaluators.graphwalks.evaluator import typed
from service.api.leaderboard import compare, leaderboard
from service.core.layout import job_dir
from service.core.status import SUCCEEDED
from service.store import Store
from tests.helpers import make_settings, store_results


def graphwalks_result(f1: float) -> dict:
    rows = [{"problem_type": "bfs", "bin": "128k_and_shorter", "f1": f1, "f1_card_literal": f1, "overlap": 1,
             "parse_error": False, "parsed": ["n1"], "n_truth": 1, "beyond_context": False}]
    return typed(rows).model_dump(mode="json")


def test_rows_part_by_data_revision(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()
    jobs = []
    try:
        # oldest first: two runs on revision a, one on b, one written before data was recorded
        for f1, revision in ((0.25, "aaaaaaaaaaaa"), (0.5, "bbbbbbbbbbbb"), (0.75, "aaaaaaaaaaaa"), (1.0, None)):
            job = store.add_job(fingerprint="fp", checkpoint="tiny", checkpoint_path="/m/tiny",
                                tasks=[{"name": "graphwalks"}], rope=None, backend="auto", priority=0)
            assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
            job_dir(settings, job.id).mkdir(parents=True)
            entry = {"task": "graphwalks", "result": graphwalks_result(f1)}
            if revision:
                entry["data"] = {"revision": revision, "files": [], "hub": [], "warnings": []}
            store_results(settings, store, job.id, {"graphwalks": entry})
            jobs.append(job.id)
        board = leaderboard("graphwalks", store)
        rows = {r.data_revision: r for r in board.rows}
        assert set(rows) == {"aaaaaaaaaaaa", "bbbbbbbbbbbb", None}
        assert rows["aaaaaaaaaaaa"].job == jobs[2] and rows["aaaaaaaaaaaa"].values["overall"] == 0.75  # its latest
        assert rows["bbbbbbbbbbbb"].values["overall"] == 0.5
        assert rows["aaaaaaaaaaaa"].setting == "rope=checkpoint backend=auto data=aaaaaaaaaaaa"
        assert rows[None].setting == "rope=checkpoint backend=auto"
        pair = compare("graphwalks", [jobs[2], jobs[1]], store, settings)
        assert [r.data_revision for r in pair.rows] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    finally:
        store.close()


def test_thinking_is_an_axis_beside_rope(tmp_path: Path) -> None:
    """The same checkpoint thinking and not thinking: two rows side by side, each saying its
    setting, and the thinking filter keeps one."""
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()
    try:
        for f1, thinking in ((0.5, "off"), (0.75, "on")):
            job = store.add_job(fingerprint="fp", checkpoint="tiny", checkpoint_path="/m/tiny",
                                tasks=[{"name": "graphwalks", "thinking": thinking, "chat_template": True}],
                                rope=None, backend="auto", priority=0)
            assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
            job_dir(settings, job.id).mkdir(parents=True)
            store_results(settings, store, job.id, {
                "graphwalks": {"task": "graphwalks", "result": graphwalks_result(f1)}})
        rows = {r.thinking: r for r in leaderboard("graphwalks", store).rows}
        assert set(rows) == {"on", "off"} and rows["on"].values["overall"] == 0.75
        assert rows["off"].setting == "rope=checkpoint backend=auto thinking=off"
        only = leaderboard("graphwalks", store, thinking="on").rows
        assert [r.thinking for r in only] == ["on"]
    finally:
        store.close()

