"""Leaderboard rows and comparisons by setting. A row is one (checkpoint, RoPE setting,
backend, score-changing task options, data revision) with the results of its latest succeeded
job: a checkpoint evaluated unscaled, with YaRN x2 and with NTK x4 is three rows, not the one
that ran last, and so are results on two revisions of a benchmark's files (the entry's
`data.revision`: evaluators.provenance), which do not compare. Options that only select samples
(lengths, trials, limits) are not part of the key: a job with more lengths adds columns to the
same setting."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from evaluators.registry import task_options, task_result
from evaluators.results import Metric, Series, TaskResult
from service.core.layout import job_results
from service.core.settings import Settings
from service.labels import job_rope_label
from service.schemas import LeaderboardColumn
from service.store import JobRow
from service.views import client_task


def task_spec(job: JobRow, task: str) -> dict[str, Any] | None:
    """The job's spec of `task` (`longbench/qasper` names the longbench task)."""
    name = task.split("/", 1)[0].split("#", 1)[0]
    return next((t for t in job.tasks if t.get("name") == name), None)


def scoring_options(spec: dict[str, Any]) -> dict[str, Any]:
    """The options that change scores: all but those that only select samples. Read from the
    stored spec as it is (a job of an older version may not validate any more)."""
    model = task_options().get(spec.get("name", ""))
    skip = {"name", *model.selection(), *model.aliases()} if model else {"name"}
    return {k: v for k, v in spec.items() if k not in skip}


def options_label(spec: dict[str, Any], options: dict[str, Any]) -> str:
    """The scoring options that differ from their defaults, `k=v` (empty: all defaults)."""
    model = task_options().get(spec.get("name", ""))
    fields = model.model_fields if model else {}
    changed = [f"{k}={v}" for k, v in options.items() if k not in fields or fields[k].default != v]
    return " ".join(changed)


@dataclass
class Scored:
    """One job's values for one task, with the setting it ran under."""

    job: JobRow
    rope: str
    backend: str
    options: dict[str, Any]
    setting: str
    result: TaskResult
    values: dict[str, tuple[float | None, Any]]
    context: dict[str, Any] | None = None  # the entry's trained context and the lengths run beyond it
    thinking: str | None = None  # the task's thinking setting (None: a task without one)
    data: str | None = None  # the entry's data revision (None: it read no file, or ran before they were recorded)
    errors: dict[str, float | None] = field(default_factory=dict)  # each column's standard error (None: none)

    @property
    def key(self) -> tuple[str, str, str, str, str | None]:
        return (self.job.fingerprint, self.rope, self.backend, json.dumps(self.options, sort_keys=True, default=str),
                self.data)


def _task_result(results: dict[str, Any], task: str) -> tuple[TaskResult, str | None, dict[str, Any]] | None:
    """`passkey` (the whole result), or `longbench/qasper` (the longbench result at key qasper),
    with the task's entry."""
    key, select = (task, None) if task in results else task.split("/", 1) if "/" in task else (task, None)
    entry = results.get(key)
    if not isinstance(entry, dict):
        return None
    return task_result(entry), select, entry


def scored(settings: Settings, job: JobRow, task: str) -> Scored | None:
    """The job's values for `task` read from its results.json, or None (results gone, unreadable
    or without the task)."""
    try:
        results = json.loads(job_results(settings, job.id).read_text())["results"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return scored_in(settings, job, task, results)


def scored_in(settings: Settings, job: JobRow, task: str, results: dict[str, Any]) -> Scored | None:
    """The job's values for `task` in its results (the `results` of its document), or None
    (unreadable, or without the task)."""
    try:
        found = _task_result(results, task)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    spec = task_spec(job, task)
    if found is None or spec is None:
        return None
    spec = client_task(spec, settings)  # its file options as a client gives them, not the server's paths
    result, select, entry = found
    values = result.columns(select)
    if not values:
        return None
    rope = job_rope_label(job.rope, job.endpoint)
    options = scoring_options(spec)
    thinking = options.get("thinking") if "thinking" in options else None
    shown = {k: v for k, v in options.items() if k != "thinking"}
    data = data_revision(entry)
    setting = " ".join(p for p in (f"rope={rope}", f"backend={job.backend}",
                                   f"thinking={thinking}" if thinking not in (None, "default") else "",
                                   options_label(spec, shown), f"data={data}" if data else "") if p)
    context = entry.get("context") if isinstance(entry.get("context"), dict) else None
    errors = {name: item.error.stderr if item.error is not None else None
              for name, (item, _, _) in result.column_items(select).items()}
    return Scored(job, rope, job.backend, options, setting, result, values, context, thinking, data, errors)


def data_revision(entry: dict[str, Any]) -> str | None:
    """The revision of the data a task entry ran on (12 hex digits), None where it names none."""
    data = entry.get("data")
    revision = data.get("revision") if isinstance(data, dict) else None
    return revision if isinstance(revision, str) else None


def column_info(entries: list[Scored]) -> dict[str, LeaderboardColumn]:
    """Each column's meaning, computed here so the pages need not parse names: a metric, or
    a point `<series>.<axis>=<key>` with its series, axis and key."""
    columns: dict[str, LeaderboardColumn] = {}
    for e in entries:
        for name, (_, source) in e.values.items():
            if name in columns:
                continue
            point: dict[str, str] = {}
            if isinstance(source, Series) and f".{source.axis}=" in name:
                series_label, _, key = name.rpartition(f".{source.axis}=")
                point = {"series": series_label, "axis": source.axis, "key": key}
            columns[name] = LeaderboardColumn(name=name, higher_is_better=source.higher_is_better, unit=source.unit,
                                              kind="metric" if isinstance(source, Metric) else "point", **point)
    return columns


def column_order(columns: dict[str, LeaderboardColumn]) -> list[str]:
    """Metrics first, then series points in numeric order of their keys (length=512 before 1024)."""
    def key(name: str) -> tuple:
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.replace("=", ".").split("."))

    return sorted(columns, key=lambda c: (columns[c].kind != "metric", key(c)))


def headline_column(entry: Scored, task: str) -> str | None:
    top = entry.result.metric(entry.result.headline)
    if "/" not in task:
        return top.name
    return next((c for c in entry.values if c == top.name or c.startswith(f"{top.name}.")), None)
