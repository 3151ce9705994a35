"""Runs one job as work units spread over workers: a unit is a contiguous slice of one
task's planned samples; each worker (`service.runner.worker.Worker`: the checkpoint loaded once)
takes the next unit as soon as it is free, so a job of many units keeps every worker of the
cluster busy and a small job stays one unit on one worker.

Units append their records to files of their own in the task's folder (`units/`) and skip
samples any earlier run recorded, so a unit whose worker died runs again elsewhere with only
its unfinished samples, and when a task's units are done one worker folds the files into its
`samples.jsonl` (each sample exactly once), aggregates and saves the task's entry; the last
step writes `results/<job>/results.json` atomically (the same document `lctx eval` writes).

`JobRun` is the coordinator. The service runs it in its dispatcher with Ray actors as workers
(`service.runner.executor`); `run_job` runs it in this process with one in-process worker, the
one-worker run whose results a spread run must equal."""

from __future__ import annotations

import errno
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, NoReturn, Protocol

from checkpoints.errors import CheckpointError
from evaluators.errors import EvaluationCancelled, EvaluatorError
from evaluators.suite import partial_result, task_keys
from service.errors import ServiceError
from service.layout import job_dir, task_dir, task_result
from service.paths import client_error
from service.runner.progress import JobProgress, Plan, ProgressFeed, plan_of, unit_notes
from service.settings import Settings
from service.status import FAILED, QUEUED, RUNNING, SUCCEEDED
from service.store import JobRow, Store
from service.runner.worker import JobRunning, Unit, Worker

log = logging.getLogger("lctx.jobs")

PROGRESS_EVERY_S = 0.5
POLL_S = 0.25
# Errors that are the job's, not the worker's: they fail the job with their message.
JOB_ERRORS = (EvaluatorError, CheckpointError, ServiceError, ValueError)


def plan_units(tasks: dict[str, dict[str, Any]], unit_samples: int | None, workers: int,
               unit_tokens: int = 131_072, plans: dict[str, Plan] | None = None) -> list[Unit]:
    """The job's work units: a task its options plan n samples for splits into slices of about
    `unit_tokens` tokens of work each (its planned prompt and generated tokens: a few seconds
    of a worker's time, so what each unit costs around its samples stays small beside them,
    however cheap or dear a sample is), or of `unit_samples` samples when that is set; one
    whose data decides its samples into one slice per worker; a sequential search (each
    block decides the next) stays one unit. `plans`: the tasks' plans where already read
    (`JobProgress.plans`)."""
    units: list[Unit] = []
    for key, task in tasks.items():
        plan = (plans or {}).get(key) or plan_of(task)
        samples, work = plan.samples, plan.work_tokens
        if plan.sequential:
            count = 1
        elif samples:
            count = math.ceil(samples / unit_samples) if unit_samples else math.ceil((work or 0) / unit_tokens)
            count = min(max(1, count), samples)
        else:
            count = max(1, workers)
        units += [Unit(key, task, i, count) for i in range(count)]
    return units


class Handle(Protocol):
    """A worker as the coordinator sees it: calls return futures; a worker that died makes
    its future raise one of `JobRun.died`."""

    def call(self, method: str, *args: Any) -> Future: ...

    def kill(self) -> None: ...


class LocalHandle:
    """A `Worker` in this process, called from one thread."""

    def __init__(self, settings: Settings, job_id: str) -> None:
        self.worker = Worker(settings, job_id)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix=f"lctx-worker-{job_id}")

    def call(self, method: str, *args: Any) -> Future:
        return self.pool.submit(getattr(self.worker, method), *args)

    def kill(self) -> None:
        """Nothing to kill in-process: the worker stops at its next check of the job's status."""
        self.pool.shutdown(wait=True)
        self.worker.close()


class Ended(Exception):
    """The run ends here with the job in `status` (finished, failed, cancelled or requeued)."""

    def __init__(self, status: str) -> None:
        self.status = status


def cause_of(error: BaseException) -> BaseException:
    """The exception a worker raised (Ray wraps it in a RayTaskError carrying it as `cause`)."""
    return getattr(error, "cause", None) or error


