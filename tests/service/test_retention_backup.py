"""A service kept for years: retention prunes old jobs' samples and plots and keeps their results,
leaderboard rows and curves; each job's bytes in its answer and /metrics; backup while a job runs
and restore, checked against the leaderboard, on SQLite and PostgreSQL. A real server on
loopback, a history recorded from a real `lctx eval` run (`lctx upload`)."""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from cli.main import main
from service.app import create_app
from service.core.backup import backup, pg_tool, restore
from service.retention import apply_prune, plan_prune
from service.store import Store
from tests.helpers import ThreadServer, make_settings, new_postgres_database, tiny_checkpoint

pytestmark = pytest.mark.integration  # servers on loopback, an evaluation run, PostgreSQL

NIGHTS = (100, 80, 60, 40, 1)  # days ago


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("history")
    tiny_checkpoint(root / "tiny")
    out = root / "out"
    assert main(["eval", "--checkpoint", str(root / "tiny"), "--task", "passkey", "--lengths", "128", "--trials", "2",
                 "--out", str(out), "--quiet"]) == 0
    return root, out


def _history(c: httpx.Client, run: tuple[Path, Path], models: Path) -> list[str]:
    """Five nights of one lineage (models/runs/night-*, the same weights), finished NIGHTS days ago."""
    root, out = run
    document = json.loads((out / "results.json").read_text())
    samples = {"passkey": (out / "passkey" / "samples.jsonl").read_text()}
    fingerprint = json.loads((out / "checkpoint.json").read_text())["fingerprint"]
    jobs = []
    for i, days in enumerate(NIGHTS):
        shutil.copytree(root / "tiny", models / "runs" / f"night-{i}")
        assert c.post("/v1/checkpoints", json={"name": f"night-{i}", "path": f"runs/night-{i}"}).status_code == 201
        at = datetime.now(UTC) - timedelta(days=days)
        doc = {**document, "started_at": (at - timedelta(minutes=5)).isoformat(), "finished_at": at.isoformat()}
        r = c.post("/v1/uploads", json={"checkpoint": f"night-{i}", "fingerprint": fingerprint, "results": doc,
                                        "samples": samples})
        assert r.status_code == 201, r.text
        jobs.append(r.json()["id"])
    return jobs


def _board(c: httpx.Client) -> dict:
    return c.get("/v1/leaderboard", params={"task": "passkey", "per": "fingerprint", "limit": 50,
                                            "sort": "finished_at"}).json()


def test_retention_prunes_samples_keeps_results_rows_and_curves(run, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings(tmp_path, retention_days=30)
    models = settings.roots[0]
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        jobs = _history(c, run, models)
        board, curve = _board(c), c.get("/v1/leaderboard", params={"task": "passkey", "lineage": "runs",
                                                                   "sort": "finished_at"}).json()
        disk = c.get(f"/v1/jobs/{jobs[1]}").json()["disk"]
        assert disk["samples"] > 0 and disk["total"] == disk["samples"] + disk["plots"] + disk["results"]
        assert disk["tasks"]["passkey"]["samples"] == disk["samples"]

        # The operator's command reads the service's settings from its environment and flags (which it sets).
        for variable, value in (("LCTX_CHECKPOINT_ROOTS", str(models)), ("LCTX_HOME", str(settings.home)),
                                ("LCTX_RETENTION_DAYS", "365")):
            monkeypatch.setenv(variable, value)
        assert main(["prune", "--dry-run", "--retention-days", "30"]) == 0
        said = capsys.readouterr().out
        assert "would prune the samples and plots of 3 job(s)" in said, said
        assert "1 first of its lineage" in said and "1 last of its lineage" in said
        assert c.get(f"/v1/jobs/{jobs[1]}/samples").status_code == 200  # a dry run removes nothing
        assert main(["prune", "--retention-days", "30"]) == 0
        assert "freed" in capsys.readouterr().out
        for job in jobs[1:4]:  # 80, 60 and 40 days ago
            r = c.get(f"/v1/jobs/{job}/samples")
            assert r.status_code == 410 and "pruned" in r.json()["detail"] and "results" in r.json()["detail"]
            results = c.get(f"/v1/jobs/{job}/results")
            assert results.status_code == 200 and results.json()["pruned"]["bytes"] > 0
            assert c.get(f"/v1/jobs/{job}").json()["disk"]["samples"] == 0
        for job in (jobs[0], jobs[4]):  # the lineage's first and last keep theirs
            assert c.get(f"/v1/jobs/{job}/samples").status_code == 200
        assert _board(c) == board  # every row kept
        assert c.get("/v1/leaderboard", params={"task": "passkey", "lineage": "runs",
                                                "sort": "finished_at"}).json() == curve
        metrics = c.get("/metrics").text
        for _ in range(50):  # the first walk runs in the background
            if "lctx_results_bytes" in metrics:
                break
            time.sleep(0.1)
            metrics = c.get("/metrics").text
        assert 'lctx_results_bytes{kind="samples"}' in metrics and 'task="passkey"' in metrics
    store = Store(settings.database)
    try:
        assert plan_prune(store, settings).jobs == []  # nothing left to prune: a second pass is a no-op
        assert apply_prune(settings, plan_prune(store, settings)) == 0
    finally:
        store.close()


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_backup_while_a_job_runs_restores_an_identical_leaderboard(run, tmp_path: Path, database: str,
                                                                  request: pytest.FixtureRequest) -> None:
    url = None
    if database == "postgresql":
        if pg_tool("pg_dump") is None or pg_tool("pg_restore") is None:
            pytest.skip("PostgreSQL's client tools (pg_dump, pg_restore) are not installed")
        server = request.getfixturevalue("postgres_url")
        url = new_postgres_database(server, "backup")
    settings = make_settings(tmp_path / "a", **({"database_url": url} if url else {}))
    models = settings.roots[0]
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        jobs = _history(c, run, models)
        running = c.post("/v1/jobs", json={"checkpoint": "night-0", "tasks": [{"name": "passkey", "lengths": [64],
                                                                              "trials": 1}]}).json()["id"]
        store = Store(settings.database)
        try:
            assert store.claim_next("elsewhere").id == running  # running while the backup is taken
        finally:
            store.close()
        board = _board(c)
        manifest = backup(settings, tmp_path / "backup")
        assert manifest["board"]["rows"] >= len(jobs) and "checked" in manifest  # every view of every night
        with pytest.raises(Exception, match="not empty"):
            backup(settings, tmp_path / "backup")
    target_url = new_postgres_database(request.getfixturevalue("postgres_url"), "restored") if url else None
    restored = make_settings(tmp_path / "b", **({"database_url": target_url} if target_url else {}))
    done = restore(restored, tmp_path / "backup")
    assert "equals the backup's" in done["checked"]
    with ThreadServer(create_app(restored)) as srv, httpx.Client(base_url=srv.url) as c:
        assert _board(c) == board
        assert c.get(f"/v1/jobs/{jobs[0]}/samples").status_code == 200
        assert c.get(f"/v1/jobs/{running}").json()["status"] in ("running", "queued")  # requeued by recovery
