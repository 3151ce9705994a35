"""Whether a difference between two jobs is real: each column's difference with its 95%
interval, paired over the samples both jobs ran (Miller 2024, section 4: one question's
difficulty cancels in its difference) where they ran the same samples, unpaired (the two
errors combined) where they did not, and said so (evaluators/uncertainty.compare_columns).

Two jobs ran the same samples of a task when their entries agree on the task's version, the
options that change scores (selection options such as lengths only pick which of the same
samples run) and the data revision; samples are then matched by id in each job's sample log.
The values' own errors are read from the entries (results.json), the per-sample scores from
the task folders' `samples.jsonl`: what `/v1/compare`, `lctx compare`, the dashboard's
comparison page and the nightly regressions (service/regressions.py) read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from evaluators.registry import task_result
from evaluators.results import ErrorBar, TaskResult
from evaluators.samplelog import SampleLog
from evaluators.uncertainty import ErrorRule, compare_columns
from service.comparison import data_revision, scoring_options, task_spec
from service.core.layout import job_results, task_dir
from service.core.settings import Settings
from service.store import JobRow


@dataclass
class Loaded:
    """One job's task view as the comparisons read it: its typed result (values with errors), the
    entry, the point key it selects (`longbench/qasper`), and its scored records (read on demand)."""

    job: JobRow
    key: str
    select: str | None
    entry: dict[str, Any]
    result: TaskResult
    _records: list[dict[str, Any]] | None = field(default=None, repr=False)

    def records(self, settings: Settings) -> list[dict[str, Any]]:
        if self._records is None:
            folder = task_dir(settings, self.job.id, self.key)
            task, config = self.entry.get("task"), self.entry.get("config")
            done = SampleLog(folder).done(task, config) if isinstance(task, str) and isinstance(config, str) else {}
            self._records = [dict(r) for r in done.values() if "error" not in r]
        return self._records

    def errors(self) -> dict[str, ErrorBar | None]:
        return {name: item.error for name, (item, _, _) in self.result.column_items(self.select).items()}


def load(settings: Settings, job: JobRow, view: str) -> Loaded | None:
    """The job's view `view` from its results.json (None: gone, unreadable, or without it)."""
    try:
        results = json.loads(job_results(settings, job.id).read_text())["results"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(results, dict):
        return None
    key, select = (view, None) if view in results else view.split("/", 1) if "/" in view else (view, None)
    entry = results.get(key)
    if not isinstance(entry, dict):
        return None
    try:
        result = task_result(entry)
    except Exception:  # an entry of a layout no reader knows: nothing to compare
        return None
    return Loaded(job, key, select, entry, result)


def same_samples(a: Loaded, b: Loaded) -> str | None:
    """Why two jobs' samples of a task are the same ones (None: they may differ)."""
    if a.entry.get("task") != b.entry.get("task") or a.entry.get("evaluator_version") != b.entry.get(
            "evaluator_version"):
        return None
    if data_revision(a.entry) != data_revision(b.entry):
        return None
    spec_a, spec_b = task_spec(a.job, a.key), task_spec(b.job, b.key)
    if spec_a is None or spec_b is None or scoring_options(spec_a) != scoring_options(spec_b):
        return None
    if a.entry.get("config") == b.entry.get("config"):
        return "same configuration hash and data"
    return "same task version, scoring options and data; another model setting"


def differences(settings: Settings, base: Loaded, other: Loaded) -> tuple[dict[str, dict[str, Any]], str]:
    """Each column's difference (other - base) with its interval, and how the two were paired."""
    why = same_samples(base, other)
    rule = ErrorRule.from_dict(base.entry.get("errors"))
    if rule is None and why is not None:
        why_text = f"{why}, but no error rule recorded (results from before errors): unpaired"
        return compare_columns(base.result, [], other.result, [], None, None, base.select), why_text
    if why is None:
        return (compare_columns(base.result, [], other.result, [], rule, None, base.select),
                "unpaired: the jobs did not run the same samples (task version, scoring options or data differ)")
    return (compare_columns(base.result, base.records(settings), other.result, other.records(settings), rule, why,
                            base.select), f"paired: {why}")
