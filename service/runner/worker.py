"""One worker of a job: the checkpoint loaded once (or the served model connected) and kept
for every work unit it is given, and for the next job of the same model while it is warm.

A worker only computes. It is given its node's settings (`WorkerConfig`), then typed calls
through `answer` (`service.runner.calls`: `Load` with a job's spec, `RunUnit` with the
records a unit's slice already has, `FinishTask`, `Drain`), and a stop signal; it answers
each with its typed answer: records and unit notes through its `Outbox` (taken by a `Drain`
while a unit runs, the rest with the unit's answer), a finished task's entry and its plot
files. It opens no database and writes no results folder (the coordinator does both),
so a node of a Ray cluster needs neither: only the checkpoint and data files at the paths the
spec names, and its own home for caches (Triton's kernels, judge answers).

The service runs workers as Ray actors (`service.runner.executor`: one per GPU, or
`job_workers` on a cluster without GPUs); `run_job` runs one in-process. Torch and the
evaluators are imported when a worker loads, not with this module: the dispatcher that
creates the actors never needs them."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import threading
import weakref
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.core.paths import confine_checkpoint_files
from service.runner.calls import (
    Drain,
    FinishTask,
    Load,
    Loaded,
    RunUnit,
    TaskFinished,
    UnitRan,
    WorkerCall,
    checked_call,
)
from service.runner.mail import Mail, Outbox
from service.runner.progress import UnitNote
from service.runner.spec import JobSpec, JudgeSpec, WorkerConfig
from service.runner.units import Unit
from service.runner.warm import same_weights

if TYPE_CHECKING:
    from checkpoints.engine import Engine
    from checkpoints.loading import LoadedModel
    from clients.endpoint.engine import EndpointEngine, ServedModel
    from evaluators.judges import Judge, JudgmentCache
    from evaluators.run import TaskRun
    from evaluators.task import Evaluator, Sample

log = logging.getLogger("lctx.worker")


def pick_device(setting: str) -> str:
    if setting != "auto":
        return setting
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Worker:
    """Holds a model and runs the units of the job it is bound to (`load`), finishes its tasks
    (`finish_task`). A warm worker (service/runner/warm.py) is bound to the next job of the
    same model key without loading again."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.home = config.node_home()
        self.spec: JobSpec | None = None
        self.key: tuple | None = None  # the model key of what is loaded
        self.loaded: LoadedModel | ServedModel | None = None
        self.engine: Engine | EndpointEngine | None = None
        self.weight_bytes = 0  # bytes of the loaded weights (what a warm worker keeps holding; 0 for a served model)
        self.evaluators: dict[str, tuple[Evaluator, list[Sample]]] = {}  # task key -> (evaluator, its planned samples)
        # task key -> an evaluator drawing its first samples while the weights load (`_load_checkpoint`),
        # and the draw's future
        self.drawing: dict[str, Evaluator] = {}
        self.drawn: Future | None = None
        self.judges: dict[str, Judge] = {}  # the job's judges by the name its tasks record (`name@identity`)
        self.judgments: JudgmentCache | None = None  # this node's cache of judge answers
        self.graded: weakref.WeakSet[Evaluator] = weakref.WeakSet()  # evaluators given their judge and graders
        self.outbox = Outbox()
        self.stopped = threading.Event()

    def answer(self, call: WorkerCall) -> Loaded | UnitRan | TaskFinished | Mail:
        """The one entry point of the coordinator's calls (`service.runner.calls`); TypeError
        for anything else."""
        match checked_call(call):
            case Load(spec, key):
                return self.load(spec, key)
            case RunUnit(unit, records, max_batch):
                return self.run_unit(unit, records, max_batch)
            case FinishTask(key, task, records, prefix_cache):
                return self.finish_task(key, task, records, prefix_cache)
            case Drain():
                return self.drain()
        raise AssertionError(call)  # checked_call admits the four above only

    # -- control: answered while a unit runs --------------------------------------------

    def drain(self) -> Mail:
        """The records and notes made since the coordinator last asked."""
        return self.outbox.take()

    def stop(self) -> None:
        """The job was cancelled or the service stops: the running unit ends at its next sample."""
        self.stopped.set()

    # -- compute --------------------------------------------------------------------

    def load(self, spec: JobSpec, key: tuple) -> Loaded:
        """Bind to the job and load its checkpoint (files confined to the roots again: one may
        have been swapped for a link since submission) or connect its served model, unless this
        worker holds that model (`key`) already; returns where this worker runs, whether it was
        warm and how results describe the model as it runs."""
        self.spec = spec
        self.evaluators, self.drawing, self.drawn = {}, {}, None
        self.judges = {}  # opened again for each job: a judge's server may have been redeployed
        self.judgments = None  # read again for each job: other jobs may have cached judgments since
        self.graded = weakref.WeakSet()
        self.stopped.clear()
        self.outbox.take()  # nothing of an earlier job is sent as this one's
        warm = key == self.key and spec.endpoint is None  # a served model is probed again (it may have moved)
        reloaded = not warm and self.key is not None and spec.endpoint is None  # this process held another
        if spec.endpoint is not None:
            from clients.endpoint.engine import open_served

            served = open_served(spec.endpoint, self.config.endpoint_hosts)
            self.loaded, self.engine, self.weight_bytes = served.source, served.engine, 0
        else:
            assert spec.checkpoint is not None
            confine_checkpoint_files(Path(spec.checkpoint["path"]), self.config.roots)
            if not warm:
                self._load_checkpoint(spec, keep_weights=self.key is not None and same_weights(self.key, key))
        self.key = key
        return Loaded(os.getpid(), socket.gethostname(), warm, self.weight_bytes, self._engine().max_batch,
                      self._loaded().describe_run(), reloaded)

    def _load_checkpoint(self, spec: JobSpec, keep_weights: bool = False) -> None:
        """The job's checkpoint loaded (the previous model let go first; with `keep_weights`, the
        same checkpoint's under another RoPE setting or backend, its tensors taken as they are),
        its engine made and its kernels compiled here, not inside the first unit's timing."""
        from checkpoints.loading import LoadedModel
        from checkpoints.opening import open_model
        from evaluators.suite import draw_ahead

        config, path = self.config, spec.checkpoint["path"]
        held = self.loaded.model if keep_weights and isinstance(self.loaded, LoadedModel) else None
        self.loaded = self.engine = None
        self.weight_bytes = 0
        # Triton's compiled kernels and autotuning timings under this node's home (a docker
        # volume): compiled and tuned once per machine, not in every worker process.
        os.environ.setdefault("TRITON_CACHE_DIR", str(config.triton_cache or self.home / "triton"))

        def draw(tokenizer: Any) -> None:
            # the job's tasks draw their first samples with the tokenizer (RULER: seconds at long
            # lengths) while the weights load and the kernels compile, as `lctx eval` does
            self.drawing, self.drawn = draw_ahead(spec.tasks, tokenizer, config.data_dir, done=spec.finished)

        opened = open_model(path, config.engine, rope=spec.rope, backend=spec.backend,
                            device=pick_device(config.device), with_tokenizer=draw, weights=held)
        if held is not None:
            log.info("job %s: %s built around the weights held for the previous job (another RoPE setting or "
                     "backend), %.1f s", spec.id, path, opened.seconds["load_s"])
        del held  # the new model holds the tensors it kept; the old module goes
        self.loaded, self.engine = opened.loaded, opened.engine
        self.weight_bytes = sum(p.numel() * p.element_size() for p in opened.loaded.model.parameters())
        if opened.seconds["warm_up_s"]:
            log.info("job %s: kernels compiled or read from %s in %.1f s", spec.id, os.environ["TRITON_CACHE_DIR"],
                     opened.seconds["warm_up_s"])

    def run_unit(self, unit: Unit, records: list[dict[str, Any]], max_batch: int | None = None) -> UnitRan:
        """Run what the unit's slice still lacks (`records`: what earlier runs recorded for it,
        skipped), sending each record and the run's note to the outbox; answers with the
        slice's size, what it ran and the outbox's rest. `max_batch` caps the decoding batch
        (a re-run after a kill for memory)."""
        from evaluators.samplelog import HandedLog

        spec = self._spec()
        run_name = f"{unit.stem}-{secrets.token_hex(4)}"
        where = (unit.key, run_name)
        note = UnitNote(lambda state: self.outbox.note(where, state), unit.stem, label=unit.label,
                        attempt=spec.attempt)
        engine = self._engine()
        full = engine.max_batch  # None: a served model's engine (the server batches)
        batch = min(full, max_batch) if full and max_batch else full
        run = self._task_run(unit.key, unit.task, should_stop=self.stopped.is_set, on_prefill=note.prefilled,
                             on_generated=note.generated, on_reused=note.reused, on_foreseen=note.foreseen,
                             log=HandedLog(records, lambda record: self.outbox.record(where, record)))
        note.write(max_batch=batch, resumed=len(run.done))  # the run exists from now on
        self._judge(run.evaluator)
        try:
            if batch:
                engine.max_batch = batch
            run.run_part((unit.index, unit.count))
        finally:
            if batch:
                engine.max_batch = full
            use = run.prefix_use()
            note.write(samples=run.recorded, foreseen=0,
                       **({k: use[k] for k in ("prompt_tokens", "reused_tokens", "enabled")} if use else {}))
        return UnitRan(run.total, len(run.done), self.outbox.take())

    def finish_task(self, key: str, task: dict[str, Any], records: list[dict[str, Any]],
                    prefix_cache: dict[str, Any] | None) -> TaskFinished:
        """Once every unit of the task has finished: its entry of results.json from every record
        (aggregated; `prefix_cache` the use its unit runs noted), its plots as files (name ->
        PNG bytes) for the coordinator to keep, and the model as it ran."""
        from evaluators.samplelog import HandedLog

        self.evaluators.pop(key, None)  # its evaluator starts afresh on the whole log
        run = self._task_run(key, task, log=HandedLog(records))
        try:
            entry = run.entry(prefix_cache)
            plots = {Path(p).name: Path(p).read_bytes() for p in entry["plots"]}
        finally:
            shutil.rmtree(run.folder, ignore_errors=True)
        # the model as it ran (a served model reports its name once it has answered)
        return TaskFinished(entry, plots, self._loaded().describe_run())

    # -- the pieces -------------------------------------------------------------------

    def _spec(self) -> JobSpec:
        assert self.spec is not None, "load() first"
        return self.spec

    def _loaded(self) -> LoadedModel | ServedModel:
        assert self.loaded is not None, "load() first"
        return self.loaded

    def _engine(self) -> Engine | EndpointEngine:
        assert self.engine is not None, "load() first"
        return self.engine

    def _scratch(self, key: str) -> Path:
        """A task's scratch folder on this node (where its plots are drawn before they are sent)."""
        return self.home / "scratch" / self._spec().id / key

    def _evaluator(self, key: str, task: dict[str, Any]) -> tuple[Evaluator, list[Sample]]:
        """The task's evaluator and plan, made once per worker (preparing data, fitting prompt
        lengths: work every unit of the task would otherwise repeat)."""
        if key not in self.evaluators:
            from evaluators.registry import make_evaluator
            from evaluators.run import planned_samples

            evaluator = self.drawing.pop(key, None) if self._draw_done() else None
            evaluator = evaluator or make_evaluator(task, self.config.data_dir)
            self.evaluators[key] = (evaluator, planned_samples(evaluator, self._loaded()))
        return self.evaluators[key]

    def _task_run(self, key: str, task: dict[str, Any], **kwargs: Any) -> TaskRun:
        from evaluators.run import TaskRun

        evaluator, samples = self._evaluator(key, task)
        return TaskRun(evaluator, self._loaded(), self._scratch(key), samples=samples, engine=self._engine(),
                       **kwargs)

    def _judge(self, evaluator: Evaluator) -> None:
        """A judged task's judge (opened once per job from the spec the coordinator resolved),
        its budgets and this node's cache of judgments (a resumed or repeated job asks nothing
        twice on this node). Units need it; finishing a task (aggregating) does not."""
        options = evaluator.options
        graders = options.graders()  # models besides the judge (HELMET's citation NLI), opened alike
        if (not options.needs_judge and not graders) or evaluator in self.graded or \
                (not graders and evaluator.judging is not None):
            return
        from evaluators.judges import JUDGMENTS_DIR, Judging, JudgmentCache

        refs = ([options.judge_ref()] if options.needs_judge else []) + list(graders.values())
        for ref in refs:
            if ref not in self.judges:
                self.judges[ref] = job_judge(self._spec().judges[ref], self.config)
        if self.judgments is None:
            self.judgments = JudgmentCache(self.home / JUDGMENTS_DIR)
        if options.needs_judge and evaluator.judging is None:
            evaluator.judging = Judging.of(self.judges[options.judge_ref()], self.judgments, options)
        for option, ref in graders.items():
            evaluator.attach_grader(option, Judging(self.judges[ref], self.judgments, options.judge_max_new_tokens,
                                                    options.judge_thinking_budget))
        self.graded.add(evaluator)

    def _draw_done(self) -> bool:
        """Waits for the draw begun at load; False if it failed (the unit then draws itself,
        meeting the error where a build reports it)."""
        if self.drawn is None:
            return False
        try:
            self.drawn.result()
            return True
        except Exception:
            log.warning("job %s: drawing samples ahead failed; the units draw them", self._spec().id, exc_info=True)
            self.drawn, self.drawing = None, {}
            return False


def job_judge(spec: JudgeSpec, config: WorkerConfig) -> Judge:
    """The judge a job's task names, as the coordinator resolved it, opened by
    `evaluators.judges.open_judge`: an endpoint connected (URL checked against the allowed
    hosts, the server probed again) or a checkpoint loaded (its files confined to the roots
    and fingerprinted again); EvaluatorError when it is no longer the model the job was
    submitted with."""
    from evaluators.judges import open_judge

    if spec.kind == "endpoint":
        from clients.endpoint.engine import EndpointTarget

        assert spec.endpoint is not None
        return open_judge(spec.name, spec.ref, EndpointTarget(spec.endpoint, config.endpoint_hosts), spec.described)
    from checkpoints.opening import CheckpointTarget

    assert spec.path is not None
    path = Path(spec.path)
    confine_checkpoint_files(path, config.roots)
    return open_judge(spec.name, spec.ref, CheckpointTarget(path, pick_device(config.device)), spec.described)
