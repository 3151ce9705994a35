"""`lctx checkpoints add|list`, `submit`, `status`, `results` against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.client_commands import job_flags, parse_task
from cli.main import main
from service.app import create_app
from tests.helpers import ThreadServer, make_settings

pytestmark = pytest.mark.integration  # a real server and Ray


def test_parse_task_options() -> None:
    assert parse_task("passkey:lengths=256,512:trials=10") == {"name": "passkey", "lengths": [256, 512], "trials": 10}
    assert parse_task("longbench:datasets=qasper") == {"name": "longbench", "datasets": ["qasper"]}
    with pytest.raises(ValueError, match="key=value"):
        parse_task("passkey:lengths")


def test_submit_flags_and_the_client_follow_the_request_model(capsys: pytest.CaptureFixture) -> None:
    from service.client import ServiceClient
    from service.schemas import JobCreate

    assert set(job_flags()) == set(JobCreate.model_fields) - {"checkpoint", "tasks"}
    with pytest.raises(SystemExit):
        main(["submit", "--help"])
    help_text = capsys.readouterr().out
    assert all(f"--{name}" in help_text for name in job_flags())
    assert "{auto,reference,torch,triton}" in help_text  # a Literal field's choices
    with ServiceClient(base_url="http://127.0.0.1:9") as client, pytest.raises(ValueError, match="unknown job fields"):
        client.submit("ck", [{"name": "passkey"}], ropes="yarn:4")  # refused before any request


def test_cli_round_trip(ray_cluster: str, tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="cli-test")
    with ThreadServer(create_app(settings)) as srv:
        url = ["--url", srv.url]
        assert main(["checkpoints", "add", "tiny", str(models / "tiny"), *url]) == 0
        assert main(["checkpoints", "list", *url]) == 0
        assert "tiny" in capsys.readouterr().out
        assert main(["submit", "tiny", "--task", "passkey:lengths=128:trials=2", "--wait", "-q", *url]) == 0
        out = capsys.readouterr().out
        job_id = out.splitlines()[0]
        assert "succeeded" in out
        assert main(["status", job_id, *url]) == 0 and "succeeded" in capsys.readouterr().out
        assert main(["status", "--status", "succeeded", *url]) == 0 and job_id in capsys.readouterr().out
        assert main(["results", job_id, *url]) == 0
        assert json.loads(capsys.readouterr().out)["job"] == job_id
        assert main(["results", job_id, "--samples", *url]) == 0
        assert all(json.loads(line) for line in capsys.readouterr().out.splitlines())
        assert main(["submit", "nope", "--task", "passkey", *url]) == 1
        assert "neither a registered name" in capsys.readouterr().err
    assert main(["status", "--url", srv.url]) == 1  # server gone: a message, not a traceback
    assert "cannot reach the lctx API" in capsys.readouterr().err


def test_readme_comparison_loop_shows_every_setting(ray_cluster: str, tmp_path: Path, models: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    """The guide's comparison loop (docs/guide/demo-checkpoints.md) (1x unscaled, then YaRN and NTK at 2x and 4x), scaled
    down to a tiny model: the leaderboard has a row per checkpoint and RoPE setting, the
    per-length columns hold all seven cells, `submit --wait` ends with the scores, and
    `lctx compare` shows per-length differences. `results --samples | head` ends quietly."""
    import re
    import subprocess
    import sys

    import httpx

    from tests.helpers import tiny_checkpoint, wait_job

    tiny_checkpoint(models / "tiny2", seed=3)
    settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="loop-test")
    jobs: dict[tuple[str, str], str] = {}
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as client:
        url = ["--url", srv.url]
        # The scaled jobs queued first (the cluster's two CPUs run two jobs at once), then each
        # checkpoint's unscaled job waited for; the loop's results are the same as one at a time.
        for name in ("tiny", "tiny2"):
            assert main(["checkpoints", "add", name, name, *url]) == 0
            capsys.readouterr()
            for m in (2, 4):
                for r in ("yarn", "ntk"):
                    assert main(["submit", name, "--task", f"passkey:lengths={64 * m}:trials=2", "--rope", f"{r}:{m}",
                                 "-q", *url]) == 0
                    jobs[(name, f"{r}:{m}")] = capsys.readouterr().out.split()[0]
        for name in ("tiny", "tiny2"):
            assert main(["submit", name, "--task", "passkey:lengths=64,128,256:trials=2", "--rope", "none",
                         "--wait", *url]) == 0
            out = capsys.readouterr().out
            assert "accuracy @ length 256" in out  # the score table after the status line
            jobs[(name, "none")] = re.search(r"submitted job (\S+)", out).group(1)
        for job_id in jobs.values():
            assert wait_job(client, job_id, timeout=300)["status"] == "succeeded"
        assert main(["leaderboard", "passkey", "--json", *url]) == 0
        board = json.loads(capsys.readouterr().out)
        settings_seen = {(row["checkpoint"], row["rope"]) for row in board["rows"]}
        assert settings_seen == set(jobs), settings_seen
        cells = {(row["checkpoint"], row["rope"], col) for row in board["rows"]
                 for col, v in row["values"].items() if re.fullmatch(r"accuracy\.length=\d+", col) and v is not None}
        assert len(cells) == 2 * 7  # 1x/2x/4x unscaled, 2x/4x with yarn and ntk, per checkpoint
        assert main(["leaderboard", "passkey", "--rope", "yarn:4", *url]) == 0
        table = capsys.readouterr().out
        assert "rope=yarn:4" in table and "rope=ntk:4" not in table and "tiny2" in table
        a, b = jobs[("tiny", "none")], jobs[("tiny", "yarn:2")]
        assert main(["compare", a, b, "--task", "passkey", "--json", *url]) == 0
        comparison = json.loads(capsys.readouterr().out)
        row = comparison["rows"][1]
        assert comparison["baseline"] == a and row["rope"] == "yarn:2"
        col = "accuracy.length=128"
        assert row["difference"][col] == pytest.approx(row["values"][col] - comparison["rows"][0]["values"][col])
        assert main(["compare", a, b, "--task", "passkey", *url]) == 0 and "difference" in capsys.readouterr().out
        piped = subprocess.run(f"{sys.executable} -m cli.main results {a} --samples --url {srv.url} | head -1",
                               shell=True, capture_output=True, text=True, timeout=60)
        assert json.loads(piped.stdout) and piped.stderr == "", piped.stderr


def test_status_says_when_it_shows_only_some_jobs(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    with ThreadServer(create_app(make_settings(tmp_path))) as srv:  # no executor: the jobs stay queued
        url = ["--url", srv.url]
        assert main(["checkpoints", "add", "tiny", str(models / "tiny"), *url]) == 0
        for seed, rope in enumerate(("yarn:4", "ntk:4", "none")):
            assert main(["submit", "tiny", "--task", f"passkey:lengths=128:trials=2:seed={seed}", "--rope", rope,
                         "-q", *url]) == 0
        capsys.readouterr()
        assert main(["status", "--limit", "2", *url]) == 0
        out = capsys.readouterr().out
        assert out.count("queued") == 2 and "(2 of 3 jobs shown, newest first; --limit N shows more)" in out
        assert "rope: none" in out and "rope: ntk:4" in out and "yarn" not in out  # the newest two, told apart
        assert main(["status", *url]) == 0
        assert "jobs shown" not in capsys.readouterr().out


def test_make_serve_passes_port_and_host_on() -> None:
    import subprocess

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(["make", "-n", "-C", str(root), "serve", "PORT=8124", "HOST=127.0.0.2"], capture_output=True,
                         text=True, check=True).stdout
    assert "lctx serve --host 127.0.0.2 --port 8124" in out
    plain = subprocess.run(["make", "-n", "-C", str(root), "serve"], capture_output=True, text=True, check=True).stdout
    assert "lctx serve" in plain and "--port" not in plain  # LCTX_PORT (default 8000) decides


def test_wait_shows_samples_tokens_speed_and_eta() -> None:
    """What `lctx submit --wait` prints while a job runs: nothing looks hung during a prefill."""
    from types import SimpleNamespace

    from cli.client_commands import progress_line
    from service.schemas import TaskProgress

    def job(status: str, **progress: TaskProgress) -> SimpleNamespace:
        return SimpleNamespace(status=status, progress=progress)

    prefilling = job("running", passkey=TaskProgress(done=0, total=10, tokens=12288, planned_tokens=40000,
                                                     tokens_per_s=410.2, eta_s=67.0),
                     needle=TaskProgress(done=0, total=4, planned_tokens=8000))
    assert progress_line(prefilling) == ("running: passkey 0/10, 12,288/40,000 tokens prefilled (410 tok/s); "
                                         "needle 0/4; ETA: measuring")
    measured = job("running", passkey=TaskProgress(done=3, total=10, tokens=20000, eta_s=3725.0))
    assert progress_line(measured) == "running: passkey 3/10, 20,000 tokens prefilled; ETA 1 h 02 min"
    assert progress_line(job("succeeded", passkey=TaskProgress(done=10, total=10))) == "succeeded: passkey 10/10"


def test_schedules_run_ticks_now_and_says_why_each_checkpoint_was_skipped(tmp_path: Path, models: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    """`lctx schedules run NAME` over POST /v1/schedules/{name}/run (no executor: jobs stay queued)."""
    import httpx

    from tests.helpers import tiny_checkpoint

    settings = make_settings(tmp_path)
    (models / "runs").mkdir()
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        url = ["--url", srv.url]
        suite = {"tasks": [{"name": "passkey", "lengths": [64], "trials": 1}]}
        assert c.post("/v1/schedules", json={"name": "runs", "cron": "0 2 * * *", "watch": ["runs"],
                                             "suite": suite}).status_code == 201
        assert main(["schedules", "run", "runs", *url]) == 0
        out = capsys.readouterr().out
        assert "0 job(s) submitted" in out and "no checkpoint folder" in out and str(models) not in out
        tiny_checkpoint(models / "runs" / "step-100")
        assert main(["schedules", "run", "runs", *url]) == 0
        out = capsys.readouterr().out
        assert "1 job(s) submitted" in out and "step-100: submitted job" in out
        assert ", estimated " in out and "no run measured yet" in out and "cost of this run: about " in out  # #60
        run = c.post("/v1/schedules/runs/run").json()
        assert run["submitted"] == 0 and run["checkpoints"][0]["folder"] == "runs/step-100"
        assert "same fingerprint already run with this suite by this schedule" in run["checkpoints"][0]["skipped"]
        assert c.get("/v1/jobs", params={"schedule": "runs"}).json()["total"] == 1
        assert main(["schedules", "list", *url]) == 0 and "0 2 * * *" in capsys.readouterr().out
        assert main(["schedules", "run", "nope", *url]) == 1
        assert "schedule" in capsys.readouterr().err
        assert c.post("/v1/schedules/nope/run").status_code == 404


def test_submit_dry_run_and_the_answers_plan(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture) -> None:
    """`lctx submit --dry-run` (POST /v1/jobs?dry_run=true) plans without queuing; a submission's
    answer carries the plan; a job over LCTX_MAX_JOB_SECONDS is a 422 saying by how much."""
    import httpx

    settings = make_settings(tmp_path, device="cpu", max_job_seconds=600)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        url = ["--url", srv.url]
        assert main(["checkpoints", "add", "tiny", str(models / "tiny"), *url]) == 0
        capsys.readouterr()
        assert main(["submit", "tiny", "--task", "passkey:lengths=128:trials=2", "--dry-run", *url]) == 0
        out = capsys.readouterr().out
        assert out.startswith("plan (dry run, nothing queued): 2 samples, 256 tokens to prefill")
        assert "no run measured yet: assumed 2,000 prefill tok/s" in out
        assert c.get("/v1/jobs").json()["total"] == 0
        body = {"checkpoint": "tiny", "tasks": [{"name": "passkey", "lengths": [128], "trials": 2}]}
        r = c.post("/v1/jobs", params={"dry_run": "true"}, json=body)
        assert r.status_code == 200 and r.json()["queued"] is False and r.json()["samples"] == 2
        r = c.post("/v1/jobs", json=body)
        assert r.status_code == 202 and r.json()["plan"]["queued"] is True and r.json()["plan"]["prompt_tokens"] == 256
        assert c.get(f"/v1/jobs/{r.json()['id']}").json()["plan"] is None
        huge = {"checkpoint": "tiny", "tasks": [{"name": "passkey", "lengths": [1_048_576], "trials": 5}]}
        r = c.post("/v1/jobs", json=huge)
        assert r.status_code == 422 and "over its limit of 10 min 00 s (LCTX_MAX_JOB_SECONDS)" in r.json()["detail"]
        assert str(tmp_path) not in r.text
        assert main(["submit", "tiny", "--task", "passkey:lengths=1048576:trials=5", "--dry-run", *url]) == 1
        assert "Lower its lengths" in capsys.readouterr().err
        assert c.get("/v1/jobs").json()["total"] == 1
