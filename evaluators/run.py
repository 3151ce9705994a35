"""The task runner: the loop that turns any task's plan of samples into scored records
and its entry of results.json (the task contract it drives: `evaluators.task`).

The loop hands the requests of many samples to the engine at once (batched decoding)
and appends each record to `samples.jsonl` the moment its request finishes, skipping
ids already recorded under the same configuration: a run killed in the middle of a
batch resumes with every sample scored exactly once. A task with `run_sample` runs one
sample at a time through it instead. `TaskRun` is one run over a task folder (whole, or
one work unit's slice in the service); `run_evaluator` is the whole task in one run."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from checkpoints.engine import Engine, GenerateRequest, LoglikelihoodRequest, RollingRequest
from checkpoints.engine.prefix_cache import PrefixStats
from checkpoints.engine_options import EngineOptions
from checkpoints.generate import Generation
from checkpoints.lm import LM, ModelSource
from checkpoints.loading import LoadedModel
from checkpoints.tokenizer import Tokenizer
from evaluators import uncertainty
from evaluators.data import read_files
from evaluators.errors import EvaluationCancelled, EvaluatorError
from evaluators.provenance import DataLog, data_record, noting
from evaluators.samplelog import SAMPLES_FILE, HandedLog, SampleLog
from evaluators.sequential import runner as sequential
from evaluators.task import Built, Evaluator, Fields, Record, Sample
from evaluators.thinking import ThinkPlanner, thinking_plot, thinking_series

# Samples built (prompts tokenized) and handed to the engine at a time: bounds the
# prompts held in memory; the engine batches within each group.
BUILD_GROUP = 256

Progress = Callable[[str, int, int], None]
ShouldStop = Callable[[], bool]


class TaskEntry(TypedDict):
    """A task's entry of results.json (`TaskRun.entry`), as `lctx eval`, the service's
    coordinator and standings, and `lctx results` read it: how the task ran (its version,
    seed, options and configuration hash, the model as it ran, the contexts, template and
    thinking, the code's version), what it recorded (samples, their file, plots, failures,
    prefix reuse, seconds), the data it read, and its typed result (`result`: a
    `TaskResult` as JSON; `evaluators.registry.task_result` reads it back)."""

    task: str
    evaluator_version: str
    seed: int | None
    options: dict[str, Any]
    config: str
    model: dict[str, Any]
    context: dict[str, Any]
    chat_template: dict[str, Any]
    thinking: dict[str, Any] | None
    lctx_version: str
    samples: int
    samples_file: str
    plots: list[str]
    sample_errors: int
    prefix_cache: dict[str, Any] | None
    errors: dict[str, Any]  # the task's ErrorRule: how each value's error was computed
    seconds: dict[str, float]
    data: NotRequired[dict[str, Any]]  # the files it read, their sha256, hub revisions (tasks that read data)
    result: dict[str, Any]  # RESULT_KEY


def lctx_version() -> str:
    try:
        return version("lctx")
    except PackageNotFoundError:
        return "unknown"


def non_finite(value: Any, where: str = "") -> list[str]:
    """Paths of the nan/inf floats in a record (JSON has no spelling for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where or 'value'}={value}"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite(v, f"{where}.{k}" if where else str(k))]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in non_finite(v, f"{where}[{i}]")]
    return []


def finite_json(value: Any) -> Any:
    """The value with every nan/inf float as null (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value


def describe_run(loaded: ModelSource) -> dict[str, Any]:
    """How results describe the model as it ran (`checkpoints.lm.ModelSource`): the backend
    `auto` resolved to and the device, or a served model's endpoint and version."""
    return loaded.describe_run()


def context_of(loaded: LoadedModel, samples: list[Sample]) -> dict[str, Any]:
    """The model's trained context, the context its RoPE scaling reaches, and the planned
    lengths beyond it: they are run (how a model fails out there is the point) and marked
    in results, the leaderboard and the dashboard."""
    config = loaded.config
    lengths = sorted({int(s.params["length"]) for s in samples if isinstance(s.params.get("length"), int)})
    scaling = config.rope_scaling  # None: a served model's config tells its context only
    scaled = scaling is not None and scaling.type != "default"
    trained = config.rope_l0
    return {"trained": trained, "reach": config.effective_context, "rope_scaled": scaled,
            "beyond": [n for n in lengths if n > config.effective_context]}


def planned_samples(evaluator: Evaluator, loaded: LoadedModel) -> list[Sample]:
    """The task's samples in plan order (data prepared first); their ids must be unique. What
    the loaders note meanwhile (hub downloads, warnings about the rows they read) is kept as
    the evaluator's `data_log` for the result's `data` (evaluators.provenance)."""
    evaluator.data_log = DataLog()
    with noting(evaluator.data_log):
        evaluator.prepare(loaded)
        samples = evaluator.plan(loaded)
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"{evaluator.name}: planned sample ids are not unique")
    return samples


