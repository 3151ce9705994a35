"""A leaderboard with many series (RULER: a score per sub-task and length, 13 x 4 columns
besides its metrics and averages) stays inside a 1,400-pixel screen in a real browser: the
metrics always show, the column groups that do not fit are folded behind a chooser, and a
group the reader ticks comes back."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from evaluators.registry import validate_task
from evaluators.ruler.evaluator import typed
from evaluators.ruler.options import RulerOptions
from evaluators.ruler.protocol import TASKS
from service.app import create_app
from service.core.status import SUCCEEDED
from service.store import Store
from tests.helpers import ThreadServer, make_settings, store_results
from tests.service.web.browser import new_page

pytestmark = pytest.mark.integration  # a browser and a server

SCREEN = {"width": 1400, "height": 1000}
LENGTHS = [4096, 8192, 16384, 32768]


def test_the_ruler_board_fits_1400_px_and_folded_groups_can_be_shown(chromium, tmp_path: Path,
                                                                    models: Path) -> None:
    settings = make_settings(tmp_path)
    cells = {(t, n): [1.0, 0.5] for t in TASKS for n in LENGTHS}
    result = typed(cells, {}, RulerOptions()).model_dump(mode="json")
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
        fingerprint = c.get("/v1/checkpoints/tiny").json()["fingerprint"]
        store = Store(settings.database)
        try:
            task = validate_task({"name": "ruler", "lengths": LENGTHS})
            job = store.add_job(fingerprint=fingerprint, checkpoint="tiny", checkpoint_path=str(models / "tiny"),
                                tasks=[task], rope=None, backend="auto", priority=0)
            assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
            store_results(settings, store, job.id, {"ruler": {"task": "ruler", "options": task, "result": result}})
        finally:
            store.close()
        page, console = new_page(chromium, srv.url, SCREEN)
        page.goto("/leaderboard")
        board = page.locator("#board-ruler")
        chooser = page.locator("#columns-ruler")
        chooser.wait_for()  # folded once the page measured itself
        wrap = board.locator("xpath=..")
        assert wrap.evaluate("e => e.scrollWidth <= e.clientWidth")
        assert page.evaluate("document.documentElement.scrollWidth") <= SCREEN["width"]
        headers = board.locator("thead tr").nth(0).inner_text()
        assert "metrics" in headers  # the metrics always show
        folded = chooser.locator("input.column-group:not(:checked)")
        assert folded.count() >= 1
        name = folded.first.get_attribute("value")
        assert name not in headers
        chooser.locator("summary").click()
        chooser.locator(f'input[value="{name}"]').click()
        page.locator("#board-ruler thead tr").nth(0).filter(has_text=name).wait_for()
        assert chooser.locator(f'input[value="{name}"]').is_checked() and chooser.get_attribute("open") is not None
        assert console.take() == []
