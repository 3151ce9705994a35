"""What clients see of stored rows and results: paths relative to the configured roots
(a client has no business knowing the server's directory layout, and a relative path
is what it would pass back: checkpoint paths are taken relative to the first root)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from checkpoints.config_reader import load_config
from checkpoints.errors import CheckpointError
from checkpoints.tokenizer import read_chat_template
from clients.pull import read_source
from evaluators.registry import task_options
from service.core.paths import client_error, client_path, client_text
from service.core.settings import Settings
from service.core.status import UPLOADED
from service.schemas import CheckpointOut, EndpointOut, JobOut, JobState, ScheduleOut
from service.store import CheckpointRow, EndpointRow, JobRow, ScheduleRow


def client_task(task: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """A task's options with its file options (resolved at submission) shown relative."""
    model = task_options().get(task.get("name", ""))
    if model is None:
        return task
    out = dict(task)
    for key in model.file_options():
        if isinstance(out.get(key), str):
            out[key] = client_path(out[key], settings)
    return out


def job_out(row: JobRow, settings: Settings) -> JobOut:
    """The job's stored request and its state, with server paths made relative."""
    state = {name: getattr(row, name) for name in JobState.model_fields
             if name not in ("warnings", "plan", "ran_elsewhere", "disk")}  # the submission's own answers
    state["ran_elsewhere"] = row.owner == UPLOADED
    job = JobOut.model_validate({**row.request, **state})
    where = job.checkpoint_path if row.endpoint else client_path(job.checkpoint_path, settings)  # an endpoint's URL
    return job.model_copy(update={"checkpoint_path": where,
                                  "tasks": [client_task(t, settings) for t in job.tasks],
                                  "error": client_error(job.error, settings) if job.error else job.error})


def endpoint_out(row: EndpointRow, settings: Settings) -> EndpointOut:
    """The registration, its tokenizer folder relative to the checkpoint root holding it."""
    out = EndpointOut.model_validate(row)
    return out.model_copy(update={"tokenizer": client_path(out.tokenizer, settings) if out.tokenizer else None})


def checkpoint_out(row: CheckpointRow, settings: Settings) -> CheckpointOut:
    """The row, with family, RoPE and context read from its config.json now (a config
    gone or unreadable since registration leaves them None rather than failing a list)."""
    out = CheckpointOut.model_validate(row)
    update: dict[str, Any] = {"path": client_path(out.path, settings)}
    try:
        config = load_config(row.path)
        update.update(family=config.source_format, context_length=config.max_position_embeddings,
                      rope={"rope_theta": config.rope_theta, **config.rope_scaling.to_dict()})
    except (CheckpointError, OSError, ValueError, TypeError, KeyError):
        pass
    try:
        update.update(chat_template=read_chat_template(row.path)[1], source=read_source(Path(row.path)))
    except (CheckpointError, OSError, UnicodeDecodeError):
        pass
    return out.model_copy(update=update)


def schedule_out(row: ScheduleRow, settings: Settings) -> ScheduleOut:
    out = ScheduleOut.model_validate(row)
    suite = dict(out.suite)
    suite["tasks"] = [client_task(t, settings) for t in suite.get("tasks", [])]
    alerts = out.alerts
    if alerts and alerts.get("webhooks"):  # a webhook URL may carry its receiver's token (Slack's do): its host only
        alerts = {**alerts, "webhooks": [{**h, "url": webhook_shown(h.get("url", ""))} for h in alerts["webhooks"]]}
    return out.model_copy(update={"watch": [client_path(w, settings) for w in out.watch], "suite": suite,
                                  "alerts": alerts})


def webhook_shown(url: str) -> str:
    """`https://hooks.slack.com/…`: a webhook's scheme and host, its path (often its secret) left out."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/…" if parts.scheme and parts.netloc else "…"


def client_results(results: dict[str, Any], settings: Settings, job_dir: Path) -> dict[str, Any]:
    """A results.json body with server paths made relative (the job folder's files to it),
    its errors as `client_error` gives them, and no server path left in any other text."""
    out = dict(results)
    if isinstance(out.get("checkpoint"), dict) and "path" in out["checkpoint"]:
        out["checkpoint"] = {**out["checkpoint"], "path": client_path(out["checkpoint"]["path"], settings)}
    if isinstance(out.get("model"), dict):  # a served model's tokenizer folder, a local model's path
        out["model"] = {k: client_path(v, settings) if k in ("path", "tokenizer") and isinstance(v, str) else v
                        for k, v in out["model"].items()}
    out["tasks"] = [client_task(t, settings) for t in out.get("tasks", [])]
    entries = {}
    for key, entry in (out.get("results") or {}).items():
        entry = dict(entry)
        if isinstance(entry.get("samples_file"), str):
            entry["samples_file"] = client_path(entry["samples_file"], settings, job_dir)
        if isinstance(entry.get("plots"), list):
            entry["plots"] = [client_path(p, settings, job_dir) for p in entry["plots"]]
        if isinstance(entry.get("options"), dict):
            entry["options"] = client_task({"name": entry.get("task", ""), **entry["options"]}, settings)
            entry["options"].pop("name", None)
        if isinstance(entry.get("error"), str):
            entry["error"] = client_error(entry["error"], settings)
        entries[key] = entry
    out["results"] = entries
    if isinstance(out.get("error"), str):  # a failed job's
        out["error"] = client_error(out["error"], settings)
    return _client_strings(out, settings)


def _client_strings(value: Any, settings: Settings) -> Any:
    """`value` with every string in it through `client_text` (a summary, a note, a message an
    evaluator wrote: whatever names a server path names it as a client path)."""
    if isinstance(value, str):
        return client_text(value, settings) if "/" in value else value
    if isinstance(value, dict):
        return {k: _client_strings(v, settings) for k, v in value.items()}
    if isinstance(value, list):
        return [_client_strings(v, settings) for v in value]
    return value