def part_of(samples: list[Sample], part: tuple[int, int] | None) -> list[Sample]:
    """Part `index` of `count` contiguous slices of the plan (None: all of it). Neighbours in
    the plan share prompts (one length's trials), so contiguous slices keep prefix reuse."""
    if part is None:
        return samples
    index, count = part
    if not 0 <= index < count:
        raise ValueError(f"part {index} of {count} does not exist")
    n = len(samples)
    return samples[index * n // count:(index + 1) * n // count]


class TaskRun:
    """One run over a task's samples in a task folder: the plan, the records already there
    (in `samples.jsonl` and any unit files: skipped), this run's records (appended to
    `samples.jsonl`, or with `unit` to that unit run's own file), the prompt tokens it
    prefilled and those the prefix cache served, and the task's entry of results.json
    once every planned sample is recorded. `run_evaluator` is the whole task in one run;
    the service's workers run parts of it (`run_part`) and one of them the `entry`, on the
    records their coordinator hands them (`log`: a `HandedLog`; the folder then holds only
    the plots, which the worker sends back)."""

    def __init__(self, evaluator: Evaluator, loaded: LoadedModel, folder: Path, unit: str | None = None,
                 progress: Progress | None = None, should_stop: ShouldStop | None = None,
                 engine: Engine | None = None, on_prefill: Callable[[int], None] | None = None,
                 samples: list[Sample] | None = None, log: SampleLog | HandedLog | None = None,
                 on_generated: Callable[[int], None] | None = None, on_reused: Callable[[int], None] | None = None,
                 on_foreseen: Callable[[int], None] | None = None) -> None:
        self.evaluator, self.loaded, self.folder = evaluator, loaded, Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.should_stop, self.engine, self.on_prefill = should_stop, engine, on_prefill
        self.on_generated = on_generated
        self.on_reused, self.on_foreseen = on_reused, on_foreseen  # prefix-cache tokens served, and foreseen
        self.report = progress or (lambda *_: None)
        self.samples = samples if samples is not None else planned_samples(evaluator, loaded)
        described = loaded.describe()
        fmt = evaluator.think_format(loaded.tokenizer)
        # a model that marks thinking: its records are split by these delimiters (and budgeted)
        self.config = evaluator.config_hash(described if fmt is None else {**described, "think": fmt.as_dict()})
        self.log = log if log is not None else SampleLog(self.folder, unit)
        self.done = self.log.done(evaluator.name, self.config)
        self.spent = PrefixStats()  # prompt tokens of this run, and those served from the engine's prefix cache
        # seconds of this run: waiting for prompts to be built, and the engine's prefill and decoding
        self.seconds: dict[str, float] = {"build_wait_s": 0.0}
        self.prefix_enabled: bool | None = None  # None: no lctx engine ran (a served model, run_sample)
        self.recorded = 0  # samples this run recorded

    @property
    def total(self) -> int:
        return len(self.samples)

    def record(self, sample: Sample, fields: Fields) -> None:
        bad = non_finite(fields)
        if bad:  # a model that overflowed: an error on this sample, kept out of the scores
            fields = {**finite_json(fields), "error": f"non-finite values: {', '.join(bad[:5])}"}
        rec = Record(task=self.evaluator.name, id=sample.id, config=self.config, **fields)
        self.log.append(rec)
        self.done[sample.id] = rec
        self.recorded += 1
        self.report(self.evaluator.name, len(self.done), self.total)

    def check_stop(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise EvaluationCancelled(f"{self.evaluator.name}: stopped after {len(self.done)} of "
                                      f"{self.total} samples")

    def run(self, pending: list[Sample]) -> None:
        """Run and record `pending`: through the engine in groups of BUILD_GROUP (batched
        inside), or one at a time through the evaluator's `run_sample`."""
        evaluator, loaded = self.evaluator, self.loaded
        if evaluator.run_sample is not None:
            for sample in pending:
                self.check_stop()
                self.record(sample, evaluator.run_sample(loaded, sample))
            return

        planner = ThinkPlanner(evaluator, loaded)

        def finished(built: Built, response: Any) -> None:
            # a served model's answer cut to its budgets
            overrun = response.overrun if isinstance(response, Generation) else None
            self.record(built.sample, {**built.record, **ThinkPlanner.record(built, response),
                                       **evaluator.score(built, response),
                                       **({"server_overrun": overrun} if overrun else {})})
            self.check_stop()  # a cancel lands mid-batch; every answered sample is already recorded

        engine = self.engine = self.engine or EngineOptions().engine(loaded)  # the engine's defaults
        stats = engine.stats  # lctx's engine counts prefix reuse; a served model's (EndpointEngine) None
        before = replace(stats) if stats is not None else None
        clock = replace(engine.clock) if engine.clock is not None else None
        engine.on_prefill, engine.on_generated = self.on_prefill, self.on_generated
        if hasattr(engine, "on_reused"):  # lctx's engine (a served model's has no prefix cache of ours)
            engine.on_reused, engine.on_foreseen = self.on_reused, self.on_foreseen
        groups = [pending[lo:lo + BUILD_GROUP] for lo in range(0, len(pending), BUILD_GROUP)]
        # The next group's prompts are built (tokenized, fitted) in a thread while the engine
        # runs this group (tokenizers and torch release the GIL), so building is off the
        # critical path after the first group.
        builder = ThreadPoolExecutor(1, thread_name_prefix="lctx-build")

        def build(samples: list[Sample]) -> list[Built]:
            return [planner.attach(evaluator.build(loaded, s)) for s in samples]

        try:
            ahead = builder.submit(build, groups[0]) if groups else None
            for k in range(len(groups)):
                self.check_stop()
                waited = time.perf_counter()
                built = ahead.result()
                self.seconds["build_wait_s"] += time.perf_counter() - waited
                ahead = builder.submit(build, groups[k + 1]) if k + 1 < len(groups) else None
                run_built(engine, built, finished, planner.attach)
        finally:
            builder.shutdown(wait=False, cancel_futures=True)
            engine.on_prefill = engine.on_generated = None
            if hasattr(engine, "on_reused"):
                engine.on_reused = engine.on_foreseen = None
            if clock is not None:
                for key, value in engine.clock.since(clock).as_dict().items():
                    self.seconds[key] = round(self.seconds.get(key, 0) + value, 4)
            if before is not None:
                block = engine.stats.since(before)
                self.spent = PrefixStats(self.spent.prompt_tokens + block.prompt_tokens,
                                         self.spent.reused_tokens + block.reused_tokens)
                self.prefix_enabled = engine.prefix is not None

    def run_part(self, part: tuple[int, int] | None = None) -> None:
        """Run what part `part` (index, count) of the plan still lacks; a sequential search is
        never split: it runs block after block, only what it needs."""
        self.report(self.evaluator.name, len(self.done), self.total)
        if self.evaluator.options.sequential():
            if part is not None and part[1] != 1:
                raise ValueError(f"{self.evaluator.name}: a sequential search runs as one part, not {part[1]}")
            consumed = sequential.run(self.evaluator, self.samples, self.done, self.run)
            self.report(self.evaluator.name, len(consumed), len(consumed))  # finished: the search needs no more
        else:
            self.run([s for s in part_of(self.samples, part) if s.id not in self.done])

    def prefix_use(self) -> dict[str, Any] | None:
        """This run's prompt tokens and the fraction the prefix cache served (None: no lctx engine ran)."""
        return {**self.spent.as_dict(), "enabled": self.prefix_enabled} if self.prefix_enabled is not None else None

    def _unfinished_search(self, pending: list[Sample]) -> None:
        raise EvaluatorError(f"{self.evaluator.name}: the sequential search has not finished "
                             f"({len(pending)} more samples wanted)")

    def entry(self, prefix_cache: dict[str, Any] | None) -> TaskEntry:
        """The task's entry of results.json from every recorded sample (all must be there)."""
        evaluator, loaded, out_dir = self.evaluator, self.loaded, self.folder
        if evaluator.options.sequential():
            ids = [s.id for s in sequential.run(evaluator, self.samples, self.done, self._unfinished_search)]
        else:
            ids = [s.id for s in self.samples]
        missing = [i for i in ids if i not in self.done]
        if missing:
            raise EvaluatorError(f"{evaluator.name}: {len(missing)} of {len(ids)} planned samples are not recorded "
                                 f"(first: {missing[0]}); the task cannot be aggregated yet")
        records = [self.done[i] for i in ids]
        scored = [r for r in records if "error" not in r]
        errors = len(records) - len(scored)
        if not scored and errors:
            raise EvaluatorError(f"{evaluator.name}: every one of its {errors} samples failed "
                                 f"(first: {records[0]['error']}); see {out_dir / SAMPLES_FILE}")
        result = evaluator.result(records if evaluator.options.sequential() else scored)
        thinking_series(result, scored)
        if evaluator.options.sequential():
            uncertainty.unmeasured(result, "the sequential search's answer: its own stopping rule, no sampling "
                                           "error computed")
        else:  # every value with its error, by the task's rule (the thinking series are measurements)
            uncertainty.attach(result, [dict(r) for r in scored], evaluator.error_rule(), evaluator.estimate,
                               evaluator.name)
        if errors:
            result.extra["sample_errors"] = errors
            result.summary += f" ({errors} samples failed: non-finite outputs)"
        plot_paths = evaluator.plots(scored, result, out_dir / "plots") + thinking_plot(result, out_dir / "plots")
        data = data_record(evaluator.options, evaluator.data_dir, evaluator.data_log,
                           read_files(evaluator.options, evaluator.data_dir))
        entry = TaskEntry(
            task=evaluator.name,
            evaluator_version=evaluator.version,
            seed=evaluator.options.recorded_seed(),
            options=evaluator.options.as_dict(),
            config=self.config,
            model=describe_run(loaded),
            context=context_of(loaded, self.samples),
            chat_template={"applied": evaluator.options.chat_template_wanted(),
                           "file": loaded.tokenizer.chat_template_source},
            thinking=thinking_entry(evaluator, loaded.tokenizer),
            lctx_version=lctx_version(),
            samples=self.total,
            samples_file=str(out_dir / SAMPLES_FILE),
            plots=[str(p) for p in plot_paths],
            sample_errors=errors,
            prefix_cache=prefix_cache,
            errors=evaluator.error_rule().as_dict(),  # how each value's error was computed (the comparisons' too)
            seconds={k: round(v, 4) for k, v in self.seconds.items()},
            result=finite_json(result.model_dump(mode="json")),
        )
        if data is not None:
            entry["data"] = data
        return entry


def thinking_entry(evaluator: Evaluator, tokenizer: Tokenizer) -> dict[str, Any] | None:
    """How the task ran a reasoning model: the setting, the thinking budget and the delimiters
    the checkpoint declares (None for a task that generates no answer)."""
    setting = evaluator.options.thinking_setting()
    if setting is None:
        return None
    fmt = evaluator.think_format(tokenizer)
    return {"setting": setting, "budget": evaluator.options.thinking_budget_option(),
            "format": fmt.as_dict() if fmt is not None else None}


def run_evaluator(
    evaluator: Evaluator,
    loaded: LoadedModel,
    out_dir: Path,
    progress: Progress | None = None,
    should_stop: ShouldStop | None = None,
    engine: Engine | None = None,
    on_prefill: Callable[[int], None] | None = None,
    on_generated: Callable[[int], None] | None = None,
    on_reused: Callable[[int], None] | None = None,
    on_foreseen: Callable[[int], None] | None = None,
) -> TaskEntry:
    """Plan, skip what is recorded, run the rest through the engine in batches (or
    one at a time through `run_sample`), aggregate. `progress(task, done, total)` hears of
    every recorded sample, `on_prefill(tokens)` of every prefilled chunk, `on_generated(tokens)`
    of every decoding step, `on_reused(tokens)` of prompt tokens the prefix cache served (else
    on_prefill hears them) and `on_foreseen(tokens)` of those it should serve (`Engine`)."""
    run = TaskRun(evaluator, loaded, out_dir, progress=progress, should_stop=should_stop, engine=engine,
                  on_prefill=on_prefill, on_generated=on_generated, on_reused=on_reused, on_foreseen=on_foreseen)
    run.run_part()
    return run.entry(run.prefix_use())


def run_built(engine: LM, built: list[Built], finished: Callable[[Built, Any], None],
              attach: Callable[[Built], Built] = lambda b: b) -> None:
    """Hand every request to the engine, one batched call per request type;
    `finished(built, response)` runs the moment each request is answered. A sample of two
    turns (`Built.then`) gives its next turn from its first answer: the next turns run
    together in a next round (each made ready by `attach`: the think planner), as many rounds
    as the longest sample has turns."""
    while built:
        later: list[Built] = []

        def answered(b: Built, response: Any, later: list[Built] = later) -> None:
            if b.then is not None and response is not None:
                later.append(attach(b.then(response)))
            else:
                finished(b, response)

        for b in built:
            if b.request is None:  # nothing to run (beyond the model's context): recorded as it is
                answered(b, None)
        calls = ((GenerateRequest, engine.generate_until), (LoglikelihoodRequest, engine.loglikelihood),
                 (RollingRequest, engine.loglikelihood_rolling))
        for kind, call in calls:
            group = [b for b in built if isinstance(b.request, kind)]
            if group:
                call([b.request for b in group], done=lambda i, response, group=group: answered(group[i], response))
        built = later
