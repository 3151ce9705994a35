"""LongBench v2, BABILong, MRCR and Graphwalks on the leaderboard: their own columns come from
their typed results (metrics and series), with no code of theirs in the service."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from evaluators.babilong.evaluator import typed as babilong_typed
from evaluators.graphwalks.evaluator import typed as graphwalks_typed
from evaluators.longbench_v2.evaluator import typed as longbench_v2_typed
from evaluators.mrcr.evaluator import typed as mrcr_typed
from service.app import create_app
from service.core.layout import job_dir
from service.core.status import SUCCEEDED
from service.store import Store
from tests.helpers import ThreadServer, make_settings, store_results

pytestmark = pytest.mark.integration  # a server on loopback

V2 = [{"_id": str(i), "domain": "Code" if i < 2 else "Long-dialogue", "difficulty": d, "length": n, "pred": p,
       "answer": "A", "judge": p == "A"}
      for i, (d, n, p) in enumerate([("easy", "short", "A"), ("hard", "medium", "B"), ("hard", "long", "A"),
                                     ("easy", "long", None)])]
BABILONG = [{"babi_task": t, "length": n, "score": s}
            for t, n, s in [("qa1", 0, 1.0), ("qa1", 0, 0.0), ("qa1", 1000, 1.0), ("qa2", 0, 0.0), ("qa2", 1000, 1.0)]]


MRCR = [{"n_needles": n, "bin": b, "own_bin": "8k", "score": s, "beyond_context": s is None}
        for n, b, s in [(2, "8k", 1.0), (2, "16k", 0.5), (4, "8k", 0.0), (8, "16k", None)]]
GRAPHWALKS = [{"problem_type": p, "bin": b, "own_bin": "8k", "f1": f, "f1_card_literal": c, "overlap": o,
               "parse_error": e, "parsed": [] if e else ["n1", "n9"], "n_truth": 2, "beyond_context": f is None}
              for p, b, f, c, o, e in [("bfs", "128k_and_shorter", 0.5, 0.4, 1, False),
                                       ("parents", "128k_and_shorter", 0.0, 1.0, 0, True),
                                       ("bfs", "256k_to_1mil", 0.0, 1.0, 0, False),
                                       ("parents", "256k_to_1mil", None, None, 0, False)]]


def test_leaderboard_columns_of_longbench_v2_babilong_mrcr_and_graphwalks(tmp_path: Path, models: Path) -> None:
    settings = make_settings(tmp_path)
    results = {"longbench_v2": longbench_v2_typed(V2), "babilong": babilong_typed(BABILONG),
               "mrcr": mrcr_typed(MRCR), "graphwalks": graphwalks_typed(GRAPHWALKS)}
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
        fingerprint = c.get("/v1/checkpoints/tiny").json()["fingerprint"]
        store = Store(settings.database)
        try:
            for name, result in results.items():
                job = store.add_job(fingerprint=fingerprint, checkpoint="tiny", checkpoint_path="/m/tiny",
                                    tasks=[{"name": name}], rope=None, backend="auto", priority=0)
                assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
                job_dir(settings, job.id).mkdir(parents=True)
                store_results(settings, store, job.id, {name: {
                    "task": name, "result": result.model_dump(mode="json")}})
        finally:
            store.close()
        v2 = c.get("/v1/leaderboard", params={"task": "longbench_v2"}).json()
        bl = c.get("/v1/leaderboard", params={"task": "babilong"}).json()
        mr = c.get("/v1/leaderboard", params={"task": "mrcr"}).json()
        gw = c.get("/v1/leaderboard", params={"task": "graphwalks"}).json()
    assert v2["headline"] == "overall"
    values = v2["rows"][0]["values"]
    assert {k: values[k] for k in ("overall", "easy", "hard", "short", "medium", "long")} == {
        "overall": 50.0, "easy": 50.0, "hard": 50.0, "short": 100.0, "medium": 0.0, "long": 50.0}
    assert values["accuracy.category=Code"] == 50.0 and values["accuracy.category=Long-dialogue"] == 50.0
    assert bl["headline"] == "average"
    values = bl["rows"][0]["values"]
    assert values["average"] == (50 + 100 + 0 + 100) / 4
    assert values["accuracy.task=qa1.length=0"] == 50.0 and values["accuracy.task=qa2.length=1000"] == 100.0
    assert values["mean_over_tasks.length=0"] == 25.0
    info = {col["name"]: col for col in bl["column_info"]}
    assert info["accuracy.task=qa1.length=1000"]["axis"] == "length" and info["average"]["unit"] == "accuracy (%)"
    assert mr["headline"] == "overall"
    values = mr["rows"][0]["values"]
    assert {k: values[k] for k in ("overall", "needles_2", "needles_4", "beyond_context")} == {
        "overall": 0.5, "needles_2": 0.75, "needles_4": 0.0, "beyond_context": 1.0}
    assert values["needles_8"] is None  # its one row lay beyond the context
    assert values["score.bucket=8k"] == 0.5 and values["score.needles=2.bucket=16k"] == 0.5
    assert values["beyond_context.bucket=16k"] == 1.0
    assert gw["headline"] == "overall"
    values = gw["rows"][0]["values"]
    assert {k: values[k] for k in ("overall", "bfs", "parents", "parse_errors", "no_overlap", "card_scored_1")} == {
        "overall": 0.5 / 3, "bfs": 0.25, "parents": 0.0, "parse_errors": 1.0, "no_overlap": 1.0, "card_scored_1": 2.0}
    assert values["f1_card_literal"] == pytest.approx(2.4 / 3)
    assert values["f1.problem_type=bfs.bucket=256k_to_1mil"] == 0.0 and values["f1.bucket=128k_and_shorter"] == 0.25


def test_submissions_without_their_files_are_refused_with_the_paths(tmp_path: Path, models: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with ThreadServer(create_app(make_settings(tmp_path, data_dir=data))) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
        r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "longbench_v2"}]})
        assert r.status_code == 422 and "looked for LongBench-v2/data.json" in r.text  # relative to the data dir
        assert str(data) not in r.text
        assert "THUDM/LongBench-v2" in r.text
        r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "babilong", "tasks": ["qa2"]}]})
        assert r.status_code == 422 and "qa2_two-supporting-facts_train.txt" in r.text and "pg19" in r.text
        (data / "data.json").write_text("[]")
        assert c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "longbench_v2"}]}
                      ).status_code == 202
