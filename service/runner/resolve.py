"""A job's row resolved into what its workers are given (service/runner/spec.py): the
coordinator reads the store and the settings here, so that workers never do."""

from __future__ import annotations

import json
from typing import Any

from evaluators.registry import parse_task
from service.core.settings import Settings
from service.runner.spec import JobSpec, JudgeSpec, WorkerConfig
from service.store import JobRow, Store
from service.submission import endpoint_spec, registered_judge


def worker_config(settings: Settings) -> WorkerConfig:
    """The settings a worker needs, and nothing else (no database URL, no token, no results folder)."""
    return WorkerConfig(device=settings.device, roots=tuple(settings.roots), data_dir=settings.data_dir,
                        endpoint_hosts=tuple(settings.endpoint_host_list), home=settings.home.absolute(),
                        triton_cache=settings.triton_cache_dir, engine=settings.engine_options())


def model_key(job: JobRow, settings: Settings) -> tuple:
    """What a loaded model depends on: a worker holding the model of this key can take the
    job without loading anything (the same weights, RoPE setting, backend and device)."""
    if job.endpoint:
        return ("endpoint", job.endpoint)
    rope = json.dumps(job.rope, sort_keys=True) if isinstance(job.rope, dict) else job.rope
    return ("checkpoint", job.checkpoint_path, job.fingerprint, rope, job.backend, settings.device)


def job_spec(store: Store, settings: Settings, job: JobRow, finished: frozenset[str] = frozenset()) -> JobSpec:
    """The job as its workers need it: the served model's registration checked against today's
    allow-list, each judge its tasks name resolved (InvalidRequest when one is no longer
    registered), `finished` the task keys an earlier attempt finished (the coordinator read them)."""
    endpoint, source, checkpoint = None, {}, None
    if job.endpoint:
        row = store.get_endpoint(job.endpoint)
        endpoint = endpoint_spec(row, settings)
        source = {"endpoint": {"name": row.name, "url": row.base_url, "served_model": row.served_model}}
    else:
        checkpoint = {"name": job.checkpoint, "path": job.checkpoint_path, "fingerprint": job.fingerprint}
        source = {"checkpoint": dict(checkpoint)}
    judges = {}
    for task in job.tasks:
        options = parse_task(task)
        refs = [options.judge_ref() if options.needs_judge else None, *options.graders().values()]
        for ref in refs:
            if ref and ref not in judges:
                judges[ref] = judge_spec(store, settings, ref)
    return JobSpec(id=job.id, attempt=job.attempts, tasks=job.tasks, checkpoint=checkpoint, rope=job.rope,
                   backend=job.backend, endpoint=endpoint, source=source, judges=judges, finished=finished)


def judge_spec(store: Store, settings: Settings, ref: str) -> JudgeSpec:
    """A judge's registration as a worker opens it (service.runner.worker.job_judge)."""
    found = registered_judge(store, ref, "judge")
    row: Any = found.row
    if found.kind == "endpoint":
        return JudgeSpec(ref, "endpoint", row.name, endpoint=endpoint_spec(row, settings),
                         described={"endpoint": row.name, "url": row.base_url, "served_model": row.served_model,
                                    "api_style": row.api_style})
    return JudgeSpec(ref, "checkpoint", row.name, path=row.path, described={"checkpoint": row.name})
