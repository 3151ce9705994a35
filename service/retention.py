"""Retention: what a long history keeps. A nightly service writes every sample of every night
into results/<job>/; a year of it is most of its disk. The policy (settings `retention_days`,
`retention_keep`, `retention_keep_marks`) prunes the per-sample records (samples.jsonl, unit
files) and plots of old jobs and keeps what people compare: each job's results.json and task
entries, its leaderboard rows and so its curves. A pruned job's folder holds `pruned.json`
(when, by which policy, the files and bytes freed); the API answers its samples and plots with
410 naming it, never a 500.

Kept whatever the policy: jobs not finished, the newest `retention_keep` jobs of each lineage
(a checkpoint folder's runs, or one served model), and with `retention_keep_marks` each
lineage's first and last job and the best job of each task view and setting (its rank)."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from checkpoints.jsonfiles import write_json_atomic
from evaluators.samplelog import UNITS_DIR
from service.core.errors import Gone, InvalidRequest
from service.core.layout import PLOTS_DIR, job_dir
from service.core.settings import Settings
from service.core.status import FINAL
from service.disk import job_files
from service.store import JobRow, Store
from service.store.models import TaskResultRow

PRUNED_FILE = "pruned.json"  # in a pruned job's folder: what went and when
PRUNED_KINDS = ("samples", "plots")  # of service/disk.py's kinds: what a prune removes


@dataclass
class JobPrune:
    """One job's files the policy removes."""

    job: str
    finished_at: datetime
    files: list[Path] = field(default_factory=list)
    bytes: int = 0


@dataclass
class PrunePlan:
    """What a pass of the policy removes, and what it keeps and why."""

    policy: dict[str, Any]
    jobs: list[JobPrune]
    kept: dict[str, int]  # why -> jobs kept for it

    @property
    def bytes(self) -> int:
        return sum(j.bytes for j in self.jobs)

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "jobs": len(self.jobs), "files": sum(len(j.files) for j in self.jobs),
                "bytes": self.bytes, "kept": self.kept}


def policy_of(settings: Settings) -> dict[str, Any]:
    return {"days": settings.retention_days, "keep": settings.retention_keep, "keep_marks": settings.retention_keep_marks}


def pruned(settings: Settings, job_id: str) -> dict[str, Any] | None:
    """The job's pruning record (None: not pruned)."""
    path = job_dir(settings, job_id) / PRUNED_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def refuse_if_pruned(settings: Settings, job_id: str, what: str) -> None:
    """410 for the samples or plots of a pruned job, saying what is still there."""
    record = pruned(settings, job_id)
    if record is not None:
        raise Gone(f"the {what} of job {job_id} were pruned on {record.get('pruned_at', '?')} by the retention "
                   f"policy ({record.get('policy')}); its results, leaderboard rows and curves are kept "
                   f"(GET /v1/jobs/{job_id}/results)")


def _lineage(job: Any) -> str:
    return f"endpoint:{job.endpoint}" if job.endpoint else str(Path(job.checkpoint_path).parent)


def _prunable_files(folder: Path) -> list[tuple[Path, int]]:
    """Per-sample records and plots under a job's folder, with their bytes, as service/disk.py
    classifies a job's files: its task folders' samples.jsonl, unit files and plots
    (results.json and each task's result.json stay)."""
    return sorted((path, size) for path, kind, _task, size in job_files(folder) if kind in PRUNED_KINDS)


def plan_prune(store: Store, settings: Settings, now: datetime | None = None) -> PrunePlan:
    """The jobs whose samples and plots the policy removes now, and the files; nothing removed."""
    policy = policy_of(settings)
    if settings.retention_days is None and settings.retention_keep is None:
        raise InvalidRequest("no retention policy is set: set LCTX_RETENTION_DAYS (prune jobs older than that) "
                             "and/or LCTX_RETENTION_KEEP (keep the newest N jobs of each lineage)")
    now = now or datetime.now(UTC).replace(tzinfo=None)
    with store.reading() as s:
        jobs = s.execute(select(JobRow.id, JobRow.checkpoint_path, JobRow.endpoint, JobRow.finished_at)
                         .where(JobRow.status.in_([str(x) for x in FINAL]), JobRow.finished_at.is_not(None))
                         .order_by(JobRow.finished_at, JobRow.id)).all()
        ranked = s.execute(select(TaskResultRow.job_id, TaskResultRow.task, TaskResultRow.lineage_key,
                                  TaskResultRow.rank, TaskResultRow.finished_at)
                           .where(TaskResultRow.rank.is_not(None))).all()
    by_lineage: dict[str, list[Any]] = defaultdict(list)
    for job in jobs:  # oldest first
        by_lineage[_lineage(job)].append(job)
    keep: dict[str, str] = {}
    for runs in by_lineage.values():
        if settings.retention_keep:
            for job in runs[-settings.retention_keep:]:
                keep.setdefault(job.id, "newest of its lineage")
        if settings.retention_keep_marks:
            keep.setdefault(runs[0].id, "first of its lineage")
            keep.setdefault(runs[-1].id, "last of its lineage")
    if settings.retention_keep_marks:
        best: dict[tuple[str, str], Any] = {}
        for row in ranked:  # the lowest rank is the best; ties: the newest
            key = (row.task, row.lineage_key)
            if key not in best or (row.rank, -row.finished_at.timestamp()) < (best[key].rank,
                                                                             -best[key].finished_at.timestamp()):
                best[key] = row
        for row in best.values():
            keep.setdefault(row.job_id, "best of a task view")
    cutoff = now - timedelta(days=settings.retention_days) if settings.retention_days is not None else None
    plan: list[JobPrune] = []
    kept: dict[str, int] = defaultdict(int)
    for job in jobs:
        if job.id in keep:
            kept[keep[job.id]] += 1
            continue
        if cutoff is not None and job.finished_at >= cutoff:
            kept["younger than the policy's days"] += 1
            continue
        files = _prunable_files(job_dir(settings, job.id))
        if not files:
            continue  # pruned before, or nothing recorded
        plan.append(JobPrune(job.id, job.finished_at, [f for f, _ in files], sum(size for _, size in files)))
    return PrunePlan(policy, plan, dict(kept))


def apply_prune(settings: Settings, plan: PrunePlan) -> int:
    """Remove the plan's files, job by job, each job's `pruned.json` written first (a pass
    killed half way leaves a job marked, its remaining files removed by the next pass); returns
    the bytes freed."""
    freed = 0
    for job in plan.jobs:
        folder = job_dir(settings, job.job)
        record = pruned(settings, job.job) or {}
        write_json_atomic(folder / PRUNED_FILE, {
            "pruned_at": datetime.now(UTC).isoformat(timespec="seconds"), "policy": plan.policy,
            "bytes": record.get("bytes", 0) + job.bytes, "files": record.get("files", 0) + len(job.files)})
        for path in job.files:
            path.unlink(missing_ok=True)
        for empty in {path.parent for path in job.files if path.parent.name in (UNITS_DIR, PLOTS_DIR)}:
            shutil.rmtree(empty, ignore_errors=True)
        freed += job.bytes
    return freed
