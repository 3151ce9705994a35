"""A worker only computes: it is built from `WorkerConfig` (no database URL, no token, no
results folder), imports no store and no settings, and hands everything it makes back to
its coordinator (records and notes as mail, a finished task's entry and plot files)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

from pydantic import SecretStr

from service.runner.mail import Mailroom
from service.runner.progress import unit_notes
from service.runner.resolve import worker_config
from service.runner.spec import JobSpec
from service.runner.units import Unit
from service.runner.worker import Worker
from tests.helpers import make_settings, tiny_checkpoint

ROOT = Path(__file__).resolve().parents[3]


def test_a_worker_module_loads_no_store_no_settings_and_no_database_driver() -> None:
    code = ("import sys, service.runner.worker; "
            "print(sorted(m for m in ('sqlalchemy', 'service.store', 'service.core.settings', 'ray', 'torch') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_what_a_worker_is_given_carries_no_secret_and_no_results_path(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, database_url="postgresql://lctx:hunter2@db.internal/lctx",
                             api_token=SecretStr("s3cret-token"))
    given = pickle.dumps(worker_config(settings))
    for secret in (b"hunter2", b"db.internal", b"s3cret-token", str(settings.results).encode()):
        assert secret not in given, secret


def test_a_unit_run_answers_with_its_records_and_note_and_the_coordinator_writes_them(tmp_path: Path) -> None:
    """The worker's home gets no results; the mail, delivered, gives the unit file and note a
    task folder holds, and a second run of the slice handed those records skips them all."""
    settings = make_settings(tmp_path)
    path = tiny_checkpoint(settings.roots[0] / "tiny")
    task = {"name": "passkey", "lengths": [128], "trials": 3, "seed": 1}
    spec = JobSpec(id="j1", attempt=1, tasks=[task], checkpoint={"name": "tiny", "path": str(path),
                                                                 "fingerprint": "f" * 64}, rope=None, backend="auto")
    worker = Worker(worker_config(settings))
    info = worker.load(spec, ("k",))
    assert info.warm is False and info.model["device"] == "cpu" and info.model_bytes > 0
    unit = Unit("passkey", task)
    answer = worker.run_unit(unit, [])
    assert answer.total == answer.done == 3
    folder = tmp_path / "coordinator" / "passkey"
    Mailroom(lambda key: tmp_path / "coordinator" / key).deliver(answer.mail)
    [records] = [f for f in (folder / "units").glob("*.jsonl")]
    lines = records.read_text().splitlines()
    [note] = unit_notes(folder)
    assert len(lines) == 3 and note["samples"] == 3 and note["resumed"] == 0 and note["unit"] == unit.stem
    assert not (settings.home / "results").exists() or not any((settings.home / "results").iterdir())
    import json

    again = worker.run_unit(unit, [json.loads(x) for x in lines])
    assert again.done == 3 and not again.mail.records  # nothing ran twice
    finished = worker.finish_task("passkey", task, [json.loads(x) for x in lines], None)
    assert finished.entry["samples"] == 3 and finished.plots
    assert all(v[:4] == b"\x89PNG" for v in finished.plots.values())
    assert not (settings.home / "scratch" / "j1" / "passkey").exists()  # its scratch folder is gone
