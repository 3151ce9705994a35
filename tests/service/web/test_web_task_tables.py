"""A job page in a real browser (Debian's Chromium) shows the per-bin tables of MRCR and
Graphwalks: each series along a named axis as a table, one row per bin, one column per
needle count or problem type, read from the typed result with no code of theirs in the page.
Its numbers are the job's stored rows (what the leaderboard shows): with its results.json
gone the tables still show them, without the samples behind each."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from evaluators.graphwalks.evaluator import typed as graphwalks_typed
from evaluators.mrcr.evaluator import typed as mrcr_typed
from service.app import create_app
from service.core.layout import job_results
from service.core.status import SUCCEEDED
from service.store import Store
from tests.helpers import ThreadServer, make_settings, store_results
from tests.service.web.browser import new_page

pytestmark = pytest.mark.integration  # a browser and a server

MRCR = [{"n_needles": n, "bin": b, "own_bin": "8k", "score": s, "beyond_context": s is None}
        for n, b, s in [(2, "8k", 1.0), (2, "16k", 0.5), (4, "8k", 0.25), (8, "16k", None)]]
GRAPHWALKS = [{"problem_type": p, "bin": "128k_and_shorter", "f1": f, "f1_card_literal": f, "overlap": 1,
               "parse_error": False, "parsed": ["n1"], "n_truth": 2, "beyond_context": False}
              for p, f in [("bfs", 0.5), ("parents", 0.75)]]


def test_job_page_shows_the_per_bin_tables(chromium, tmp_path: Path, models: Path) -> None:
    settings = make_settings(tmp_path)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
        fingerprint = c.get("/v1/checkpoints/tiny").json()["fingerprint"]
        store = Store(settings.database)
        try:
            job = store.add_job(fingerprint=fingerprint, checkpoint="tiny", checkpoint_path="/m/tiny",
                                tasks=[{"name": "mrcr"}, {"name": "graphwalks"}], rope=None, backend="auto",
                                priority=0)
            assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
            store_results(settings, store, job.id, {
                "mrcr": {"task": "mrcr", "result": mrcr_typed(MRCR).model_dump(mode="json")},
                "graphwalks": {"task": "graphwalks", "result": graphwalks_typed(GRAPHWALKS).model_dump(mode="json")}})
        finally:
            store.close()
        page, console = new_page(chromium, srv.url)
        page.goto(f"/jobs/{job.id}")
        table = page.locator("table.series-table", has_text="score by bucket")
        table.wait_for()
        assert [t.strip() for t in table.locator("thead th").all_inner_texts()] == \
            ["bucket", "all", "needles=2", "needles=4", "needles=8"]
        rows = table.locator("tbody tr").all_inner_texts()
        assert rows[0].split("\t")[:3] == ["8k", "0.625 (n=2)", "1 (n=1)"] and rows[1].startswith("16k")
        beyond = page.locator("table.series-table", has_text="beyond_context by bucket").first.inner_text()
        assert "1 (n=1)" in beyond  # the 16k row beyond the context, counted
        f1 = page.locator("table.series-table", has_text="f1 by bucket").first
        assert [t.strip() for t in f1.locator("thead th").all_inner_texts()] == \
            ["bucket", "all", "problem_type=bfs", "problem_type=parents"]
        assert page.locator("#job-results table.metrics-table[data-source=stored]").count() == 2
        assert console.take() == []
        # results.json gone: the stored rows still give every number (not the samples behind them)
        job_results(settings, job.id).unlink()
        page.reload()
        table = page.locator("table.series-table", has_text="score by bucket")
        table.wait_for()
        assert [t.strip() for t in table.locator("thead th").all_inner_texts()] == \
            ["bucket", "all", "needles=2", "needles=4", "needles=8"]
        rows = {r.split("\t")[0]: r.split("\t")[1:3] for r in table.locator("tbody tr").all_inner_texts()}
        assert rows["8k"] == ["0.625", "1"]
        assert page.locator("#job-results table.metrics-table[data-source=stored]").count() == 2
        assert "Results:" in page.locator("#job-results .error").first.inner_text()  # the file's absence is said
        console.take()  # the failed request of results.json is logged by the browser
