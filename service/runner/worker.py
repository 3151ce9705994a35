"""One worker of a job: the checkpoint loaded once (or the served model connected) and
kept for every work unit of the job it is given. The service runs workers as Ray actors
(`service.runner.executor`: one per GPU, or `job_workers` on a cluster without GPUs); `run_job`
runs one in-process. Torch and the evaluators are imported when a worker loads, not with
this module: the dispatcher that creates the actors never needs them."""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.samplelog import merge_units
from evaluators.suite import suite_document
from service.layout import job_results, task_dir, task_plots, task_result
from service.runner.progress import UnitNote, prefix_use
from service.settings import Settings
from service.status import RUNNING
from service.store import JobRow, Store

log = logging.getLogger("lctx.worker")

STOP_CHECK_EVERY_S = 1.0


@dataclass(frozen=True)
class Unit:
    """A work unit: part `index` of `count` contiguous slices of one task's planned samples."""

    key: str  # the task's key in the job (`passkey`, `passkey#2`)
    task: dict[str, Any] = field(compare=False, hash=False)  # the same for every unit of the key
    index: int = 0
    count: int = 1

    @property
    def label(self) -> str:
        return f"{self.key} part {self.index + 1}/{self.count}"

    @property
    def stem(self) -> str:
        """Names this unit's files (`units/<stem>-<run>.jsonl`); the count is in it, so a job
        re-planned with another unit size never mixes two slicings' names."""
        return f"u{self.index:05d}of{self.count:05d}"


def pick_device(setting: str) -> str:
    if setting != "auto":
        return setting
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class JobRunning:
    """Whether a job is still running (not cancelled, not taken back by another replica): the
    one way a run asks, its coordinator between calls and its workers between samples. The
    store is read at most once every `every_s` seconds, and never again once the job has left
    RUNNING (`status` then says where it went)."""

    def __init__(self, store: Store, job_id: str, every_s: float = STOP_CHECK_EVERY_S) -> None:
        self.store, self.job_id, self.every_s = store, job_id, every_s
        self.status: str = RUNNING
        self._read_at = -math.inf

    def __call__(self) -> bool:
        if self.status == RUNNING and time.monotonic() - self._read_at >= self.every_s:
            self._read_at = time.monotonic()
            self.status = self.store.get_job(self.job_id).status
        return self.status == RUNNING


def model_key(job: JobRow, settings: Settings) -> tuple:
    """What a loaded model depends on: a worker holding the model of this key can take the
    job without loading anything (the same weights, RoPE setting, backend and device)."""
    if job.endpoint:
        return ("endpoint", job.endpoint)
    rope = json.dumps(job.rope, sort_keys=True) if isinstance(job.rope, dict) else job.rope
    return ("checkpoint", job.checkpoint_path, job.fingerprint, rope, job.backend, settings.device)


