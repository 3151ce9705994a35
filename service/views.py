"""What clients see of stored rows and results: paths relative to the configured roots
(a client has no business knowing the server's directory layout, and a relative path
is what it would pass back: checkpoint paths are taken relative to the first root)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from checkpoints.config_reader import load_config
from checkpoints.errors import CheckpointError
from checkpoints.tokenizer import read_chat_template
from clients.pull import read_source
from evaluators.registry import task_options
from service.redact import mask
from service.schemas import CheckpointOut, EndpointOut, JobOut, JobState, ScheduleOut
from service.settings import Settings
from service.store import CheckpointRow, EndpointRow, JobRow, ScheduleRow


def client_path(path: str | Path, settings: Settings, base: Path | None = None) -> str:
    """`path` relative to `base`, else the checkpoint root, data dir or results dir holding
    it; a path under none of them is shown by its name only."""
    p = Path(path)
    roots = ([base] if base else []) + settings.roots + ([settings.data_dir.absolute()] if settings.data_dir else []) \
        + [settings.results]
    for root in roots:
        for r in {root, root.resolve()}:
            if p.is_relative_to(r):
                return p.relative_to(r).as_posix() or "."
    return p.name


def client_text(text: str, settings: Settings) -> str:
    """A message with server paths made client paths: a path under a configured root
    becomes relative to it, a root itself is named by the setting that configures it
    (error messages and job errors; clients never see the server's directories)."""
    named = [(r, "LCTX_CHECKPOINT_ROOTS") for r in settings.roots] + [(settings.results, "LCTX_RESULTS_DIR")]
    if settings.data_dir:
        named.append((settings.data_dir.absolute(), "LCTX_DATA_DIR"))
    named.append((settings.home.absolute(), "LCTX_HOME"))
    forms = {(str(f), name) for root, name in named for f in (root, root.resolve()) if str(f) != "/"}
    for root, name in sorted(forms, key=lambda f: -len(f[0])):  # the deepest root first
        text = re.sub(re.escape(root) + r"(/+|(?![\w.-]))", lambda m, n=name: "" if m.group(1) else n, text)
    return text


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
    state = {name: getattr(row, name) for name in JobState.model_fields}
    job = JobOut.model_validate({**row.request, **state})
    where = job.checkpoint_path if row.endpoint else client_path(job.checkpoint_path, settings)  # an endpoint's URL
    return job.model_copy(update={"checkpoint_path": where,
                                  "tasks": [client_task(t, settings) for t in job.tasks],
                                  "error": client_text(mask(job.error, settings.secrets()), settings) if job.error
                                  else job.error})


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
    return out.model_copy(update={"watch": [client_path(w, settings) for w in out.watch], "suite": suite})


def client_results(results: dict[str, Any], settings: Settings, job_dir: Path) -> dict[str, Any]:
    """A results.json body with server paths made relative (the job folder's files to it)."""
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
        entries[key] = entry
    out["results"] = entries
    return out