class UnitQueue:
    """The job's work still to hand out: units waiting to run (one whose worker died goes
    first), how many times each has been handed out, the units of each task still to finish,
    and the tasks whose units are all done, waiting for a worker to finish them."""

    def __init__(self, units: list[Unit], keys: Iterable[str]) -> None:
        self.pending = deque(units)
        self.attempts: dict[Unit, int] = {}
        self.remaining = {k: {u.index for u in units if u.key == k} for k in keys}
        self.finishing: deque[str] = deque()

    def __len__(self) -> int:
        """Units waiting to run."""
        return len(self.pending)

    def has_work(self) -> bool:
        return bool(self.finishing or self.pending)

    def take(self) -> Unit:
        unit = self.pending.popleft()
        self.attempts.setdefault(unit, 1)
        return unit

    def take_task(self) -> str | None:
        """A task to finish (before any unit: its results come sooner), if one waits."""
        return self.finishing.popleft() if self.finishing else None

    def put_back(self, unit: Unit) -> None:
        """A unit whose worker died runs next."""
        self.pending.appendleft(unit)

    def died_in(self, unit: Unit) -> int:
        """The unit's worker died: the number of the run it goes on to."""
        self.attempts[unit] = self.attempts.get(unit, 1) + 1
        return self.attempts[unit]

    def unit_done(self, unit: Unit) -> None:
        self.remaining[unit.key].discard(unit.index)
        if not self.remaining[unit.key]:
            self.finishing.append(unit.key)

    def finish_again(self, key: str) -> None:
        """A task whose finishing worker died is finished next."""
        self.finishing.appendleft(key)


@dataclass(frozen=True, eq=False)
class Call:
    """A call in flight on a worker: `method` of `service.runner.worker.Worker`."""

    method: ClassVar[str]
    handle: Handle


@dataclass(frozen=True, eq=False)
class Load(Call):
    """Binds the worker to the job (a warm one loads nothing)."""

    method = "load"


@dataclass(frozen=True, eq=False)
class RunUnit(Call):
    method = "run_unit"
    unit: Unit


@dataclass(frozen=True, eq=False)
class FinishTask(Call):
    method = "finish_task"
    key: str


@dataclass(frozen=True, eq=False)
class FinishJob(Call):
    """Writes results.json."""

    method = "finish_job"


