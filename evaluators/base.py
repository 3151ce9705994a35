"""What every evaluator shares: errors, the sample log that makes runs resumable,
and the loop that turns a plan of samples into scored records and a result.

An evaluator plans its samples cheaply (ids and parameters, no model calls),
turns each into one engine request (`build`: generate until, log-likelihood or
rolling log-likelihood; see `checkpoints.engine`), scores each response into a
JSON record (`score`) and aggregates the records. The loop hands the requests
of many samples to the engine at once (batched decoding) and appends each
record to `samples.jsonl` the moment its request finishes, skipping ids already
recorded under the same configuration: a run killed in the middle of a batch
resumes with every sample scored exactly once. An evaluator that needs more
than the three request types (attention diagnostics reads attention statistics
and hidden states) overrides `run_sample` instead: its narrow seam to the model."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, ClassVar

from checkpoints import jsonfiles
from checkpoints.engine import Engine, GenerateRequest, LoglikelihoodRequest, RollingRequest
from checkpoints.loading import LoadedModel
from checkpoints.prefix_cache import PrefixStats
from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluationCancelled, EvaluatorError  # noqa: F401 - re-exported
from evaluators.options import TaskOptions, validate_options
from evaluators.results import RESULT_KEY, TaskResult
from evaluators.sequential import runner as sequential

SAMPLES_FILE = "samples.jsonl"
# Samples built (prompts tokenized) and handed to the engine at a time: bounds the
# prompts held in memory; the engine batches within each group.
BUILD_GROUP = 256

Request = GenerateRequest | LoglikelihoodRequest | RollingRequest

Progress = Callable[[str, int, int], None]
ShouldStop = Callable[[], bool]


def lctx_version() -> str:
    try:
        return version("lctx")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class Sample:
    """One planned sample: a stable id and whatever the evaluator needs to run it."""

    id: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Built:
    """A sample made ready to run: its engine request, the record fields known before
    running (prompt_tokens, truncated, ...) and whatever scoring needs (`keep`)."""

    sample: Sample
    request: Request
    record: dict[str, Any] = field(default_factory=dict)
    keep: Any = None


class Evaluator:
    """Base of every evaluator. Subclasses set `name`, `version`, `Options` (their
    option model in `evaluators.options`) and implement `plan`, `run_sample`,
    `aggregate` (records -> `TaskResult`) and `legacy_result`."""

    name: ClassVar[str] = ""
    # Bump whenever prompts, truncation, scoring or the result's layout change: results record it.
    version: ClassVar[str] = "1"
    Options: ClassVar[type[TaskOptions]] = TaskOptions
    # Scores prompts (log-likelihood / rolling requests): on a served model it needs prompt logprobs.
    scores_prompts: ClassVar[bool] = False

    def __init__(self, options: dict[str, Any], data_dir: Path | None = None) -> None:
        self.options = options
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._chat: tuple[str, str] | None = None

    def wrap(self, tokenizer: Tokenizer, prompt: str) -> str:
        """`prompt` in the checkpoint's chat template when the task's `chat_template` option
        is true (rendered once per run), else as it is."""
        if not self.options.get("chat_template"):
            return prompt
        if self._chat is None:
            from evaluators.chat import chat_parts, missing_template

            self._chat = chat_parts(tokenizer, missing_template(self.name), self.name)
        return self._chat[0] + prompt + self._chat[1]

    # --- options ----------------------------------------------------------

    @classmethod
    def validate(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Defaults filled in; unknown options and bad values refused (EvaluatorError naming the field)."""
        return validate_options(cls.Options, options)

    def config_hash(self, model: dict[str, Any] | None = None) -> str:
        """Identity of how samples are built and scored: task, version, options that are not
        mere selection (options marked `selects`: a run with more lengths or trials reuses the
        samples already scored), and the model's description (another RoPE scaling or variant must not
        reuse records)."""
        kept = {k: v for k, v in self.options.items() if k not in self.Options.selection()}
        canonical = json.dumps({"task": self.name, "version": self.version, "options": kept, "model": model},
                               sort_keys=True, default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    # --- what subclasses implement ------------------------------------------

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        raise NotImplementedError

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        """The sample's engine request and the record fields known before it runs."""
        raise NotImplementedError

    def score(self, built: Built, response: Any) -> dict[str, Any]:
        """The record of one sample from its engine response (a `Generation`, a
        (log-likelihood, greedy) pair or per-token log-probabilities): at least
        prompt_tokens, truncated, prediction, references and score (the base adds
        task, id and config)."""
        raise NotImplementedError

    # The seam for an evaluator that needs the model itself (diagnostics): when a
    # subclass defines `run_sample(loaded, sample) -> record`, samples run one at a
    # time through it instead of through the engine.
    run_sample: ClassVar[Callable[..., dict[str, Any]] | None] = None

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        raise NotImplementedError

    # The plan parameter numbering a length's units for the sequential search (evaluators/sequential).
    search_unit: ClassVar[str] = "trial"

    def result(self, records: list[dict[str, Any]]) -> TaskResult:
        """`aggregate`, or with `search: sequential` the search's answer over the samples it
        consumed (failed samples included: they count as wrong)."""
        if sequential.enabled(self.options):
            return sequential.summarize(self, records)
        return self.aggregate(records)

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """The typed result of an entry written before the contract (aggregates spread into it)."""
        raise NotImplementedError(f"{cls.name}: no reader for results of version {entry.get('evaluator_version')}")

    def plots(self, records: list[dict[str, Any]], result: TaskResult, folder: Path) -> list[Path]:
        return []

    def sample_prompt(self, record: dict[str, Any]) -> tuple[str, str] | None:
        """(prompt, needle) a recorded sample was given, rebuilt from its record, for
        tasks whose records say enough (passkey, needle: a 1M-token prompt on every line
        would swell samples.jsonl); None where prompts are not rebuilt. The dashboard
        shows it with the needle highlighted."""
        return None

    def prepare(self, loaded: LoadedModel) -> None:
        """Work done once before the first sample (loading data files, ...)."""


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


class SampleLog:
    """Append-only JSONL of finished samples, read back to resume."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def done(self, task: str, config: str) -> dict[str, dict[str, Any]]:
        """Records already finished for this task and configuration, by id."""
        found: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            for _, rec in jsonfiles.records(self.path, strict=False):
                if rec.get("task") == task and rec.get("config") == config:
                    found.setdefault(rec["id"], rec)
        return found

    def last_config(self, task: str) -> str | None:
        """The configuration of the task's most recently recorded sample."""
        last = None
        if self.path.is_file():
            for _, rec in jsonfiles.records(self.path, strict=False):
                if rec.get("task") == task:
                    last = rec.get("config")
        return last

    def append(self, record: dict[str, Any]) -> None:
        jsonfiles.append_record(self.path, record)


def describe_run(loaded: LoadedModel) -> dict[str, Any]:
    """The model's description plus what `backend: auto` resolved to on this device (the
    attention implementation that actually ran: triton on CUDA, torch elsewhere). A served
    model (`checkpoints.endpoint.ServedModel`, no weights here) describes its endpoint."""
    if not hasattr(loaded, "model"):
        return loaded.describe_run()
    model = loaded.model
    return {**loaded.describe(), "resolved_backend": model.resolved_backend.value,
            "device": str(model.device)}


def context_of(loaded: LoadedModel, samples: list[Sample]) -> dict[str, Any]:
    """The model's trained context, the context its RoPE scaling reaches, and the planned
    lengths beyond it: they are run (how a model fails out there is the point) and marked
    in results, the leaderboard and the dashboard."""
    config = loaded.config
    lengths = sorted({int(s.params["length"]) for s in samples if isinstance(s.params.get("length"), int)})
    scaling = getattr(config, "rope_scaling", None)  # a served model's config tells its context only
    scaled = scaling is not None and scaling.type != "default"
    trained = getattr(config, "rope_l0", config.effective_context)
    return {"trained": trained, "reach": config.effective_context, "rope_scaled": scaled,
            "beyond": [n for n in lengths if n > config.effective_context]}


def run_evaluator(
    evaluator: Evaluator,
    loaded: LoadedModel,
    out_dir: Path,
    progress: Progress | None = None,
    should_stop: ShouldStop | None = None,
    engine: Engine | None = None,
    on_prefill: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Plan, skip what is recorded, run the rest through the engine in batches (or
    one at a time through `run_sample`), aggregate. `progress(task, done, total)` hears of
    every recorded sample, `on_prefill(tokens)` of every prefilled chunk."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    evaluator.prepare(loaded)
    samples = evaluator.plan(loaded)
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"{evaluator.name}: planned sample ids are not unique")
    log = SampleLog(out_dir / SAMPLES_FILE)
    config = evaluator.config_hash(loaded.describe())
    done = log.done(evaluator.name, config)
    total = len(samples)
    report = progress or (lambda *_: None)
    pending = [s for s in samples if s.id not in done]
    report(evaluator.name, total - len(pending), total)

    def record(sample: Sample, fields: dict[str, Any]) -> None:
        bad = non_finite(fields)
        if bad:  # a model that overflowed: an error on this sample, kept out of the scores
            fields = {**finite_json(fields), "error": f"non-finite values: {', '.join(bad[:5])}"}
        rec = {"task": evaluator.name, "id": sample.id, "config": config, **fields}
        log.append(rec)
        done[sample.id] = rec
        report(evaluator.name, len(done), total)

    def check_stop() -> None:
        if should_stop is not None and should_stop():
            raise EvaluationCancelled(f"{evaluator.name}: stopped after {len(done)} of {total} samples")

    spent = PrefixStats()  # prompt tokens of this run, and those served from the engine's prefix cache
    prefix_enabled: bool | None = None

    def run_samples(pending: list[Sample]) -> None:
        nonlocal engine, spent, prefix_enabled
        if evaluator.run_sample is not None:
            for sample in pending:
                check_stop()
                record(sample, evaluator.run_sample(loaded, sample))
            return

        def finished(built: Built, response: Any) -> None:
            record(built.sample, {**built.record, **evaluator.score(built, response)})
            check_stop()  # a cancel lands mid-batch; every answered sample is already recorded

        engine = engine or Engine(loaded.model, loaded.tokenizer)
        stats = getattr(engine, "stats", None)  # lctx's engine; a served model's (EndpointEngine) has none
        before = replace(stats) if stats is not None else None
        engine.on_prefill = on_prefill
        try:
            for lo in range(0, len(pending), BUILD_GROUP):
                check_stop()
                run_built(engine, [evaluator.build(loaded, s) for s in pending[lo:lo + BUILD_GROUP]], finished)
        finally:
            engine.on_prefill = None
            if before is not None:
                block = engine.stats.since(before)
                spent = PrefixStats(spent.prompt_tokens + block.prompt_tokens,
                                    spent.reused_tokens + block.reused_tokens)
                prefix_enabled = engine.prefix is not None

    if sequential.enabled(evaluator.options):  # block after block, only what the search needs
        ids = [s.id for s in sequential.run(evaluator, samples, done, run_samples)]
        report(evaluator.name, len(ids), len(ids))  # finished: the search needs no more
    else:
        run_samples(pending)
    reuse = {**spent.as_dict(), "enabled": prefix_enabled} if prefix_enabled is not None else None
    records = [done[i] for i in ids]
    scored = [r for r in records if "error" not in r]
    errors = len(records) - len(scored)
    if not scored and errors:
        raise EvaluatorError(f"{evaluator.name}: every one of its {errors} samples failed "
                             f"(first: {records[0]['error']}); see {out_dir / SAMPLES_FILE}")
    result = evaluator.result(records if sequential.enabled(evaluator.options) else scored)
    if errors:
        result.extra["sample_errors"] = errors
        result.summary += f" ({errors} samples failed: non-finite outputs)"
    plot_paths = evaluator.plots(scored, result, out_dir / "plots")
    return {
        "task": evaluator.name,
        "evaluator_version": evaluator.version,
        "seed": evaluator.options.get("seed"),
        "options": evaluator.options,
        "config": config,
        "model": describe_run(loaded),
        "context": context_of(loaded, samples),
        "chat_template": {"applied": bool(evaluator.options.get("chat_template")),
                          "file": getattr(loaded.tokenizer, "chat_template_source", None)},
        "lctx_version": lctx_version(),
        "samples": total,
        "samples_file": str(out_dir / SAMPLES_FILE),
        "plots": [str(p) for p in plot_paths],
        "sample_errors": errors,
        "prefix_cache": reuse,
        RESULT_KEY: finite_json(result.model_dump(mode="json")),
    }


def run_built(engine: Engine, built: list[Built], finished: Callable[[Built, Any], None]) -> None:
    """Hand every request to the engine, one batched call per request type;
    `finished(built, response)` runs the moment each request is answered."""
    calls = ((GenerateRequest, engine.generate_until), (LoglikelihoodRequest, engine.loglikelihood),
             (RollingRequest, engine.loglikelihood_rolling))
    for kind, call in calls:
        group = [b for b in built if isinstance(b.request, kind)]
        if not group:
            continue
        call([b.request for b in group], done=lambda i, response, group=group: finished(group[i], response))
