"""`lctx compare` against a real server: values with their standard errors, differences with
their 95% intervals, the ones beyond the noise marked, and how each job was paired."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from service.app import create_app
from service.store import Store
from tests.helpers import ThreadServer, make_settings, passkey_run

pytestmark = pytest.mark.integration  # a server on loopback


def test_compare_prints_errors_and_intervals(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    settings = make_settings(tmp_path)
    with ThreadServer(create_app(settings)) as srv:
        store = Store(settings.database)
        try:
            base = passkey_run(settings, store, {256: [1.0] * 80 + [0.0] * 20})
            worse = passkey_run(settings, store, {256: [1.0] * 50 + [0.0] * 50})
        finally:
            store.close()
        url = ["--url", srv.url]
        assert main(["compare", base, worse, "--task", "passkey", *url]) == 0
        out = capsys.readouterr().out
        assert "0.800 ± 0.040" in out  # sqrt(0.8 * 0.2 / 99) = 0.0402
        assert "-0.300 [" in out and "] *" in out  # 30 trials lost: beyond the noise
        assert f"{worse}: paired: same configuration hash and data" in out
        assert main(["compare", base, worse, "--task", "passkey", "--json", *url]) == 0
        row = json.loads(capsys.readouterr().out)["rows"][1]
        assert row["uncertainty"]["accuracy"]["excludes_zero"] is True
        assert row["error_bars"]["accuracy"]["method"] == "clt"


def test_regressions_lists_the_drops(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from service import regressions
    from service.core.status import SUCCEEDED
    from service.store import ScheduleRow, now

    settings = make_settings(tmp_path)
    with ThreadServer(create_app(settings)) as srv:
        store = Store(settings.database)
        try:
            store.add_schedule(ScheduleRow(name="nightly", cron="0 2 * * *", watch=["/runs"], suite={"tasks": []},
                                           suite_hash="h", next_run_at=now(), created_at=now()))
            jobs = []
            for i, scores in enumerate(([1.0] * 90 + [0.0] * 10, [1.0] * 60 + [0.0] * 40)):
                jobs.append(passkey_run(settings, store, {256: scores}, checkpoint=f"step{i}",
                                        checkpoint_path=f"/runs/a/step{i}", fingerprint=f"fp{i}", schedule="nightly"))
                regressions.after_end(settings, store, jobs[-1], SUCCEEDED)
        finally:
            store.close()
        url = ["--url", srv.url]
        assert main(["regressions", "--schedule", "nightly", *url]) == 0
        out = capsys.readouterr().out
        assert "step1" in out and "0.900" in out and "0.600" in out and f"previous {jobs[0]}" in out
        assert main(["regressions", "--schedule", "other", *url]) == 0
        assert "no regressions found" in capsys.readouterr().out
