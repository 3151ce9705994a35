"""From a job or schedule request to a validated, queued job row. Shared by the API
and the scheduler so both refuse the same things with the same messages."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoints.config import ModelConfig
from checkpoints.config_reader import load_config
from checkpoints.errors import CheckpointError
from checkpoints.fingerprint import CheckpointInfo, inspect_checkpoint
from checkpoints.rope import parse_rope_override
from evaluators.options import TaskOptions
from evaluators.registry import task_options
from service.errors import InvalidRequest
from service.paths import confine
from service.schemas import JobCreate, Suite
from service.settings import Settings
from service.store import JobRow, Store


def checkpoint_info(path: Path) -> CheckpointInfo:
    """Validate and fingerprint a checkpoint folder; the runtime's refusal becomes a 422
    with its message (config unreadable, weights missing or pickled, not safetensors)."""
    try:
        return inspect_checkpoint(path)
    except CheckpointError as e:
        raise InvalidRequest(str(e)) from e


@dataclass(frozen=True)
class ResolvedCheckpoint:
    name: str
    path: Path
    fingerprint: str


def resolve_checkpoint(store: Store, settings: Settings, ref: str) -> ResolvedCheckpoint:
    """A registered name, or a path inside the checkpoint roots (validated and fingerprinted)."""
    row = store.find_checkpoint(ref)
    if row is not None:
        return ResolvedCheckpoint(row.name, Path(row.path), row.fingerprint)
    if "/" not in ref and not ref.startswith("."):
        names = ", ".join(c.name for c in store.list_checkpoints()[:20]) or "none yet"
        raise InvalidRequest(f"checkpoint {ref!r} is neither a registered name (registered: {names}) nor a path; "
                             "register it with POST /v1/checkpoints or give its directory")
    path = confine(ref, settings.roots, "checkpoint path")
    info = checkpoint_info(path)
    known = store.checkpoint_by_path(str(path))
    return ResolvedCheckpoint(known.name if known else str(path), path, info.fingerprint)


def validate_suite(suite: Suite, checkpoint: Path, settings: Settings,
                   cluster_gpus: int | None = None) -> list[dict[str, Any]]:
    """Each task checked by its evaluator, the RoPE override against the checkpoint."""
    tasks = validate_tasks(suite, settings, cluster_gpus)
    check_rope(suite.rope, load_config(checkpoint) if suite.rope is not None else None)
    return tasks


# A model to check RoPE overrides of a schedule against before any checkpoint is found
# (the numbers and names; each checkpoint found is checked again when its job is made).
_PROBE = dict(hidden_size=64, num_layers=1, num_heads=1, intermediate_size=64, vocab_size=2)


def check_rope(rope: str | dict[str, Any] | None, config: ModelConfig | None = None) -> None:
    """The RoPE override is a known method with finite parameters within their bounds."""
    if rope is None:
        return
    try:
        parse_rope_override(rope, config or ModelConfig(**_PROBE))
    except (CheckpointError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise InvalidRequest(f"rope {rope!r}: {e}") from e


def validate_tasks(suite: Suite, settings: Settings, cluster_gpus: int | None = None) -> list[dict[str, Any]]:
    """Each task with every option (the request schema, built from the evaluators' option
    models, has checked them), within the service's bounds, its data present, file
    options confined; the backend one the cluster can run."""
    check_backend(suite.backend, settings, cluster_gpus)
    tasks, planned = [], 0
    for i, spec in enumerate(suite.tasks):
        where = f"tasks[{i}] ({spec.name})"
        check_bounds(spec, settings, where)
        planned += spec.planned_samples() or 0
        check_data(spec, settings, where)
        tasks.append(spec.options())  # defaults filled in: the job records every option
        confine_files(tasks[-1], settings, f"tasks[{i}]")
    if planned > settings.max_samples_per_job:
        raise InvalidRequest(f"the job plans {planned} samples; this service runs at most {settings.max_samples_per_job} "
                             "per job (LCTX_MAX_SAMPLES_PER_JOB): ask for fewer lengths or trials, or split it into jobs")
    return tasks


def check_bounds(spec: TaskOptions, settings: Settings, where: str) -> None:
    """Every option that counts tokens at most LCTX_MAX_LENGTH: a 10M-token prompt on a
    small model would hold a worker for days, not fail."""
    for name, largest in spec.token_counts().items():
        if largest > settings.max_length:
            raise InvalidRequest(f"{where}.{name}: {largest} tokens is more than this service's limit of "
                                 f"{settings.max_length} (LCTX_MAX_LENGTH); ask for at most {settings.max_length}")


def check_data(spec: TaskOptions, settings: Settings, where: str) -> None:
    """A data-backed task's files are in the data directory, or the job is refused now with
    the paths looked for and where to get them (not failed after its other tasks ran).
    With LCTX_HUB_DATA, tasks the Hugging Face hub serves (LongBench, SCROLLS) may go on."""
    if settings.hub_data and type(spec).hub_data:
        return
    missing = spec.missing_files(settings.data_dir.absolute() if settings.data_dir else None)
    if missing:
        raise InvalidRequest(f"{where}: " + "; ".join(missing))


def check_backend(backend: str, settings: Settings, cluster_gpus: int | None) -> None:
    """`triton` needs a CUDA GPU (or Triton's CPU interpreter, TRITON_INTERPRET=1, which
    tests use): refused on a cluster known to have none, or with LCTX_DEVICE=cpu."""
    if backend != "triton" or os.environ.get("TRITON_INTERPRET") == "1":
        return
    if settings.device == "cpu" or cluster_gpus == 0:
        why = "LCTX_DEVICE=cpu" if settings.device == "cpu" else "the Ray cluster has no GPU"
        raise InvalidRequest(f"backend 'triton' needs a CUDA GPU and {why}; use 'auto' (Triton on GPU, the "
                             "chunked PyTorch path on CPU) or 'torch'")


def confine_files(task: dict[str, Any], settings: Settings, where: str) -> None:
    """Options the task's option model marks as files must lie inside the data dir or the
    checkpoint roots, like checkpoint paths; relative ones are taken relative to the data
    dir. The option is replaced by the resolved path, so the worker reads exactly the file
    that was checked."""
    roots = ([settings.data_dir.absolute()] if settings.data_dir else []) + settings.roots
    for key in task_options()[task["name"]].file_options():
        if isinstance(task.get(key), str):
            task[key] = str(confine(task[key], roots, f"{where}.{key}"))


def job_fields(resolved: ResolvedCheckpoint, suite: Suite, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's row: its checkpoint and its request, every field of the suite as given
    (the request model is the one declaration) with the tasks as validated."""
    request = {**suite.model_dump(mode="json", include=set(Suite.model_fields)), "tasks": tasks}
    return dict(checkpoint=resolved.name, checkpoint_path=str(resolved.path), **request)


def submit(store: Store, settings: Settings, request: JobCreate, cluster_gpus: int | None = None) -> JobRow:
    """Validate and queue; the row is committed when this returns. `cluster_gpus`: what
    the executor's Ray reports (None: not known here)."""
    resolved = resolve_checkpoint(store, settings, request.checkpoint)
    tasks = validate_suite(request, resolved.path, settings, cluster_gpus)
    return store.add_job(fingerprint=resolved.fingerprint, **job_fields(resolved, request, tasks))


def suite_hash(suite: Suite) -> str:
    """Stable identity of a suite: the same tasks and options hash the same."""
    canonical = json.dumps(suite.model_dump(mode="json", exclude_none=True, exclude={"priority"}), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
