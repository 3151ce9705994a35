"""`lctx upload OUT`: a local `lctx eval` run recorded in a real service as a job of its
checkpoint (marked as run elsewhere), on the leaderboard and the job list; results of other
weights, or a folder that mixes runs, refused."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from cli.main import main
from service.app import create_app
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint

pytestmark = pytest.mark.integration  # a server on loopback and an evaluation run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny checkpoint under a checkpoint root and a finished `lctx eval` of it with YaRN."""
    root = tmp_path_factory.mktemp("upload")
    tiny_checkpoint(root / "models" / "tiny")
    out = root / "out"
    assert main(["eval", "--checkpoint", str(root / "models" / "tiny"), "--task", "passkey", "--lengths", "128",
                 "--trials", "2", "--rope", "yarn:2", "--out", str(out), "--quiet"]) == 0
    return root, out


def test_a_local_run_is_recorded_as_a_job_on_the_leaderboard(run: tuple[Path, Path], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    root, out = run
    settings = make_settings(tmp_path, checkpoint_roots=[root / "models"])
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        url = ["--url", srv.url]
        assert main(["checkpoints", "add", "tiny", "tiny", *url]) == 0
        capsys.readouterr()
        assert main(["upload", str(out), "--checkpoint", "tiny", *url]) == 0
        job_id = capsys.readouterr().out.split()[2]
        job = c.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] == "succeeded" and job["ran_elsewhere"] and job["rope_label"] == "yarn:2"
        assert job["progress"]["passkey"]["done"] == 2
        local = json.loads((out / "results.json").read_text())["results"]["passkey"]["result"]
        board = c.get("/v1/leaderboard", params={"task": "passkey"}).json()
        assert [r["job"] for r in board["rows"]] == [job_id] and board["rows"][0]["rope"] == "yarn:2"
        headline = next(m for m in local["metrics"] if m["name"] == local["headline"])["value"]
        assert board["rows"][0]["values"][board["headline"]] == headline
        samples = c.get(f"/v1/jobs/{job_id}/samples").text.splitlines()
        assert len(samples) == 2 and str(out) not in c.get(f"/v1/jobs/{job_id}/results").text

        tiny_checkpoint(root / "models" / "other", seed=5)  # other weights: their results are not tiny's
        assert main(["checkpoints", "add", "other", "other", *url]) == 0
        assert main(["upload", str(out), "--checkpoint", "other", *url]) == 1
        assert "fingerprint" in capsys.readouterr().err

        body = {"checkpoint": "tiny", "fingerprint": job["fingerprint"],
                "results": json.loads((out / "results.json").read_text()),
                "samples": {"passkey": (out / "passkey" / "samples.jsonl").read_text()}}
        mixed = body["samples"]["passkey"].replace(body["results"]["results"]["passkey"]["config"], "0" * 64, 1)
        r = c.post("/v1/uploads", json={**body, "samples": {"passkey": mixed}})
        assert r.status_code == 422 and "mixes runs" in r.text
        r = c.post("/v1/uploads", json={**body, "samples": {}})
        assert r.status_code == 422 and "samples are needed" in r.text
        assert c.get("/v1/jobs").json()["total"] == 1  # nothing recorded by the refusals
