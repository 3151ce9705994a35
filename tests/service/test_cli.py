"""`lctx checkpoints add|list`, `submit`, `status`, `results` against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.client_commands import parse_task
from cli.main import main
from service.app import create_app
from tests.service.helpers import ThreadServer, make_settings


def test_parse_task_options() -> None:
    assert parse_task("passkey:lengths=256,512:trials=10") == {"name": "passkey", "lengths": [256, 512], "trials": 10}
    assert parse_task("longbench:datasets=qasper") == {"name": "longbench", "datasets": ["qasper"]}
    with pytest.raises(ValueError, match="key=value"):
        parse_task("passkey:lengths")


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