class Worker:
    """Holds a model and runs the units of the job it is bound to, finishes its tasks and
    writes its results. Bound to one job at a time; a warm worker (service/runner/executor.py's
    pool) is bound to the next job of the same model key without loading again."""

    def __init__(self, settings: Settings, job_id: str) -> None:
        self.settings, self.job_id = settings, job_id
        self.store: Store | None = None
        self.key: tuple | None = None  # the model key of what is loaded
        self.loaded: Any = None
        self.engine: Any = None
        self.source: dict[str, Any] = {}
        self.evaluators: dict[str, tuple[Any, list[Any]]] = {}  # task key -> (evaluator, its planned samples)
        # task key -> an evaluator drawing its first samples while the weights load (`_load_checkpoint`),
        # and the draw's future
        self.drawing: dict[str, Any] = {}
        self.drawn: Future | None = None
        self.attempt = 0
        self.judges: dict[str, Any] = {}  # the job's judges by the name its tasks record (`name@identity`)
        self.judgments: Any = None  # the cache of judge answers, shared by the service's jobs

    def load(self, job_id: str | None = None) -> dict[str, Any]:
        """Bind to `job_id` (default the job this worker was made for) and load its checkpoint
        (files confined to the roots again: one may have been swapped for a link since
        submission) or connect its served model, unless this worker holds that model already;
        returns where this worker runs and whether it was warm."""
        from service.submission import confine_checkpoint_files

        settings = self.settings
        self.job_id = job_id or self.job_id
        self.store = self.store or Store(settings.database, retry_seconds=settings.db_retry_seconds)
        job = self.store.get_job(self.job_id)
        self.attempt = job.attempts  # the job's attempt this worker runs units of (their notes say it)
        self.evaluators, self.drawing, self.drawn = {}, {}, None
        self.judges = {}  # opened again for each job: a judge's server may have been redeployed
        self.judgments = None  # read again for each job: other workers may have cached judgments since
        job_running = JobRunning(self.store, self.job_id)
        self.should_stop: Callable[[], bool] = lambda: not job_running()
        key = model_key(job, settings)
        warm = key == self.key and not job.endpoint  # a served model is probed again (it may have been redeployed)
        if job.endpoint:
            self.loaded, self.engine, self.source = served(settings, self.store, job)
        else:
            confine_checkpoint_files(Path(job.checkpoint_path), settings.roots)
            if not warm:
                self._load_checkpoint(job)
            self.source = {"checkpoint": {"name": job.checkpoint, "path": job.checkpoint_path,
                                          "fingerprint": job.fingerprint}}
        self.key = key
        return {"pid": os.getpid(), "host": socket.gethostname(), "warm": warm, "model_bytes": self.model_bytes(),
                "max_batch": getattr(self.engine, "max_batch", None)}  # None: a served model's engine

    def _load_checkpoint(self, job: JobRow) -> None:
        """The job's checkpoint loaded (the previous model let go first), its engine made and
        its kernels compiled here, not inside the first unit's timing."""
        from checkpoints.config_reader import load_config
        from checkpoints.engine import Engine
        from checkpoints.engine.warmup import warm_up
        from checkpoints.loading import load_model
        from checkpoints.tokenizer import load_tokenizer
        from evaluators.suite import draw_ahead, task_keys

        settings = self.settings
        self.loaded = self.engine = None
        # Triton's compiled kernels and autotuning timings under the service's home (a docker
        # volume): compiled and tuned once per machine, not in every worker process.
        os.environ.setdefault("TRITON_CACHE_DIR", str(settings.triton_cache))
        # the tokenizer first: the job's tasks draw their first samples with it (RULER: seconds at
        # long lengths) while the weights load and the kernels compile, as `lctx eval` does
        tokenizer = load_tokenizer(job.checkpoint_path, load_config(job.checkpoint_path))
        finished = frozenset(k for k in task_keys(job.tasks) if task_result(settings, job.id, k).is_file())
        self.drawing, self.drawn = draw_ahead(job.tasks, tokenizer, settings.data_dir, done=finished)
        self.loaded = load_model(job.checkpoint_path, rope=job.rope, backend=job.backend,
                                 device=pick_device(settings.device), tokenizer=tokenizer)
        budget = settings.engine_memory_mb << 20 if settings.engine_memory_mb else None
        self.engine = Engine(self.loaded.model, self.loaded.tokenizer, memory_budget=budget,
                             max_batch=settings.engine_max_batch, prefix_cache=settings.engine_prefix_cache,
                             draft_tokens=settings.engine_draft_tokens)
        seconds = warm_up(self.loaded.model)
        if seconds:
            log.info("job %s: kernels compiled or read from %s in %.1f s", self.job_id,
                     os.environ["TRITON_CACHE_DIR"], seconds)

    def model_bytes(self) -> int:
        """Bytes of the loaded weights (what a warm worker keeps holding; 0 for a served model)."""
        if self.key is None or self.key[0] == "endpoint":
            return 0
        return sum(p.numel() * p.element_size() for p in self.loaded.model.parameters())

    def _evaluator(self, key: str, task: dict[str, Any]) -> tuple[Any, list[Any]]:
        """The task's evaluator and plan, made once per worker (preparing data, fitting prompt
        lengths: work every unit of the task would otherwise repeat)."""
        if key not in self.evaluators:
            from evaluators.base import planned_samples
            from evaluators.registry import make_evaluator

            evaluator = self.drawing.pop(key, None) if self._draw_done() else None
            evaluator = evaluator or make_evaluator(task, self.settings.data_dir)
            self.evaluators[key] = (evaluator, planned_samples(evaluator, self.loaded))
        return self.evaluators[key]

    def _judge(self, evaluator: Any) -> None:
        """A judged task's judge (opened once per job, by the name its spec records), its
        budgets and the service's cache of judgments (<results>/judgments: a resumed or repeated
        job asks nothing twice). Units need it; finishing a task (aggregating) does not."""
        options = evaluator.options
        if not options.needs_judge or evaluator.judging is not None:
            return
        from evaluators.judges import JUDGMENTS_DIR, Judging, JudgmentCache

        ref = options.judge_ref()
        if ref not in self.judges:
            self.judges[ref] = open_judge(self.store, self.settings, ref, pick_device(self.settings.device))
        if self.judgments is None:
            self.judgments = JudgmentCache(self.settings.results / JUDGMENTS_DIR)
        evaluator.judging = Judging.of(self.judges[ref], self.judgments, options)

    def _draw_done(self) -> bool:
        """Waits for the draw begun at load; False if it failed (the unit then draws itself,
        meeting the error where a build reports it)."""
        if self.drawn is None:
            return False
        try:
            self.drawn.result()
            return True
        except Exception:
            log.warning("job %s: drawing samples ahead failed; the units draw them", self.job_id, exc_info=True)
            self.drawn, self.drawing = None, {}
            return False

    def _task_run(self, key: str, task: dict[str, Any], **kwargs: Any) -> Any:
        from evaluators.base import TaskRun

        evaluator, samples = self._evaluator(key, task)
        return TaskRun(evaluator, self.loaded, task_dir(self.settings, self.job_id, key), samples=samples,
                       engine=self.engine, **kwargs)

    def run_unit(self, unit: Unit, max_batch: int | None = None) -> dict[str, Any]:
        """Run what the unit's slice still lacks (samples recorded by an earlier run of it, or
        of any unit, are skipped) into this run's own file; its note says what it prefilled.
        `max_batch` caps the decoding batch (a re-run after a kill for memory)."""
        run_name = f"{unit.stem}-{secrets.token_hex(4)}"
        note = UnitNote(task_dir(self.settings, self.job_id, unit.key), run_name, unit.stem, label=unit.label,
                        attempt=self.attempt)
        full = getattr(self.engine, "max_batch", None)
        batch = min(full, max_batch) if full and max_batch else full
        note.write(max_batch=batch)  # the run exists from now on: progress reads its tokens as they grow
        run = self._task_run(unit.key, unit.task, unit=run_name, should_stop=self.should_stop,
                             on_prefill=note.prefilled)
        self._judge(run.evaluator)
        try:
            if batch:
                self.engine.max_batch = batch
            run.run_part((unit.index, unit.count))
        finally:
            if batch:
                self.engine.max_batch = full
            use = run.prefix_use()
            note.write(samples=run.recorded,
                       **({k: use[k] for k in ("prompt_tokens", "reused_tokens", "enabled")} if use else {}))
        return {"total": run.total, "done": len(run.done)}

    def finish_task(self, key: str, task: dict[str, Any]) -> dict[str, Any]:
        """Once every unit of the task has finished: fold the unit files into `samples.jsonl`
        (each sample once), aggregate, save the task's entry of results.json."""
        folder = task_dir(self.settings, self.job_id, key)
        merge_units(folder)
        self.evaluators.pop(key, None)  # its sample log is read again, whole
        run = self._task_run(key, task)
        entry = run.entry(prefix_use(folder))
        write_json_atomic(task_result(self.settings, self.job_id, key), entry)
        return entry

    def finish_job(self, results: dict[str, Any], started: str, work: dict[str, Any]) -> None:
        """The job's results.json, with its plots (every task folder's, each named by its task
        key and file: the API answers their URLs), the attempts it took and how its work was
        spread (`work`: workers, units, unit runs, re-runs)."""
        job = self.store.get_job(self.job_id) if self.store else None
        assert job is not None, "load() first"
        from evaluators.suite import task_keys

        plots = [{"task": key, "name": p.stem}  # the file <name>.png of the task's plots folder
                 for key in task_keys(job.tasks)
                 for p in sorted(task_plots(self.settings, job.id, key).glob("*.png"))]
        write_json_atomic(job_results(self.settings, job.id), suite_document(
            self.loaded, job.tasks, results, started, job=job.id, **self.source, plots=plots,
            attempts=job.attempts, work=work))

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def open_judge(store: Store, settings: Settings, ref: str, device: str) -> Any:
    """The judge a job's task names (`name@identity`, service.submission.check_judges): an
    endpoint connected (URL checked against today's hosts, the server probed again) or a
    checkpoint loaded on `device` (its files confined to the roots again); EvaluatorError
    when it is no longer the model the job was submitted with."""
    from evaluators.judges import Judge, check_pin
    from service.submission import (
        confine_checkpoint_files,
        endpoint_fingerprint,
        endpoint_spec,
        registered_judge,
    )

    found = registered_judge(store, ref, "judge")
    row: Any = found.row
    if found.kind == "endpoint":
        from clients.endpoint import EndpointEngine, connect

        identity = endpoint_fingerprint(row)
        check_pin(ref, identity)
        served = connect(endpoint_spec(row, settings), settings.endpoint_host_list)
        return Judge(row.name, identity, "endpoint", served, EndpointEngine(served),
                     {"endpoint": row.name, "url": row.base_url, "served_model": row.served_model,
                      "api_style": row.api_style})
    from checkpoints.engine import Engine
    from checkpoints.fingerprint import inspect_checkpoint
    from checkpoints.loading import load_model

    path = Path(row.path)
    confine_checkpoint_files(path, settings.roots)
    identity = inspect_checkpoint(path).fingerprint
    check_pin(ref, identity)
    loaded = load_model(path, device=device)
    return Judge(row.name, identity, "checkpoint", loaded, Engine(loaded.model, loaded.tokenizer),
                 {"checkpoint": row.name})


def served(settings: Settings, store: Store, job: JobRow) -> tuple[Any, Any, dict[str, Any]]:
    """The job's endpoint as a model evaluators run on: URL checked again against today's
    allowed hosts, the server probed again (it may have been redeployed), its engine."""
    from clients.endpoint import EndpointEngine, connect
    from service.submission import endpoint_spec

    row = store.get_endpoint(job.endpoint)
    model = connect(endpoint_spec(row, settings), settings.endpoint_host_list)
    return model, EndpointEngine(model), {"endpoint": {"name": row.name, "url": row.base_url,
                                                       "served_model": row.served_model}}
