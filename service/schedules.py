"""Cron schedules: the nightly evaluation. On each tick, every due schedule scans its
watch folders for checkpoint directories, registers new ones, and submits its suite
once per (checkpoint fingerprint, suite). The tick itself is claimed with a
conditional update and each submission is guarded by a unique constraint, so a
restarted scheduler or two replicas never double-submit. A deployment can have its
nightly schedule made from the environment (LCTX_NIGHTLY_*) at start-up."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter
from pydantic import ValidationError

from service.core.errors import Conflict, InvalidRequest, ServiceError
from service.core.paths import confine
from service.core.settings import Settings
from service.cost import check_cost, checkpoint_facts, plan_job
from service.notify import check_webhook
from service.schemas import Alerts, ScheduleCreate, Suite
from service.store import JobRow, ScheduleRow, Store, now
from service.submission import (
    ResolvedCheckpoint,
    check_judges,
    check_model_memory,
    checkpoint_info,
    data_warnings,
    job_fields,
    suite_hash,
    validate_suite,
)

log = logging.getLogger("lctx.schedules")


def next_run(cron: str, after: datetime) -> datetime:
    """The next time after `after`; a cron of other than five fields (croniter also takes a
    sixth, seconds, field: a schedule firing every second) is refused."""
    fields = cron.split()
    if len(fields) != 5:
        raise InvalidRequest(f"cron {cron!r} has {len(fields)} fields; use five (minute hour day month weekday), "
                             "e.g. '0 2 * * *' for 02:00 every night")
    try:
        return croniter(cron, after).get_next(datetime)
    except (CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, ValueError, KeyError) as e:
        raise InvalidRequest(f"cron {cron!r} is not a valid cron expression ({e}); "
                             "use five fields, e.g. '0 2 * * *' for 02:00 every night") from e


def create_schedule(store: Store, settings: Settings, request: ScheduleCreate,
                    cluster_gpus: int | None = None) -> ScheduleRow:
    """Its suite passes what a job's does (`validate_suite`: the same function, the backend
    against the cluster's GPUs included); what depends on a checkpoint is checked again for
    each one found, when its job is made."""
    watch = [str(confine(w, settings.roots, "watch folder")) for w in request.watch]
    for w in watch:
        if not Path(w).is_dir():
            raise InvalidRequest(f"watch folder {w} does not exist; create it or fix the path")
    for i, w in enumerate(watch):  # one folder given twice ("runs", "runs/", its absolute path, a link to it)
        if w in watch[:i]:
            first = request.watch[watch.index(w)]
            raise InvalidRequest(f"watch[{i}] {request.watch[i]!r} is the folder watch[{watch.index(w)}] {first!r} "
                                 "names already; give each folder once")
    tasks = validate_suite(request.suite, settings, cluster_gpus)
    check_judges(store, settings, tasks)  # each job's again
    check_cost(plan_job(list(request.suite.tasks), settings, None, cluster_gpus), settings)  # each job's, at the speed known
    alerts = None
    if request.alerts is not None:
        check_alerts(store, settings, request.alerts)
        alerts = request.alerts.model_dump(mode="json")
    t = now()
    return store.add_schedule(ScheduleRow(
        name=request.name, cron=request.cron, watch=watch, suite=request.suite.model_dump(mode="json", exclude_none=True),
        suite_hash=suite_hash(request.suite), next_run_at=next_run(request.cron, t), created_at=t, alerts=alerts))


def check_alerts(store: Store, settings: Settings, alerts: Alerts) -> None:
    """A pinned baseline job exists; each webhook's URL is on the hosts endpoints may be on and
    its secret variable on the endpoint keys' allow-list (as an endpoint's are: the service's
    own token never goes to a registered URL)."""
    if alerts.baseline is not None:
        store.get_job(alerts.baseline)  # Missing (404) names it
    for i, hook in enumerate(alerts.webhooks):
        check_webhook(settings, hook.url, hook.secret_env, f"alerts.webhooks[{i}]")


class ScheduleConfigError(RuntimeError):
    """The schedule of the LCTX_NIGHTLY_* settings cannot be created; start-up stops."""


def ensure_configured_schedule(store: Store, settings: Settings) -> ScheduleRow | None:
    """The schedule of LCTX_NIGHTLY_CRON / _WATCH / _SUITE / _NAME, created if no schedule
    of that name exists (a deployment's nightly run without an API call). An existing one
    is kept as it is: delete it through the API to apply changed settings."""
    if not settings.nightly_cron:
        return None
    name = settings.nightly_name
    existing = store.find_schedule(name)
    if existing is not None:
        if existing.cron != settings.nightly_cron or existing.suite_hash != _env_suite_hash(settings):
            log.warning("schedule %r exists and differs from LCTX_NIGHTLY_*; keeping the stored one "
                        "(DELETE /v1/schedules/%s and restart to apply the settings)", name, name)
        return existing
    watch = [str(w) for w in settings.nightly_watch or settings.roots]
    try:
        request = ScheduleCreate(name=name, cron=settings.nightly_cron, watch=watch,
                                 suite=Suite.model_validate(settings.nightly_suite))
        row = create_schedule(store, settings, request)
    except Conflict:  # another replica created it first
        return store.get_schedule(name)
    except (ValidationError, ServiceError) as e:
        raise ScheduleConfigError(f"cannot create the schedule {name!r} from LCTX_NIGHTLY_CRON, LCTX_NIGHTLY_WATCH "
                                  f"and LCTX_NIGHTLY_SUITE: {getattr(e, 'message', e)}") from e
    log.info("created schedule %r from LCTX_NIGHTLY_* (cron %s, watch %s)", name, row.cron, ", ".join(row.watch))
    return row


def _env_suite_hash(settings: Settings) -> str | None:
    try:
        return suite_hash(Suite.model_validate(settings.nightly_suite))
    except ValidationError:
        return None


def checkpoint_dirs(folder: Path) -> list[Path]:
    """The folder itself if it is a checkpoint, else its immediate sub-folders that are."""
    try:
        if (folder / "config.json").is_file():
            return [folder]
        return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "config.json").is_file())
    except OSError as e:  # gone or unreadable since the schedule was made
        log.warning("cannot scan watch folder %s: %s", folder, e)
        return []


class ScheduleTicker:
    """Ticks the cron schedules on a thread of its own: each due schedule's watch folders scanned
    and new checkpoints submitted (named apart from the engine's admission Scheduler)."""

    def __init__(self, settings: Settings, store: Store, on_submit: Callable[[], None] | None = None) -> None:
        self.settings, self.store, self.on_submit = settings, store, on_submit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="lctx-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _main(self) -> None:
        while not self._stop.wait(self.settings.scheduler_interval):
            try:
                self.tick()
            except Exception:
                log.exception("schedule tick failed")

    def tick(self, at: datetime | None = None) -> list[JobRow]:
        """Run every schedule due at `at` (default now); returns the jobs submitted."""
        at = at or now()
        submitted: list[JobRow] = []
        for schedule in self.store.due_schedules(at):
            if not self.store.claim_tick(schedule.name, schedule.next_run_at, next_run(schedule.cron, at), at):
                continue  # another replica took this tick
            submitted += self.run_schedule(schedule)
        if submitted and self.on_submit:
            self.on_submit()
        return submitted

    def run_schedule(self, schedule: ScheduleRow) -> list[JobRow]:
        return [o.job for o in self.scan(schedule) if o.job is not None]

    def scan(self, schedule: ScheduleRow) -> list[Outcome]:
        """Every checkpoint folder of the schedule's watch folders, each submitted once per
        fingerprint and suite or skipped with the reason (`lctx schedules run` lists them)."""
        suite = Suite.model_validate(schedule.suite)
        outcomes = []
        for folder in schedule.watch:
            for path in checkpoint_dirs(Path(folder)):
                try:
                    outcome = self._submit_once(schedule, suite, path)
                except (ServiceError, OSError) as e:  # one bad folder must not hide the others
                    log.warning("schedule %s: skipping %s: %s", schedule.name, path, e)
                    outcomes.append(Outcome(path, None, None, getattr(e, "message", None) or str(e)))
                    continue
                if outcome.job is not None:
                    log.info("schedule %s: submitted job %s for %s", schedule.name, outcome.job.id, path)
                    for warning in data_warnings(outcome.job.tasks, self.settings):
                        log.warning("schedule %s: job %s: %s", schedule.name, outcome.job.id, warning)
                outcomes.append(outcome)
        return outcomes

    def run_now(self, name: str) -> list[Outcome]:
        """A schedule ticked now, whatever its cron says (its next run stays as it was): what
        it submitted and why it skipped each other checkpoint it found."""
        outcomes = self.scan(self.store.get_schedule(name))
        if any(o.job is not None for o in outcomes) and self.on_submit:
            self.on_submit()
        return outcomes

    def _submit_once(self, schedule: ScheduleRow, suite: Suite, path: Path) -> Outcome:
        path = confine(str(path), self.settings.roots, "checkpoint path")  # a symlink may point out
        info = checkpoint_info(path, self.settings.roots)
        check_model_memory(info.parameters, info.dtype, self.settings, path.name)  # as registration does
        earlier = self.store.submitted_job(info.fingerprint, schedule.suite_hash)
        if earlier is not None:  # checked first: a checkpoint already evaluated is not registered again
            return Outcome(path, None, earlier.checkpoint, skip_reason(schedule, earlier))
        known = self.store.checkpoint_by_path(str(path))
        if known is None:
            name = path.name if self.store.find_checkpoint(path.name) is None else f"{path.name}-{info.fingerprint[:8]}"
            known = self.store.add_checkpoint(name, str(path), info.fingerprint, info.variant, info.parameters)
        elif known.fingerprint != info.fingerprint:  # retrained in place: a new checkpoint to evaluate
            known = self.store.add_checkpoint(known.name, str(path), info.fingerprint, info.variant, info.parameters)
        tasks = validate_suite(suite, self.settings, checkpoint=path)
        check_judges(self.store, self.settings, tasks)
        cost = plan_job(list(suite.tasks), self.settings, info.fingerprint, model=checkpoint_facts(path))
        check_cost(cost, self.settings)
        resolved = ResolvedCheckpoint(known.name, path, info.fingerprint, info.parameters, info.dtype)
        job = self.store.add_job_once(info.fingerprint, schedule.suite_hash, schedule=schedule.name,
                                      **job_fields(resolved, suite, tasks))
        if job is None:  # another replica submitted it between the check and the insert
            earlier = self.store.submitted_job(info.fingerprint, schedule.suite_hash)
            return Outcome(path, None, known.name, skip_reason(schedule, earlier))
        return Outcome(path, job, known.name, None, cost.seconds, cost.basis)


@dataclass(frozen=True)
class Outcome:
    """One checkpoint folder a schedule's run found: the job it submitted, or why not."""

    folder: Path
    job: JobRow | None
    checkpoint: str | None  # the registered name, where it got that far
    skipped: str | None
    seconds: float | None = None  # the submitted job's estimate (service/cost.py)
    basis: str | None = None  # how it was estimated


def skip_reason(schedule: ScheduleRow, earlier: JobRow | None) -> str:
    """Why a checkpoint with this fingerprint is not submitted again with this suite."""
    if earlier is None:
        return "this fingerprint was already submitted with this suite"
    if earlier.schedule == schedule.name:
        return (f"same fingerprint already run with this suite by this schedule (job {earlier.id}, "
                f"{earlier.status}); a retrained checkpoint (new weights) is submitted again")
    if earlier.schedule:
        return (f"already covered by schedule {earlier.schedule!r} with the same suite (job {earlier.id}, "
                f"{earlier.status})")
    return f"same fingerprint already run with this suite (job {earlier.id}, {earlier.status})"
