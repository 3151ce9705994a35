"""How small a difference a job's samples can resolve (Miller 2024, section 5: more samples,
or paired runs, when a difference must be seen): for each task of a planned job, the half-width
of the 95% interval of the difference between two runs of its samples per length. The spread
per sample is read from the newest earlier job of the checkpoint with the task (its headline's
standard error x sqrt(n)); without one, a 0/1 score's widest, p(1-p) at p = 0.5, stated. Two
independent runs are assumed (variance 2 s^2 / n): a paired comparison of the same samples
resolves less, by how much the runs agree sample by sample. The dry run and the submission's
plan say it (`TaskPlan.resolvable`)."""

from __future__ import annotations

import math
from dataclasses import replace

from evaluators.options import TaskOptions
from evaluators.uncertainty import resolvable_difference
from service.core.settings import Settings
from service.cost import Cost
from service.pairing import load
from service.store import Store


def per_length(spec: TaskOptions) -> int | None:
    """Samples a length (or the whole task, with no lengths) plans; None where the data decides."""
    samples = spec.planned_samples()
    if not samples:
        return None
    lengths = spec.lengths_option()
    return max(1, samples // len(lengths)) if lengths else samples


def spread(store: Store, settings: Settings, fingerprint: str | None, task: str) -> tuple[float, str] | None:
    """(s.d. per sample of the headline, the job it was read from), or None."""
    if fingerprint is None:
        return None
    job_id = store.latest_job_with(fingerprint, task)
    jobs = store.get_jobs([job_id]) if job_id else []
    loaded = load(settings, jobs[0], task) if jobs else None
    if loaded is None:
        return None
    top = loaded.result.metric(loaded.result.headline)
    if top.error is None or top.error.stderr is None or top.n < 2:
        return None
    return top.error.stderr * math.sqrt(top.n), job_id or ""


def with_resolution(cost: Cost, store: Store, settings: Settings, fingerprint: str | None,
                    tasks: list[TaskOptions]) -> Cost:
    """`cost` with each task's smallest resolvable difference and how it was reckoned."""
    out = []
    for spec, task in zip(tasks, cost.tasks, strict=True):
        n = per_length(spec)
        if n is None:
            out.append(replace(task, resolution="its data decides its samples: not known before it is read"))
            continue
        seen = spread(store, settings, fingerprint, spec.task)
        where = "a length" if spec.lengths_option() else "the task"
        if seen is not None:
            sd, job = seen
            half = resolvable_difference(n, variance=sd * sd, paired=False)
            said = (f"{n} samples at {where} resolve a difference of {half:.3g} at 95% between two runs, from the "
                    f"spread job {job} of this checkpoint showed (s.d. {sd:.3g} a sample; paired runs of the same "
                    "samples resolve less)")
        else:
            half = resolvable_difference(n)
            said = (f"{n} samples at {where} resolve a difference of {half:.3g} (as a fraction of samples) at 95% "
                    "between two runs, by p(1-p) at p = 0.5 (no earlier job of this checkpoint; a 0/1 score's "
                    "widest)")
        out.append(replace(task, resolvable=round(half, 6), resolution=said))
    return replace(cost, tasks=out)
