"""What every evaluator shares: errors, the sample log that makes runs resumable,
and the loop that turns a plan of samples into scored records and a result.

An evaluator plans its samples cheaply (ids and parameters, no model calls),
runs one sample at a time into a JSON record, and aggregates the records.
`run` appends each record to `samples.jsonl` as soon as it is scored and skips
ids already recorded under the same configuration, so an interrupted run
picks up where it stopped and every sample is scored exactly once."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, ClassVar

from checkpoints.loading import LoadedModel

SAMPLES_FILE = "samples.jsonl"

Progress = Callable[[str, int, int], None]
ShouldStop = Callable[[], bool]


class EvaluatorError(ValueError):
    """Bad options or missing data; the message says what to do."""


class EvaluationCancelled(Exception):
    """`should_stop` asked the run to stop between samples; finished samples are kept."""


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


class Evaluator:
    """Base of every evaluator. Subclasses set `name`, `version`, `defaults` and
    implement `plan`, `run_sample` and `aggregate`."""

    name: ClassVar[str] = ""
    # Bump whenever prompts, truncation or scoring change: results record it.
    version: ClassVar[str] = "1"
    defaults: ClassVar[dict[str, Any]] = {}
    # Options that only choose which samples run (not how a sample is built or
    # scored); they stay out of the configuration hash so a run with more
    # lengths or trials reuses the samples already scored.
    selection: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: dict[str, Any], data_dir: Path | None = None) -> None:
        self.options = options
        self.data_dir = Path(data_dir) if data_dir is not None else None

    # --- options ----------------------------------------------------------

    @classmethod
    def validate(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Defaults filled in, unknown options refused, types checked by `check`."""
        unknown = sorted(set(options) - set(cls.defaults))
        if unknown:
            raise EvaluatorError(
                f"{cls.name}: unknown options {unknown}; it accepts {sorted(cls.defaults)}"
            )
        merged = {**cls.defaults, **{k: v for k, v in options.items() if v is not None}}
        return cls.check(merged)

    @classmethod
    def check(cls, options: dict[str, Any]) -> dict[str, Any]:
        return options

    def config_hash(self, model: dict[str, Any] | None = None) -> str:
        """Identity of how samples are built and scored: task, version, options that are not
        mere selection, and the model's description (another RoPE scaling or variant must not
        reuse records)."""
        kept = {k: v for k, v in self.options.items() if k not in self.selection}
        canonical = json.dumps({"task": self.name, "version": self.version, "options": kept, "model": model},
                               sort_keys=True, default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    # --- what subclasses implement ------------------------------------------

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        raise NotImplementedError

    def run_sample(self, loaded: LoadedModel, sample: Sample) -> dict[str, Any]:
        """The record of one sample: at least prompt_tokens, truncated, prediction,
        references and score (the base adds task, id and config)."""
        raise NotImplementedError

    def aggregate(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def plots(self, records: list[dict[str, Any]], aggregates: dict[str, Any], folder: Path) -> list[Path]:
        return []

    def prepare(self, loaded: LoadedModel) -> None:
        """Work done once before the first sample (loading data files, ...)."""


class SampleLog:
    """Append-only JSONL of finished samples, read back to resume."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def done(self, task: str, config: str) -> dict[str, dict[str, Any]]:
        """Records already finished for this task and configuration, by id."""
        found: dict[str, dict[str, Any]] = {}
        if not self.path.is_file():
            return found
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash: that sample runs again
                if rec.get("task") == task and rec.get("config") == config:
                    found.setdefault(rec["id"], rec)
        return found

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A crash may have left a partial last line; start on a fresh line then.
        needs_newline = False
        if self.path.is_file() and self.path.stat().st_size:
            with self.path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                needs_newline = f.read(1) != b"\n"
        with self.path.open("a", encoding="utf-8") as f:
            f.write(("\n" if needs_newline else "") + json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())


def describe_run(loaded: LoadedModel) -> dict[str, Any]:
    """The model's description plus what `backend: auto` resolved to on this device (the
    attention implementation that actually ran: triton on CUDA, torch elsewhere)."""
    model = loaded.model
    return {**loaded.describe(), "resolved_backend": model.resolved_backend.value,
            "device": str(model.device)}


def run_evaluator(
    evaluator: Evaluator,
    loaded: LoadedModel,
    out_dir: Path,
    progress: Progress | None = None,
    should_stop: ShouldStop | None = None,
) -> dict[str, Any]:
    """Plan, skip what is recorded, run the rest one sample at a time, aggregate."""
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
    finished = sum(1 for i in ids if i in done)
    report = progress or (lambda *_: None)
    report(evaluator.name, finished, total)
    for sample in samples:
        if sample.id in done:
            continue
        if should_stop is not None and should_stop():
            raise EvaluationCancelled(f"{evaluator.name}: stopped after {finished} of {total} samples")
        record = {"task": evaluator.name, "id": sample.id, "config": config,
                  **evaluator.run_sample(loaded, sample)}
        log.append(record)
        done[sample.id] = record
        finished += 1
        report(evaluator.name, finished, total)
    records = [done[i] for i in ids]
    aggregates = evaluator.aggregate(records)
    plot_paths = evaluator.plots(records, aggregates, out_dir / "plots")
    return {
        "task": evaluator.name,
        "evaluator_version": evaluator.version,
        "seed": evaluator.options.get("seed"),
        "options": evaluator.options,
        "config": config,
        "model": describe_run(loaded),
        "lctx_version": lctx_version(),
        "samples": total,
        "samples_file": str(out_dir / SAMPLES_FILE),
        "plots": [str(p) for p in plot_paths],
        **aggregates,
    }


def as_int_list(name: str, value: Any, task: str, minimum: int = 1) -> list[int]:
    """Lengths and the like: a list of ints (or a comma-separated string) >= minimum."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, Iterable) or isinstance(value, dict):
        raise EvaluatorError(f"{task}: {name} must be a list of integers, got {value!r}")
    out = []
    for v in value:
        try:
            iv = int(v)
        except (TypeError, ValueError):
            raise EvaluatorError(f"{task}: {name} must be integers, got {v!r}") from None
        if isinstance(v, float) and v != iv or isinstance(v, bool):
            raise EvaluatorError(f"{task}: {name} must be integers, got {v!r}")
        if iv < minimum:
            raise EvaluatorError(f"{task}: every value of {name} must be >= {minimum}, got {iv}")
        out.append(iv)
    if not out:
        raise EvaluatorError(f"{task}: {name} must not be empty")
    return out


def as_int(name: str, value: Any, task: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise EvaluatorError(f"{task}: {name} must be an integer, got {value!r}")
    try:
        iv = int(value)
    except ValueError:
        raise EvaluatorError(f"{task}: {name} must be an integer, got {value!r}") from None
    if minimum is not None and iv < minimum:
        raise EvaluatorError(f"{task}: {name} must be >= {minimum}, got {iv}")
    return iv