class JobRun:
    """Coordinates one claimed (running) job: plans its units, keeps up to `workers` workers
    busy, re-runs a unit whose worker died on a fresh worker (up to `max_attempts` runs of
    that unit), finishes each task once its units are done, reports progress from the task
    folders, stops on a cancel or `stop()`."""

    def __init__(self, settings: Settings, store: Store, job: JobRow, spawn: Callable[[], Handle], workers: int,
                 died: tuple[type[BaseException], ...] = (),
                 release: Callable[[Handle, dict[str, Any]], None] | None = None,
                 for_memory: Callable[[BaseException], bool] = lambda error: False) -> None:
        self.settings, self.store, self.job, self.spawn, self.died = settings, store, job, spawn, died
        # `for_memory(error)`: whether a worker's death looks like the out-of-memory killer's; its
        # unit then runs again with half the decoding batch (service/execution.killed_for_memory)
        self.for_memory = for_memory
        self.batches: dict[tuple[str, int], list[int]] = {}  # a unit -> the decoding batches it was killed at
        # `release(handle, load_info)`: a healthy worker this job no longer needs, kept warm for the
        # next job of its model (service/runner/warm.py); without it, such a worker is killed.
        self.release = release
        self.loaded_info: dict[Handle, dict[str, Any]] = {}  # a worker -> what its `load` returned
        self.workers = max(1, workers)
        self.status: str | None = None
        self.units = 0  # units planned by this run (tasks an earlier attempt finished have none)
        self.unit_runs = 0  # units started by this run, re-runs included
        self.reruns: list[str] = []  # the units that ran again after their worker died, with why
        self.planned: list[Unit] = []  # the units this run planned
        self.ran: list[Unit] = []  # the units this run started, in the order each first started
        self.warm = 0  # workers that came with the job's model already loaded (service/runner/warm.py)
        self._stop = threading.Event()
        self.job_running = JobRunning(store, job.id)
        self.handles: list[Handle] = []
        keys = task_keys(job.tasks)
        self.tasks = dict(zip(keys, job.tasks, strict=True))
        self.progress = JobProgress(lambda state: store.set_progress(job.id, state), self.tasks, job.progress,
                                    PROGRESS_EVERY_S)
        self.feed = ProgressFeed(self.progress, {k: task_dir(settings, job.id, k) for k in keys})
        self.totals: dict[str, int] = {}
        self.clock = time.monotonic()  # the run's start: its work tokens per second go to the cost record
        # the run's state, set by `_plan` and the handlers
        self.started = ""  # when the job first started (ISO)
        self.entries: dict[str, Any] = {}  # a finished task -> its entry of results.json
        self.queue = UnitQueue([], ())
        self.busy: dict[Future, Call] = {}
        self.idle: list[Handle] = []
        self.ahead: dict[Handle, Unit] = {}  # a worker -> the unit queued behind the one it runs
        self.dead: set[Handle] = set()  # workers whose death was handled (their other call fails too)
        self.deaths = 0

    def stop(self) -> None:
        """The service is stopping: the job goes back to the queue and its workers are killed."""
        self._stop.set()

    # -- the run ---------------------------------------------------------------------

    def run(self) -> str:
        """Run to the end; returns the status the job ended in. Evaluator and checkpoint errors
        fail the job with their message; nothing escapes."""
        job = self.job
        job_dir(self.settings, job.id).mkdir(parents=True, exist_ok=True)
        try:
            self._run()
        except Ended as e:
            self.status = e.status
        except Exception as e:  # a bug must fail its job, not the dispatcher
            log.exception("job %s failed with an unexpected error", job.id)
            self.status = self._fail(f"unexpected error: {type(e).__name__}: {e}")
        finally:
            for handle in self.handles:  # idle once a job has succeeded; mid-unit otherwise
                if self.status == SUCCEEDED:
                    self._let_go(handle)
                    continue
                try:
                    handle.kill()
                except Exception:
                    log.exception("job %s: could not kill a worker", job.id)
            self._final_progress()  # a cancel's or requeue's last state (ignored by the store if the job ended)
        return self.status

    def _let_go(self, handle: Handle) -> None:
        """An idle, healthy worker this job no longer needs: kept warm when there is a pool
        and it loaded, killed otherwise (freeing its GPU for other jobs)."""
        info = self.loaded_info.pop(handle, None)
        try:
            if self.release is not None and info is not None:
                self.release(handle, info)
            else:
                handle.kill()
        except Exception:  # already gone
            log.warning("job %s: could not let an idle worker go", self.job.id, exc_info=True)

    def _run(self) -> NoReturn:
        """Wait for a finished call, hand it to its handler, hand out work; until a handler or
        a stop raises `Ended`."""
        self._plan()
        for _ in range(min(self.workers, max(1, len(self.queue)))):
            self._start(self.spawn())
        while True:
            if self._stop.is_set():
                self.store.requeue(self.job.id, error=None)
                raise Ended(QUEUED)
            if not self.job_running():  # cancelled, or taken back by another replica
                raise Ended(self.job_running.status)
            for future in self._finished():
                self._dispatch(self.busy.pop(future), future)
            self._hand_out()

    def _plan(self) -> None:
        """Tasks an earlier attempt finished are kept; the others' units are queued."""
        job = self.job
        self.started = (job.started_at.replace(tzinfo=UTC) if job.started_at else datetime.now(UTC)).isoformat()
        for key in self.tasks:
            done = task_result(self.settings, job.id, key)
            if done.is_file():
                self.entries[key] = json.loads(done.read_text())
        left = {k: t for k, t in self.tasks.items() if k not in self.entries}
        units = plan_units(left, self.settings.unit_samples, self.workers, self.settings.unit_tokens,
                           self.progress.plans)
        self.units, self.planned = len(units), units
        self.queue = UnitQueue(units, left)

    def _finished(self) -> set[Future]:
        """The calls that finished within a poll (progress read meanwhile)."""
        if self.busy:
            ready, _ = wait(list(self.busy), timeout=POLL_S, return_when=FIRST_COMPLETED)
        else:
            ready = set()
            time.sleep(POLL_S)
        self.feed.refresh(self.totals)
        return ready

    def _call(self, call: Call, *args: Any) -> None:
        self.busy[call.handle.call(call.method, *args)] = call

    def _start(self, handle: Handle) -> None:
        self.handles.append(handle)
        self._call(Load(handle), self.job.id)  # a warm worker binds without loading

    def _run_unit(self, handle: Handle) -> Unit:
        unit = self.queue.take()
        self.unit_runs += 1
        if unit not in self.ran:
            self.ran.append(unit)
        self._call(RunUnit(handle, unit), unit, self._batch_cap(unit))
        return unit

    # -- the handlers ----------------------------------------------------------------

    def _dispatch(self, call: Call, future: Future) -> None:
        handle = call.handle
        if isinstance(call, RunUnit) and self.ahead.get(handle) is call.unit:
            del self.ahead[handle]  # the unit queued behind has finished (it ran after the other)
        try:
            value = future.result()
        except self.died as e:
            self.on_worker_died(call, e)
            return
        except Exception as e:
            raise Ended(self._ended_by(cause_of(e))) from e
        match call:
            case Load():
                self.on_loaded(handle, value)
            case RunUnit(unit=unit):
                self.on_unit_done(unit, value)
            case FinishTask(key=key):
                self.on_task_done(key, value)
            case FinishJob():
                self.on_job_done()
        if handle not in self.ahead and handle not in self.dead:  # one with a unit queued runs that now
            self.idle.append(handle)

    def on_loaded(self, handle: Handle, info: dict[str, Any]) -> None:
        self.loaded_info[handle] = info
        self.warm += bool(info.get("warm"))

    def on_unit_done(self, unit: Unit, value: dict[str, Any]) -> None:
        self.totals[unit.key] = max(self.totals.get(unit.key, 0), int(value["total"]))
        self.queue.unit_done(unit)

    def on_task_done(self, key: str, entry: dict[str, Any]) -> None:
        self.entries[key] = entry

    def on_job_done(self) -> NoReturn:
        if self.reruns:
            log.info("job %s: %d unit(s) ran again after their worker died: %s", self.job.id,
                     len(self.reruns), "; ".join(self.reruns))
        finished = self._finish(SUCCEEDED)
        if finished:
            self._record_speed()
        raise Ended(SUCCEEDED if finished else self.store.get_job(self.job.id).status)

    def _record_speed(self) -> None:
        """This run's work tokens per second (the tasks' planned prompt and generated tokens over
        its seconds, loading included: what a job costs here), for the next submissions' estimates
        (`service/cost.py`). Only a run that did the whole job from the start is measured."""
        from service.cost import record_throughput

        if any(int(p.get("done", 0)) for p in (self.job.progress or {}).values()):
            return  # resumed: part of the work was done before this run
        plans = self.progress.plans.values()
        if any(p.work_tokens is None or p.sequential for p in plans):
            return  # a task whose work is not known before its data (or a search that stops early)
        try:
            record_throughput(self.settings, self.job.fingerprint, sum(p.work_tokens or 0 for p in plans),
                              time.monotonic() - self.clock)
        except OSError as e:  # the estimate is a convenience: the job succeeded all the same
            log.warning("job %s: cannot record its speed: %s", self.job.id, e)

    def on_worker_died(self, call: Call, error: BaseException) -> None:
        """A fresh worker takes the dead one's place and its work: a unit runs again (up to
        `max_attempts` runs, at half the decoding batch when memory is suspected), a task is
        finished again, results.json is written by the next idle worker. The job fails once
        its workers have died more than `max_attempts` times each."""
        handle = call.handle
        if handle in self.dead:  # its other call: the unit queued behind runs again too
            if isinstance(call, RunUnit):
                self.queue.put_back(call.unit)
            return
        self.dead.add(handle)
        if handle in self.idle:  # its unit queued behind finished before its death was heard of
            self.idle.remove(handle)
        batch = self._batch_cap(call.unit) if isinstance(call, RunUnit) else None
        batch = batch or (self.loaded_info.get(handle) or {}).get("max_batch")
        self._forget(handle)
        try:
            handle.kill()  # "unavailable" may come back: it must not linger holding a GPU
        except Exception:
            pass
        self.deaths += 1
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        if isinstance(call, RunUnit):
            self._run_again(call.unit, error, reason, batch)
        else:
            if isinstance(call, FinishTask):
                self.queue.finish_again(call.key)
            log.warning("job %s: a worker died in %s (%s); a fresh one takes over", self.job.id, call.method, reason)
        if self.deaths > self.workers * self.settings.max_attempts:
            raise Ended(self._fail(f"its workers died {self.deaths} times (last: {reason})")) from error
        self._start(self.spawn())

    def _run_again(self, unit: Unit, error: BaseException, reason: str, batch: int | None) -> None:
        memory = self.for_memory(error) and batch is not None
        if memory:
            self.batches.setdefault((unit.key, unit.index), []).append(batch)
        if self.queue.died_in(unit) > self.settings.max_attempts:
            raise Ended(self._fail(self._kept_dying(unit, reason, memory))) from error
        if memory:
            reason += f" (memory suspected: runs again at decoding batch {self._batch_cap(unit)})"
        self.reruns.append(f"{unit.label}: {reason}")
        log.warning("job %s: the worker of %s died (%s); the unit runs again", self.job.id, unit.label, reason)
        self.queue.put_back(unit)

    # -- handing out work ------------------------------------------------------------

    def _hand_out(self) -> None:
        """Idle workers get a task to finish or a unit; busy ones the next unit queued behind
        theirs; idle workers with nothing left go; results.json once every task is finished."""
        while self.idle and self.queue.has_work():
            handle = self.idle.pop()
            key = self.queue.take_task()
            if key is not None:
                self._call(FinishTask(handle, key), key, self.tasks[key])
            else:
                self._run_unit(handle)
        # The next unit handed out before a worker goes idle: queued behind the one it runs, it
        # starts without a round trip to this coordinator. Not in the last round (no more units
        # than workers left), where a unit queued behind a long one would wait while another
        # worker idles.
        running = [c.handle for c in self.busy.values() if isinstance(c, RunUnit)]
        for handle in running:
            if len(self.queue) <= len(self.handles) or handle in self.ahead or running.count(handle) > 1:
                continue
            self.ahead[handle] = self._run_unit(handle)
        while len(self.idle) > 1 and not self.queue:  # nothing left for them: free their GPUs for other jobs
            extra = self.idle.pop(0)  # the one idle longest (the latest is known to be alive)
            self._forget(extra)
            self._let_go(extra)
        if (len(self.entries) == len(self.tasks) and self.idle
                and not any(isinstance(c, FinishJob) for c in self.busy.values())):
            # on the worker that finished last (one idle since may have died unnoticed); if
            # it dies meanwhile, the next idle worker writes instead
            results = {key: self.entries[key] for key in self.tasks}
            self._sequential_totals(results)
            self._call(FinishJob(self.idle.pop()), results, self.started, self._work())

    def _work(self) -> dict[str, Any]:
        """How the job's work was spread, over all its attempts: this run's workers; the units
        that ran and the unit runs, this run's counted as it handed them out and an earlier
        attempt's (one a kill -9 of the service or a failure ended, then requeued or resumed) read
        from the notes its runs left (`UnitNote`); each run again with why."""
        attempt = self.job.attempts
        earlier: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for key in self.tasks:
            for note in unit_notes(task_dir(self.settings, self.job.id, key)):
                if int(note.get("attempt") or 0) < attempt:
                    earlier.setdefault((key, str(note.get("unit"))), []).append(note)
        reruns = []
        for (key, stem), notes in earlier.items():
            notes.sort(key=lambda n: (int(n.get("attempt") or 0), float(n.get("started") or 0)))
            for before, note in zip(notes, notes[1:], strict=False):
                why = "its worker died" if note.get("attempt") == before.get("attempt") else \
                    "the job was requeued or resumed"
                reruns.append(f"{note.get('label') or f'{key} {stem}'}: ran again in attempt "
                              f"{note.get('attempt') or '?'} ({why})")
        reruns += [f"{u.label}: ran again in attempt {attempt} (the job was requeued or resumed)"
                   for u in self.ran if (u.key, u.stem) in earlier]
        units = set(earlier) | {(u.key, u.stem) for u in self.planned}
        return {"workers": self.workers, "units": len(units),
                "unit_runs": self.unit_runs + sum(len(n) for n in earlier.values()), "reruns": reruns + self.reruns,
                "warm_workers": self.warm}

    def _batch_cap(self, unit: Unit) -> int | None:
        """The decoding batch a unit runs at: half the last one it was killed at for memory
        (None: the worker's own)."""
        killed = self.batches.get((unit.key, unit.index))
        return max(1, killed[-1] // 2) if killed else None

    def _kept_dying(self, unit: Unit, reason: str, memory: bool) -> str:
        n = self.settings.max_attempts
        if not memory:
            return f"{unit.label}: its worker died {n} times (last: {reason})"
        batches = ", ".join(map(str, self.batches[(unit.key, unit.index)]))
        return (f"{unit.label}: its worker was killed {n} times as the out-of-memory killer kills (decoding batches "
                f"{batches}): the worker most likely ran out of memory. Give its node more memory, or lower "
                f"LCTX_ENGINE_MAX_BATCH or LCTX_ENGINE_MEMORY_MB, or shorten the task's lengths (last: {reason})")

    def _forget(self, handle: Handle) -> None:
        if handle in self.handles:
            self.handles.remove(handle)
        self.loaded_info.pop(handle, None)

    def _sequential_totals(self, results: dict[str, Any]) -> None:
        """A finished sequential search needed no more samples than it ran: its total is what it spent."""
        for key, entry in results.items():
            search = (entry.get("result") or {}).get("extra", {}).get("search")
            if search and search.get("finished"):
                self.totals[key] = int(search["samples_spent"])
        self.feed.refresh(self.totals)

    def _final_progress(self) -> None:
        """Written while the job is still running (the store keeps no progress of a finished job)."""
        self.feed.refresh(self.totals)
        self.progress.close()

    def _finish(self, status: str, error: str | None = None) -> bool:
        """The job ends in `status`: its status, error and last progress in one write, before
        anything else tells of the end (the log, results; the store's answer is never behind
        them). False when the job was no longer running."""
        self.feed.refresh(self.totals)
        return self.store.finish(self.job.id, status, error, progress=self.progress.close(write=False))

    def _fail(self, message: str) -> str:
        """The job failed with `message`: the store keeps it as a client may read it (no server
        path, no secret: `client_error`), the server's log whole, once the store says so."""
        failed = self._finish(FAILED, client_error(message, self.settings))
        log.warning("job %s failed: %s", self.job.id, message)
        return FAILED if failed else self.store.get_job(self.job.id).status

    def _ended_by(self, error: BaseException) -> str:
        if isinstance(error, EvaluationCancelled):
            return self.store.get_job(self.job.id).status
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return self._fail(self._no_space(error))
        if isinstance(error, JOB_ERRORS):
            return self._fail(str(error))
        log.error("job %s: a worker raised %s: %s", self.job.id, type(error).__name__, error)
        return self._fail(f"unexpected error: {type(error).__name__}: {error}")

    def _no_space(self, error: OSError) -> str:
        """The disk filled while a worker wrote: which file (relative to the service's home:
        no server path in an answer), and how to go on without losing what was recorded."""
        where = "a file of the job"
        if error.filename:
            path = Path(error.filename)
            home = self.settings.home.absolute()
            where = f"$LCTX_HOME/{path.relative_to(home)}" if path.is_relative_to(home) else path.name
        return (f"no space left on the device while writing {where} ({error.strerror}): free space there, then "
                f"resume the job (POST /v1/jobs/{self.job.id}/resume); the samples it recorded are kept and "
                "not run again")


def run_job(settings: Settings, job_id: str, store: Store | None = None) -> str:
    """Run a claimed (running) job to its end in this process on one worker; returns the
    status it ended in."""
    own_store = store is None
    store = store or Store(settings.database)
    try:
        job = store.get_job(job_id)
        if job.status != RUNNING:
            return job.status
        return JobRun(settings, store, job, lambda: LocalHandle(settings, job_id), workers=1).run()
    finally:
        if own_store:
            store.close()


def partial_results(settings: Settings, job: JobRow) -> dict[str, Any]:
    """The results of a job that failed or was cancelled: each finished task's entry, and
    for the others what their recorded samples add up to (nothing is lost)."""
    results: dict[str, Any] = {}
    for key, task in zip(task_keys(job.tasks), job.tasks, strict=True):
        folder = task_dir(settings, job.id, key)
        done = task_result(settings, job.id, key)
        if done.is_file():
            results[key] = json.loads(done.read_text())
            continue
        try:
            results[key] = partial_result(task, folder)
        except (EvaluatorError, ValueError, OSError) as e:
            results[key] = {"task": task.get("name"), "partial": True, "error": f"cannot aggregate: {e}"}
    return {
        "job": job.id,
        "partial": True,
        "status": job.status,
        "error": job.error,
        "checkpoint": {"name": job.checkpoint, "path": job.checkpoint_path, "fingerprint": job.fingerprint},
        "tasks": job.tasks,
        "results": results,
        "attempts": job.attempts,
    }
