"""The job list answers how many jobs of each status all its filters select, not only the
page of items it returns (the dashboard's summary). The router's function on a real store."""

from __future__ import annotations

from pathlib import Path

from service.api.jobs import list_jobs
from service.store import Store
from tests.helpers import make_settings


def test_the_job_list_counts_every_job_not_only_the_page(tmp_path: Path) -> None:
    """The dashboard's summary reads `by_status`: all jobs the filters select, whatever the page."""
    settings = make_settings(tmp_path)
    store = Store(settings.database)
    store.create_all()
    try:
        for _ in range(3):
            store.add_job(fingerprint="fp", checkpoint="tiny", checkpoint_path="/m/tiny",
                          tasks=[{"name": "passkey"}], rope=None, backend="auto", priority=0)
        assert store.claim_next("test") is not None
        page = list_jobs(store, settings, limit=1, offset=0, status=None, checkpoint=None, task=None, schedule=None)
        assert len(page.items) == 1 and page.total == 3 and page.by_status == {"queued": 2, "running": 1}
    finally:
        store.close()
