"""HELMET on the leaderboard: its category columns per length, read from its typed result (the
service has no code of HELMET's), through the API on loopback."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from evaluators.helmet.evaluator import typed
from evaluators.helmet.options import HelmetOptions
from service.app import create_app
from service.core.layout import job_dir
from service.core.status import SUCCEEDED
from service.store import Store
from tests.helpers import ThreadServer, make_settings, store_results

pytestmark = pytest.mark.integration  # a server on loopback


def record(dataset: str, length: int, **metrics: float) -> dict:
    return {"dataset": dataset, "length": length, "metrics": metrics}


# Per-sample values (0-1): two lengths, recall's json_kv and RULER datasets, RAG's NQ, NarrativeQA unjudged.
RECORDS = [
    record("json_kv", 8192, substring_exact_match=1.0), record("json_kv", 8192, substring_exact_match=0.0),
    record("ruler_niah_mk_2", 8192, ruler_recall=1.0), record("ruler_niah_mk_3", 8192, ruler_recall=0.5),
    record("ruler_niah_mv", 8192, ruler_recall=0.5), record("kilt_nq", 8192, substring_exact_match=1.0),
    record("json_kv", 16384, substring_exact_match=0.0), record("ruler_niah_mk_2", 16384, ruler_recall=0.0),
    record("ruler_niah_mk_3", 16384, ruler_recall=0.0), record("ruler_niah_mv", 16384, ruler_recall=1.0),
    record("kilt_nq", 16384, substring_exact_match=0.0),
    {**record("narrativeqa", 8192, rougeL_f1=0.5), "not_judged": True},
]


def test_helmet_category_columns_per_length(tmp_path: Path, models: Path) -> None:
    result = typed(RECORDS, HelmetOptions())
    # recall at 8k: (50 + 100 + 50 + 50) / 4; RAG: NQ alone; overall: their mean (LongQA has nothing judged)
    assert result.columns()["score.category=recall.length=8192"][0] == pytest.approx(62.5)
    settings = make_settings(tmp_path)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
        fingerprint = c.get("/v1/checkpoints/tiny").json()["fingerprint"]
        store = Store(settings.database)
        try:
            job = store.add_job(fingerprint=fingerprint, checkpoint="tiny", checkpoint_path="/m/tiny",
                                tasks=[{"name": "helmet"}], rope=None, backend="auto", priority=0)
            assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
            job_dir(settings, job.id).mkdir(parents=True)
            store_results(settings, store, job.id, {"helmet": {"task": "helmet",
                                                               "result": result.model_dump(mode="json")}})
        finally:
            store.close()
        board = c.get("/v1/leaderboard", params={"task": "helmet"}).json()
        recall = c.get("/v1/leaderboard", params={"task": "helmet/recall"}).json()
        at_8k = c.get("/v1/leaderboard", params={"task": "helmet/8192"}).json()
    assert board["headline"] == "overall"
    values = board["rows"][0]["values"]
    assert values["score.category=recall.length=8192"] == pytest.approx(62.5)
    assert values["score.category=recall.length=16384"] == pytest.approx(25.0)
    assert values["score.category=rag.length=8192"] == 100.0 and values["score.category=rag.length=16384"] == 0.0
    assert values["overall"] == pytest.approx(((62.5 + 100) / 2 + (25 + 0) / 2) / 2)
    assert values["substring_exact_match.dataset=json_kv.length=8192"] == 50.0
    info = {col["name"]: col for col in board["column_info"]}
    assert info["score.category=recall.length=8192"]["axis"] == "length"
    assert recall["rows"][0]["values"]["score.length=16384"] == pytest.approx(25.0)
    assert at_8k["rows"][0]["values"]["score.category=rag"] == 100.0
