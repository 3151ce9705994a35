"""Results of a run made elsewhere (`lctx eval` on a laptop or a GPU box) recorded as a job of
the service (`lctx upload`, POST /v1/uploads): its results and samples land where a job's do,
its leaderboard rows are stored as a finished job's are, and it is marked as run elsewhere.

What arrives is data, checked before anything is written: the checkpoint must be registered
and have the fingerprint the run recorded (results of other weights are refused); every task
must be one this service knows, with options it accepts; every task entry must read as its
task's result and name the configuration hash its samples were recorded under; the samples
must be JSON objects with ids, each once, of that configuration. Paths the document carries
(the run's own machine) are dropped: the service writes its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.errors import EvaluatorError
from evaluators.registry import task_result, validate_task
from evaluators.samplelog import SAMPLES_FILE
from evaluators.suite import suite_document, task_keys
from service.core.errors import Conflict, InvalidRequest
from service.core.layout import job_results, task_dir, task_result_path
from service.core.settings import Settings
from service.core.status import UPLOADED
from service.schemas import UploadCreate
from service.standings import rows_of
from service.store import JobRow, Store
from service.store.jobs import new_job_id

HOWTO = "upload the folder `lctx eval --out OUT` wrote, as it is: `lctx upload OUT --checkpoint NAME`"


def _time(document: dict[str, Any], key: str) -> datetime:
    """A document's time as the store keeps times (UTC, no zone)."""
    try:
        t = datetime.fromisoformat(str(document.get(key)))
    except ValueError:
        raise InvalidRequest(f"results.json: {key} is not an ISO 8601 time; {HOWTO}") from None
    return (t.astimezone(UTC) if t.tzinfo else t).replace(tzinfo=None)


def _samples(key: str, text: str, config: str) -> tuple[list[dict[str, Any]], str]:
    """The task's records, checked: JSON objects with an id, each id once, of `config`; the text
    written back is the records as read (one per line)."""
    records, seen = [], set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise InvalidRequest(f"samples of {key}, line {lineno}: not JSON; {HOWTO}") from None
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise InvalidRequest(f"samples of {key}, line {lineno}: a record is a JSON object with an `id`; {HOWTO}")
        if record.get("config") != config:
            raise InvalidRequest(f"samples of {key}, line {lineno}: recorded under configuration "
                                 f"{str(record.get('config'))[:12]}, the task's result under {config[:12]}: the "
                                 "folder mixes runs; upload a folder of one run")
        if record["id"] in seen:
            raise InvalidRequest(f"samples of {key}: sample {record['id']!r} is recorded twice; {HOWTO}")
        seen.add(record["id"])
        records.append(record)
    return records, "".join(json.dumps(r) + "\n" for r in records)


def _entries(body: UploadCreate) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], dict[str, str]]:
    """The tasks (validated as a job's), each key's entry and its samples file text."""
    document = body.results
    tasks, results = document.get("tasks"), document.get("results")
    if not isinstance(tasks, list) or not tasks or not isinstance(results, dict):
        raise InvalidRequest(f"results.json has no tasks and results; {HOWTO}")
    try:
        specs = [validate_task(t) if isinstance(t, dict) else {} for t in tasks]
    except EvaluatorError as e:
        raise InvalidRequest(f"results.json: {e}") from None
    keys = task_keys(specs)
    if set(keys) != set(results):
        raise InvalidRequest(f"results.json: its results {sorted(results)} are not its tasks {keys} (a run that "
                             "did not finish: rerun it to the end, then upload)")
    if set(body.samples) != set(keys):
        raise InvalidRequest(f"samples are needed for every task, {keys}; got {sorted(body.samples)}; {HOWTO}")
    entries, files = {}, {}
    for key in keys:
        entry = results[key]
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), str) or entry.get("partial"):
            raise InvalidRequest(f"results.json: {key} is not a finished task's entry; {HOWTO}")
        try:
            task_result(entry)
        except (EvaluatorError, ValueError, KeyError, TypeError) as e:
            raise InvalidRequest(f"results.json: {key} does not read as a {key} result ({e})") from None
        records, files[key] = _samples(key, body.samples[key], entry["config"])
        if isinstance(entry.get("samples"), int) and entry["samples"] != len(records):
            raise InvalidRequest(f"{key}: the result counts {entry['samples']} samples, the samples file holds "
                                 f"{len(records)}; {HOWTO}")
        entries[key] = {k: v for k, v in entry.items() if k not in ("samples_file", "plots")}
    return specs, entries, files


def record_upload(store: Store, settings: Settings, body: UploadCreate) -> JobRow:
    """The run recorded as a succeeded job of `body.checkpoint`, its files written first (a job
    row never points at files that are not there)."""
    checkpoint = store.get_checkpoint(body.checkpoint)
    if checkpoint.fingerprint != body.fingerprint:
        raise Conflict(f"these results were made on weights of fingerprint {body.fingerprint[:12]}, the registered "
                       f"checkpoint {body.checkpoint} is {checkpoint.fingerprint[:12]}: register the checkpoint the "
                       "run evaluated (or upload to that one)")
    specs, entries, files = _entries(body)
    document = body.results
    request = document.get("request") if isinstance(document.get("request"), dict) else {}
    rope = body.rope if body.rope is not None else request.get("rope")
    backend = request.get("backend") or "auto"
    started, finished = _time(document, "started_at"), _time(document, "finished_at")
    fields = {"checkpoint": checkpoint.name, "checkpoint_path": checkpoint.path, "fingerprint": checkpoint.fingerprint,
              "tasks": specs, "rope": rope, "backend": backend, "priority": 0}
    progress = {key: {"done": entry.get("samples", 0), "total": entry.get("samples", 0)}
                for key, entry in entries.items()}
    job_id = new_job_id()
    for key in entries:  # the files first, under the id the row will take
        folder = task_dir(settings, job_id, key)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SAMPLES_FILE).write_text(files[key], encoding="utf-8")
        entries[key] = {**entries[key], "samples_file": str(folder / SAMPLES_FILE), "plots": []}
        write_json_atomic(task_result_path(settings, job_id, key), entries[key])
    model = document.get("model") if isinstance(document.get("model"), dict) else {}
    write_json_atomic(job_results(settings, job_id), {
        **suite_document(model, specs, entries, started.replace(tzinfo=UTC).isoformat(), job=job_id,
                         checkpoint={"name": checkpoint.name, "path": checkpoint.path,
                                     "fingerprint": checkpoint.fingerprint}, plots=[], attempts=1),
        "finished_at": finished.replace(tzinfo=UTC).isoformat(), "ran_elsewhere": True})
    return store.add_finished_job(started, finished, UPLOADED, progress, rows_of(settings, entries),
                                  job_id=job_id, **fields)
