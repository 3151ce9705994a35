"""Error bars in a real browser: the job page gives each value its standard error and 95%
interval and lists the night's regressions; the comparison page gives each difference its
interval, marked where it excludes zero; the leaderboard's cells carry their standard errors and
the nightly curve marks the checkpoint that dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from service import regressions
from service.app import create_app
from service.core.status import SUCCEEDED
from service.store import ScheduleRow, Store, now
from tests.helpers import ThreadServer, make_settings, passkey_run
from tests.service.web.browser import new_page

pytestmark = pytest.mark.integration  # a browser and a server


def test_pages_show_errors_intervals_and_regressions(chromium, tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    watch = settings.roots[0] / "runs"
    watch.mkdir(parents=True)
    nights = [{256: [1.0] * 90 + [0.0] * 10}, {256: [1.0] * 50 + [0.0] * 50}, {256: [1.0] * 88 + [0.0] * 12}]
    with ThreadServer(create_app(settings)) as srv:
        store = Store(settings.database)
        try:
            store.add_schedule(ScheduleRow(name="nightly", cron="0 2 * * *", watch=[str(watch)],
                                           suite={"tasks": [{"name": "passkey"}]}, suite_hash="h",
                                           next_run_at=now(), created_at=now(), alerts={"threshold": 0.05}))
            jobs = []
            for i, scores in enumerate(nights):
                jobs.append(passkey_run(settings, store, scores, checkpoint=f"step{i}",
                                        checkpoint_path=str(watch / f"step{i}"), fingerprint=f"fp{i}",
                                        schedule="nightly"))
                regressions.after_end(settings, store, jobs[-1], SUCCEEDED)
        finally:
            store.close()
        page, console = new_page(chromium, srv.url)
        page.goto(f"/jobs/{jobs[1]}")
        page.locator("#job-results table.metrics-table").wait_for()
        metrics = page.locator("#job-results table.metrics-table").inner_text()
        assert "± s.e. [95%]" in metrics and "± 0.050 [0.402, 0.598]" in metrics  # sqrt(.25/99) = 0.0503
        dropped = page.locator("ul.regressions").inner_text()
        assert "accuracy: 0.900 → 0.500" in dropped and jobs[0] in dropped
        page.goto(f"/compare?task=passkey&jobs={jobs[0]}&jobs={jobs[1]}")
        table = page.locator("table.compare")
        table.wait_for()
        assert "0.900 ± 0.030" in table.inner_text() and " *" in table.inner_text()
        assert "paired: same configuration hash and data" in table.locator("caption").inner_text()
        page.goto("/leaderboard")
        page.locator("ul.regressions").first.wait_for()
        assert "step1 ▼" in page.locator("figure.chart", has_text="Nightly").first.inner_text()
        cell = page.locator("table.board td[title*='standard error']").first
        assert cell.get_attribute("title").startswith("± 0.0")  # a stored value's error, in its cell's title
        assert console.take() == []
