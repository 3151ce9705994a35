"""Runs one job as work units spread over workers: a unit is a contiguous slice of one
task's planned samples; each worker (`service.runner.worker.Worker`: the checkpoint loaded
once) takes the next unit as soon as it is free, so a job of many units keeps every worker of
the cluster busy and a small job stays one unit on one worker.

`JobRun` is the coordinator, and the only writer: workers send back records and unit notes
(asked for while a unit runs, the rest with the unit's answer), which it appends to the unit
run's own file in the task's folder (`units/`); a unit whose worker died runs again elsewhere
with only the samples none of those files holds. When a task's units are done it folds the
files into `samples.jsonl` (each sample exactly once), hands every record to a worker to
aggregate, and keeps the entry and plots it sends back; at the end it writes
`results/<job>/results.json` atomically (the same document `lctx eval` writes) and the job's
status. Its loop: wait for answers, hand each to its handler, hand out work.

The service runs it in its dispatcher with Ray actors as workers (`service.runner.executor`);
`run_job` runs it in this process with one in-process worker, the one-worker run whose
results a spread run must equal."""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

from checkpoints.errors import CheckpointError
from evaluators.errors import EvaluationCancelled, EvaluatorError
from evaluators.progress import JobProgress
from evaluators.samplelog import SampleLog, merge_units
from evaluators.suite import task_keys
from service import regressions
from service.core.errors import ServiceError
from service.core.layout import job_dir, task_dir, task_result_path
from service.core.paths import client_error
from service.core.settings import Settings
from service.core.status import FAILED, QUEUED, RUNNING, SUCCEEDED
from service.runner.calls import (
    Drain,
    FinishTask,
    Load,
    Loaded,
    RunUnit,
    TaskFinished,
    UnitRan,
    WorkerCall,
    checked_answer,
    checked_call,
)
from service.runner.mail import Mailroom
from service.runner.progress import ProgressFeed, prefix_use, unit_notes
from service.runner.resolve import job_spec, model_key, worker_config
from service.runner.results import keep_task, write_results
from service.runner.spec import JobSpec, WorkerConfig
from service.runner.units import Unit, UnitQueue, plan_units
from service.runner.worker import Worker
from service.standings import rows_of
from service.store import JobRow, Store
from service.submission import claimed_job_refusal

log = logging.getLogger("lctx.jobs")

PROGRESS_EVERY_S = 0.5
POLL_S = 0.25
MAIL_EVERY_S = 0.5  # how often a worker running a unit is asked for its records
STOP_CHECK_EVERY_S = 1.0
# Errors that are the job's, not the worker's: they fail the job with their message.
JOB_ERRORS = (EvaluatorError, CheckpointError, ServiceError, ValueError)


class Handle(Protocol):
    """A worker as the coordinator sees it: each call (`service.runner.calls`) returns a future
    of its answer; a worker that died makes its future raise one of `JobRun.died`."""

    def call(self, call: WorkerCall) -> Future: ...

    def kill(self) -> None: ...


class LocalHandle:
    """A `Worker` in this process: its compute calls on one thread, in order, and its control
    calls (`Drain`) on another, as a Ray actor's concurrency groups run them."""

    def __init__(self, config: WorkerConfig) -> None:
        self.worker = Worker(config)
        self.compute = ThreadPoolExecutor(1, thread_name_prefix="lctx-worker")
        self.control = ThreadPoolExecutor(1, thread_name_prefix="lctx-worker-control")

    def call(self, call: WorkerCall) -> Future:
        pool = self.control if checked_call(call).control else self.compute
        return pool.submit(self.worker.answer, call)

    def kill(self) -> None:
        """Nothing to kill in-process: the running unit stops at its next sample."""
        self.worker.stop()
        self.compute.shutdown(wait=True)
        self.control.shutdown(wait=True)


class JobRunning:
    """Whether a job is still running (not cancelled, not taken back by another replica), read
    from the store at most once every `every_s` seconds and never again once the job has left
    RUNNING (`status` then says where it went)."""

    def __init__(self, store: Store, job_id: str, every_s: float = STOP_CHECK_EVERY_S) -> None:
        self.store, self.job_id, self.every_s = store, job_id, every_s
        self.status: str = RUNNING
        self._read_at = -float("inf")

    def __call__(self) -> bool:
        if self.status == RUNNING and time.monotonic() - self._read_at >= self.every_s:
            self._read_at = time.monotonic()
            self.status = self.store.get_job(self.job_id).status
        return self.status == RUNNING


