"""/v1/leaderboard?task=...: the latest results of each checkpoint for one task, side
by side. Columns come from the task's typed result (`evaluators.results`): each metric
by name and each series point as `<series>.<axis>=<key>` (e.g. `accuracy.length=1024`);
`task=<task>/<key>` shows the series points at one key (e.g. `longbench/qasper`: the
score of qasper). Each column says whether higher is better; rows are sorted by the
task's headline metric, best first. Results written before the typed contract are
read through their evaluator's `legacy_result`."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query

from evaluators.results import Metric, TaskResult, task_result
from service.api.deps import Read, SettingsDep, StoreDep
from service.jobs import job_dir
from service.schemas import TASK_PATTERN, Leaderboard, LeaderboardColumn, LeaderboardRow

router = APIRouter(prefix="/v1/leaderboard", tags=["leaderboard"])


def _task_result(results: dict[str, Any], task: str) -> tuple[TaskResult, str | None] | None:
    """`passkey` (the whole result), or `longbench/qasper` (the longbench result at key qasper)."""
    key, select = (task, None) if task in results else task.split("/", 1) if "/" in task else (task, None)
    entry = results.get(key)
    if not isinstance(entry, dict):
        return None
    return task_result(entry), select


def _column_key(name: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p)
                 for p in name.replace("=", ".").split("."))


@router.get("", dependencies=Read, response_model=Leaderboard)
def leaderboard(task: Annotated[str, Query(pattern=TASK_PATTERN, examples=["passkey"])],
                store: StoreDep, settings: SettingsDep) -> Leaderboard:
    rows: list[LeaderboardRow] = []
    columns: dict[str, LeaderboardColumn] = {}
    headline: str | None = None
    seen: set[str] = set()
    for job in store.latest_succeeded(task):
        if job.checkpoint in seen:
            continue
        try:
            results = json.loads((job_dir(settings, job.id) / "results.json").read_text())["results"]
            found = _task_result(results, task)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # results removed from disk or unreadable: the next older job of this checkpoint answers
        if found is None:
            continue
        result, select = found
        values = result.columns(select)
        if not values:
            continue
        seen.add(job.checkpoint)
        for name, (_, source) in values.items():
            columns.setdefault(name, LeaderboardColumn(
                name=name, higher_is_better=source.higher_is_better, unit=source.unit,
                kind="metric" if isinstance(source, Metric) else "point"))
        if headline is None:
            top = result.metric(result.headline)
            headline = top.name if select is None else next(
                (c for c in values if c == top.name or c.startswith(f"{top.name}.")), None)
        rows.append(LeaderboardRow(checkpoint=job.checkpoint, fingerprint=job.fingerprint, job=job.id,
                                   finished_at=job.finished_at, values={c: v for c, (v, _) in values.items()}))
    names = sorted(columns, key=lambda c: (columns[c].kind != "metric", _column_key(c)))
    for r in rows:
        r.values = {c: r.values.get(c) for c in names}
    better = columns[headline].higher_is_better if headline in columns else None
    if better is not None:
        rows.sort(key=lambda r: (r.values[headline] is None, -(r.values[headline] or 0) if better
                                 else (r.values[headline] or 0)))
    return Leaderboard(task=task, columns=names, headline=headline if better is not None else None,
                       column_info=[columns[c] for c in names], rows=rows)
