"""Nightly regressions: when a scheduled job succeeds, each task of it is compared with the
lineage's previous checkpoint under the same setting (the stored row before it with the same
lineage key: checkpoint folder, RoPE, backend, scoring options, data) and with the schedule's
pinned baseline where set. A watched column (the task's headline and its points along length)
that dropped, with a paired 95% interval excluding zero (service/pairing.py) and by at least
the schedule's threshold, is a regression: stored once (`regressions`), listed by
`GET /v1/regressions` and `lctx regressions`, shown on the job page and the nightly curve,
and sent to the schedule's webhooks (service/notify.py).

`job_ended` is the coordinator's call at a job's end: it runs all of this on a thread of its
own, so the job's end never waits for a comparison or a webhook."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from service import notify
from service.core.layout import job_results
from service.core.settings import Settings
from service.core.status import FAILED, SUCCEEDED
from service.pairing import Loaded, differences, load
from service.standings import lineage
from service.store import JobRow, RegressionRow, Store, now

log = logging.getLogger("lctx.regressions")


def watched(loaded: Loaded) -> dict[str, bool]:
    """The columns a regression is looked for in, with their direction: the headline metric and
    the points along length of the series named like it (a task's curve)."""
    result = loaded.result
    out: dict[str, bool] = {}
    for name, (_, source, coords) in result.column_items(loaded.select).items():
        better = source.higher_is_better
        if better is None:
            continue
        if name == result.headline or (source.name == result.headline and "length" in coords
                                       and len(coords) == 1):
            out[name] = better
    return out


def task_keys(settings: Settings, job: JobRow) -> list[str]:
    """The task keys of the job's results (`passkey`, `ruler`; two of one task: `passkey#1`, ...)."""
    try:
        results = json.loads(job_results(settings, job.id).read_text())["results"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [k for k, v in results.items() if isinstance(v, dict)] if isinstance(results, dict) else []


def drops(settings: Settings, base: Loaded, new: Loaded, threshold: float) -> list[tuple[str, dict[str, Any]]]:
    """The watched columns of `new` that dropped from `base` beyond the noise (a paired interval
    that excludes zero) and by at least `threshold`."""
    found, _ = differences(settings, base, new)
    out = []
    for column, better in watched(new).items():
        d = found.get(column)
        if not d or not d.get("paired") or d.get("low") is None:
            continue
        worse = d["high"] < 0 if better else d["low"] > 0
        if worse and abs(d["difference"]) >= threshold:
            out.append((column, d))
    return out


def check(settings: Settings, store: Store, job: JobRow, alerts: dict[str, Any] | None) -> list[RegressionRow]:
    """The job's regressions against the lineage's previous run and the pinned baseline, stored
    (a check run twice stores them once); returns those new to the store."""
    alerts = alerts or {}
    threshold = float(alerts.get("threshold") or 0.0)
    rows: list[RegressionRow] = []
    for key in task_keys(settings, job):
        new = load(settings, job, key)
        if new is None:
            continue
        against = [("previous", store.previous_in_lineage(job.id, key))]
        if alerts.get("baseline"):
            against.append(("pinned", alerts["baseline"]))
        for kind, base_id in against:
            if not base_id or base_id == job.id:
                continue
            base_job = next(iter(store.get_jobs([base_id])), None)
            base = load(settings, base_job, key) if base_job is not None else None
            if base is None:
                continue
            values = {c: item.value for c, (item, _, _) in new.result.column_items(new.select).items()}
            olds = {c: item.value for c, (item, _, _) in base.result.column_items(base.select).items()}
            for column, d in drops(settings, base, new, threshold):
                rows.append(RegressionRow(
                    job_id=job.id, baseline_job_id=base_id, against=kind, schedule=job.schedule,
                    lineage=lineage(settings, job), checkpoint=job.checkpoint, task=key, column=column,
                    value=values[column], baseline_value=olds[column], difference=d["difference"], low=d["low"],
                    high=d["high"], paired=True, threshold=threshold, created_at=now()))
    return store.add_regressions(rows) if rows else []


def after_end(settings: Settings, store: Store, job_id: str, status: str,
              sender: notify.Notifier | None = None) -> list[RegressionRow]:
    """What follows a job's end: a scheduled job's regressions found and stored, and the webhooks
    that want its end or its regressions told. Errors are logged: the job has ended."""
    try:
        job = store.get_job(job_id)
        schedule = store.find_schedule(job.schedule) if job.schedule else None
        alerts = schedule.alerts if schedule is not None else None
        found = check(settings, store, job, alerts) if status == SUCCEEDED and job.schedule else []
        sender = sender or notify.notifier()
        secrets = settings.secrets()
        for hook in notify.hooks_for(settings, alerts, "finished" if status == SUCCEEDED else "failed"):
            sender.send(hook, notify.clean(notify.job_body(settings, job, status), secrets))
        if found:
            for hook in notify.hooks_for(settings, alerts, "regression"):
                sender.send(hook, notify.clean(notify.regression_body(settings, job, found), secrets))
        return found
    except Exception:
        log.exception("job %s: what follows its end (regressions, webhooks) failed", job_id)
        return []


def job_ended(settings: Settings, store: Store, job_id: str, status: str,
              sender: notify.Notifier | None = None) -> threading.Thread | None:
    """`after_end` on a thread of its own (the coordinator's call: the job never waits for it).
    Returns the thread (tests join it); None for a status that tells nobody (cancelled, requeued)."""
    if status not in (SUCCEEDED, FAILED):
        return None
    thread = threading.Thread(target=after_end, args=(settings, store, job_id, status, sender),
                              name=f"lctx-after-{job_id}", daemon=True)
    thread.start()
    return thread