class Ended(Exception):
    """The run ends here with the job in `status` (finished, failed, cancelled or requeued)."""

    def __init__(self, status: str) -> None:
        self.status = status


def cause_of(error: BaseException) -> BaseException:
    """The exception a worker raised (Ray wraps it in a RayTaskError carrying it as `cause`)."""
    return getattr(error, "cause", None) or error


@dataclass(eq=False)
class WorkerState:
    """One worker as the coordinator knows it: the one place its state lives."""

    handle: Handle
    info: Loaded | None = None  # what its `load` answered; None while it loads
    units: list[Unit] = field(default_factory=list)  # the unit it runs, then the one queued behind it
    task: str | None = None  # the task it finishes
    asking: bool = False  # a `drain` is in flight
    asked_at: float = 0.0
    idle_since: float = 0.0
    dead: bool = False

    @property
    def idle(self) -> bool:
        return self.info is not None and not self.units and self.task is None and not self.dead


@dataclass(frozen=True, eq=False)
class Asked:
    """A call in flight: `call` asked of `worker`."""

    worker: WorkerState
    call: WorkerCall


class JobRun:
    """Coordinates one claimed (running) job: plans its units, keeps up to `workers` workers
    busy, re-runs a unit whose worker died on a fresh worker (up to `max_attempts` runs of
    that unit), finishes each task once its units are done, reports progress from the task
    folders, stops on a cancel or `stop()`."""

    def __init__(self, settings: Settings, store: Store, job: JobRow, spawn: Callable[[], Handle], workers: int,
                 died: tuple[type[BaseException], ...] = (),
                 release: Callable[[Handle, Loaded], None] | None = None,
                 for_memory: Callable[[BaseException], bool] = lambda error: False,
                 cluster_gpus: int | None = None) -> None:
        self.settings, self.store, self.job, self.spawn, self.died = settings, store, job, spawn, died
        # the cluster's GPUs (the executor's Ray): the job is checked against them before it runs,
        # as a submission is once the cluster is known (one queued while it started was not)
        self.cluster_gpus = cluster_gpus
        # `for_memory(error)`: whether a worker's death looks like the out-of-memory killer's; its
        # unit then runs again with half the decoding batch (service/runner/executor.killed_for_memory)
        self.for_memory = for_memory
        self.batches: dict[tuple[str, int], list[int]] = {}  # a unit -> the decoding batches it was killed at
        # `release(handle, load_info)`: a healthy worker this job no longer needs, kept warm for the
        # next job of its model (service/runner/warm.py); without it, such a worker is killed.
        self.release = release
        self.size = max(1, workers)
        self.status: str | None = None
        self.units = 0  # units planned by this run (tasks an earlier attempt finished have none)
        self.unit_runs = 0  # units started by this run, re-runs included
        self.reruns: list[str] = []  # the units that ran again after their worker died, with why
        self.planned: list[Unit] = []  # the units this run planned
        self.ran: list[Unit] = []  # the units this run started, in the order each first started
        self.warm = 0  # workers that came with the job's model already loaded (service/runner/warm.py)
        self.reloaded = 0  # idle workers of the same weights (another RoPE setting) that kept them
        self._stop = threading.Event()
        self.job_running = JobRunning(store, job.id)
        keys = task_keys(job.tasks)
        self.tasks = dict(zip(keys, job.tasks, strict=True))
        self.progress = JobProgress(lambda state: store.set_progress(job.id, state), self.tasks, job.progress,
                                    PROGRESS_EVERY_S)
        self.feed = ProgressFeed(self.progress, {k: task_dir(settings, job.id, k) for k in keys})
        self.mailroom = Mailroom(lambda key: task_dir(settings, job.id, key))
        self.totals: dict[str, int] = {}
        self.clock = time.monotonic()  # the run's start: its work tokens per second go to the cost record
        # the run's state, set by `_plan` and the handlers
        self.spec: JobSpec | None = None
        # the model as it ran: from the last task finished (a served model names itself once it has
        # answered), else from the first worker that loaded
        self.model: dict[str, Any] | None = None
        self.entries: dict[str, Any] = {}  # a finished task -> its entry of results.json
        self.queue = UnitQueue([], ())
        self.workers: list[WorkerState] = []
        self.calls: dict[Future, Asked] = {}
        self.deaths = 0

    @property
    def handles(self) -> list[Handle]:
        return [w.handle for w in self.workers]

    def stop(self) -> None:
        """The service is stopping: the job goes back to the queue and its workers are killed."""
        self._stop.set()

    # -- the run ---------------------------------------------------------------------

    def run(self) -> str:
        """Run to the end; returns the status the job ended in. Evaluator and checkpoint errors
        fail the job with their message; nothing escapes."""
        job_dir(self.settings, self.job.id).mkdir(parents=True, exist_ok=True)
        try:
            self._run()
        except Ended as e:
            self.status = e.status
        except Exception as e:  # the coordinator's own (writing a file, resolving the spec); a bug fails its job
            self.status = self._ended_by(e)
        finally:
            for worker in list(self.workers):  # idle once a job has succeeded; mid-unit otherwise
                if self.status == SUCCEEDED:
                    self._let_go(worker)
                    continue
                try:
                    worker.handle.kill()
                except Exception:
                    log.exception("job %s: could not kill a worker", self.job.id)
            self._final_progress()  # a cancel's or requeue's last state (ignored by the store if the job ended)
        # regressions and webhooks on a thread of their own: the job's end never waits for them
        regressions.job_ended(self.settings, self.store, self.job.id, self.status)
        return self.status

    def _run(self) -> NoReturn:
        """Wait for answers, hand each to its handler, hand out work; until a handler or a stop
        raises `Ended`."""
        self._plan()
        for _ in range(min(self.size, max(1, len(self.queue)))):
            self._start()
        while True:
            if self._stop.is_set():
                self.store.requeue(self.job.id, error=None)
                raise Ended(QUEUED)
            if not self.job_running():  # cancelled, or taken back by another replica
                raise Ended(self.job_running.status)
            for future in self._answered():
                if future in self.calls:  # not one of a worker whose death was handled meanwhile
                    self._dispatch(self.calls.pop(future), future)
            self._hand_out()

    def _plan(self) -> None:
        """The workers' spec; tasks an earlier attempt finished are kept, the others' units queued.
        A job this cluster cannot run (InvalidRequest: `triton` without a GPU, weights over the
        memory allowed at the dtype they load in here) fails now with the reason."""
        if self.cluster_gpus is not None:
            claimed_job_refusal(self.store, self.settings, self.job, self.cluster_gpus)
        for key in self.tasks:
            done = task_result_path(self.settings, self.job.id, key)
            if done.is_file():
                self.entries[key] = json.loads(done.read_text())
        self.spec = job_spec(self.store, self.settings, self.job, finished=frozenset(self.entries))
        left = {k: t for k, t in self.tasks.items() if k not in self.entries}
        units = plan_units(left, self.settings.unit_samples, self.size, self.settings.unit_tokens,
                           self.progress.plans)
        self.units, self.planned = len(units), units
        self.queue = UnitQueue(units, left)

    def _answered(self) -> set[Future]:
        """The calls answered within a poll (workers running units asked for their records
        first; progress read meanwhile)."""
        now = time.monotonic()
        for worker in self.workers:
            if worker.units and not worker.asking and now - worker.asked_at >= MAIL_EVERY_S:
                worker.asking, worker.asked_at = True, now
                self._call(worker, Drain())
        if self.calls:
            ready, _ = wait(list(self.calls), timeout=POLL_S, return_when=FIRST_COMPLETED)
        else:
            ready = set()
            time.sleep(POLL_S)
        self.feed.refresh(self.totals)
        return ready

    def _call(self, worker: WorkerState, call: WorkerCall) -> None:
        self.calls[worker.handle.call(call)] = Asked(worker, call)

    def _start(self) -> None:
        worker = WorkerState(self.spawn())
        self.workers.append(worker)
        # a warm worker binds without loading
        assert self.spec is not None
        self._call(worker, Load(self.spec, model_key(self.job, self.settings)))

    def _run_unit(self, worker: WorkerState) -> None:
        unit = self.queue.take()
        self.unit_runs += 1
        if unit not in self.ran:
            self.ran.append(unit)
        worker.units.append(unit)
        folder = task_dir(self.settings, self.job.id, unit.key)
        records = SampleLog(folder, unit.stem).records()  # the files that can hold the unit's slice
        self._call(worker, RunUnit(unit, records, self._batch_cap(unit)))

    def _finish_task(self, worker: WorkerState, key: str) -> None:
        """Every unit of the task is done: its unit files folded into samples.jsonl (each sample
        once), every record handed to `worker` to aggregate."""
        folder = task_dir(self.settings, self.job.id, key)
        merge_units(folder)
        worker.task = key
        self._call(worker, FinishTask(key, self.tasks[key], SampleLog(folder).records(), prefix_use(folder)))

    # -- the handlers ----------------------------------------------------------------

    def _dispatch(self, asked: Asked, future: Future) -> None:
        worker = asked.worker
        if worker.dead:  # its death was handled: the rest of its answers count for nothing
            return
        try:
            value = checked_answer(asked.call, future.result())
        except self.died as e:
            self.on_worker_died(worker, e)
            return
        except Exception as e:
            raise Ended(self._ended_by(cause_of(e))) from e
        match asked.call:
            case Load():
                loaded: Loaded = value
                worker.info = loaded
                self.model = self.model or loaded.model
                self.warm += loaded.warm
                self.reloaded += loaded.reloaded
            case Drain():
                worker.asking = False
                self.mailroom.deliver(value)
            case RunUnit(unit=unit):
                ran: UnitRan = value
                self.mailroom.deliver(ran.mail)
                worker.units.remove(unit)
                self.on_unit_done(unit, ran)
            case FinishTask(key=key):
                finished: TaskFinished = value
                worker.task = None
                self.entries[key] = keep_task(self.settings, self.job.id, key, finished)
                self.model = finished.model
        if worker.idle:
            worker.idle_since = time.monotonic()

    def on_unit_done(self, unit: Unit, ran: UnitRan) -> None:
        self.totals[unit.key] = max(self.totals.get(unit.key, 0), ran.total)
        self.queue.unit_done(unit)

    def on_job_done(self) -> NoReturn:
        """Every task finished: results.json, then the job's status (nothing tells of the end
        before the store), then the speed this run measured."""
        if self.reruns:
            log.info("job %s: %d unit(s) ran again after their worker died: %s", self.job.id,
                     len(self.reruns), "; ".join(self.reruns))
        results = {key: self.entries[key] for key in self.tasks}
        self._sequential_totals(results)
        assert self.spec is not None and self.model is not None
        write_results(self.settings, self.job, self.model, results, self.spec.source, self._work())
        finished = self._finish(SUCCEEDED, rows=rows_of(self.settings, results))  # the leaderboard's rows with it
        if finished:
            self._record_speed()
        raise Ended(SUCCEEDED if finished else self.store.get_job(self.job.id).status)

    def _record_speed(self) -> None:
        """This run's work (the tokens and, for a checkpoint, the FLOPs its tasks' plan counts,
        as the estimate counts them) over its seconds, loading included: what a job of this model
        costs here, kept for the next estimates of the same model only (`service/cost.py`). Only
        a run that did the whole job from the start is measured."""
        from service.cost import record_job

        if any(int(p.get("done", 0)) for p in (self.job.progress or {}).values()):
            return  # resumed: part of the work was done before this run
        if any(p.sequential for p in self.progress.plans.values()):
            return  # a search that stops early: its plan is not its work
        try:
            served = self.spec.endpoint if self.spec is not None else None
            record_job(self.settings, self.job, time.monotonic() - self.clock, (self.model or {}).get("device"),
                       served.tokenizer if served is not None else None)
        except (OSError, ValueError) as e:  # the estimate is a convenience: the job succeeded all the same
            log.warning("job %s: cannot record its speed: %s", self.job.id, e)

    def on_worker_died(self, worker: WorkerState, error: BaseException) -> None:
        """A fresh worker takes the dead one's place and its work: the unit it ran runs again (up
        to `max_attempts` runs, at half the decoding batch when memory is suspected) before the
        one queued behind it, a task it finished is finished again. The job fails once its
        workers have died more than `max_attempts` times each."""
        worker.dead = True
        for future in [f for f, c in self.calls.items() if c.worker is worker]:
            del self.calls[future]  # its other calls fail too, or never answer
        batch = (self._batch_cap(worker.units[0]) if worker.units else None) or \
            (worker.info.max_batch if worker.info is not None else None)
        self.workers.remove(worker)
        try:
            worker.handle.kill()  # "unavailable" may come back: it must not linger holding a GPU
        except Exception:
            pass
        self.deaths += 1
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        for unit in reversed(worker.units[1:]):
            self.queue.put_back(unit)
        if worker.units:
            self._run_again(worker.units[0], error, reason, batch)
        else:
            if worker.task is not None:
                self.queue.finish_again(worker.task)
            log.warning("job %s: a worker died (%s); a fresh one takes over", self.job.id, reason)
        if self.deaths > self.size * self.settings.max_attempts:
            raise Ended(self._fail(f"its workers died {self.deaths} times (last: {reason})")) from error
        self._start()

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
        idle = sorted((w for w in self.workers if w.idle), key=lambda w: w.idle_since)
        while idle and self.queue.has_work():
            worker = idle.pop()  # the latest idle (the one known to be alive)
            key = self.queue.take_task()
            if key is not None:
                self._finish_task(worker, key)
            else:
                self._run_unit(worker)
        # The next unit handed out before a worker goes idle: queued behind the one it runs, it
        # starts without a round trip to this coordinator. Not in the last round (no more units
        # than workers left), where a unit queued behind a long one would wait while another
        # worker idles.
        for worker in self.workers:
            if len(worker.units) == 1 and len(self.queue) > len(self.workers):
                self._run_unit(worker)
        while len(idle) > 1 and not self.queue:  # nothing left for them: free their GPUs for other jobs
            extra = idle.pop(0)  # the one idle longest
            self.workers.remove(extra)
            self._let_go(extra)
        if len(self.entries) == len(self.tasks) and self.model is not None:
            self.on_job_done()

    def _let_go(self, worker: WorkerState) -> None:
        """An idle, healthy worker this job no longer needs: kept warm when there is a pool
        and it loaded, killed otherwise (freeing its GPU for other jobs)."""
        try:
            if self.release is not None and worker.info is not None:
                self.release(worker.handle, worker.info)
            else:
                worker.handle.kill()
        except Exception:  # already gone
            log.warning("job %s: could not let an idle worker go", self.job.id, exc_info=True)

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
        return {"workers": self.size, "units": len(units),
                "unit_runs": self.unit_runs + sum(len(n) for n in earlier.values()), "reruns": reruns + self.reruns,
                "warm_workers": self.warm, "reloaded_workers": self.reloaded}

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

    def _finish(self, status: str, error: str | None = None,
                rows: Callable[[JobRow], list[Any]] | None = None) -> bool:
        """The job ends in `status`: its status, error, last progress and (succeeded) leaderboard
        rows in one write, before anything else tells of the end (the log, results; the store's
        answer is never behind them). False when the job was no longer running."""
        self.feed.refresh(self.totals)
        return self.store.finish(self.job.id, status, error, progress=self.progress.close(write=False), rows=rows)

    def _fail(self, message: str) -> str:
        """The job failed with `message`: the store keeps it as a client may read it (no server
        path, no secret: `client_error`), the server's log whole, once the store says so."""
        failed = self._finish(FAILED, client_error(message, self.settings))
        log.warning("job %s failed: %s", self.job.id, message)
        return FAILED if failed else self.store.get_job(self.job.id).status

    def _ended_by(self, error: BaseException) -> str:
        """The status a run ends in after `error` (a worker's, or the coordinator's own while it
        wrote): cancelled, failed with the error's message, or failed as unexpected."""
        if isinstance(error, EvaluationCancelled):
            return self.store.get_job(self.job.id).status
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return self._fail(self._no_space(error))
        if isinstance(error, JOB_ERRORS):
            return self._fail(str(error))
        log.error("job %s: unexpected %s: %s", self.job.id, type(error).__name__, error, exc_info=error)
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
        config = worker_config(settings)
        return JobRun(settings, store, job, lambda: LocalHandle(config), workers=1).run()
    finally:
        if own_store:
            store.close()
