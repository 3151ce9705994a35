"""A job's cost before it runs: each task planned into samples, prompt tokens to prefill and
tokens to generate (the task options' `planned_samples`, `planned_tokens`, `generated_tokens`),
and the seconds they take on this service's hardware: from the work tokens per second its jobs
measured (a small record in <home>/throughput.json: per checkpoint fingerprint and overall),
or, where no job has been measured yet, from a stated rule. The estimate is linear in tokens:
attention's cost grows with the length, so long prompts take longer than it says.

The cap (LCTX_MAX_JOB_SECONDS) refuses a job estimated over it at submission, naming by how
much and what to lower; a schedule's suite is refused when a job of it would be."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.options import TaskOptions
from service.errors import InvalidRequest
from service.settings import Settings

THROUGHPUT_FILE = "throughput.json"
KEEP = 20  # the last jobs measured, per checkpoint and overall
# The rule where nothing is measured yet: a small model's speeds on one CPU core, one GPU.
RULE = {"cpu": (2_000.0, 20.0), "gpu": (20_000.0, 200.0)}  # (prefill tok/s, decode tok/s)
WARN_SECONDS = 600.0  # a job estimated longer than this is said so in the answer (the estimate is low on long prompts)
_lock = threading.Lock()


@dataclass(frozen=True)
class TaskCost:
    key: str  # tasks[i] (name)
    samples: int | None  # None: the data decides (a data-backed task without a limit)
    prompt_tokens: int | None
    generated_tokens: int | None
    seconds: float | None
    largest: dict[str, int]  # the options that count tokens, their largest values (what to lower)
    resolvable: float | None = None  # the smallest difference its samples per length resolve at 95% (service/resolution.py)
    resolution: str = ""  # how that was reckoned


@dataclass(frozen=True)
class Cost:
    tasks: list[TaskCost]
    basis: str  # how the seconds were estimated: measured, or the rule
    warnings: list[str] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return sum(t.samples or 0 for t in self.tasks)

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_tokens or 0 for t in self.tasks)

    @property
    def generated_tokens(self) -> int:
        return sum(t.generated_tokens or 0 for t in self.tasks)

    @property
    def seconds(self) -> float | None:
        known = [t.seconds for t in self.tasks if t.seconds is not None]
        return round(sum(known), 1) if known else None

    def as_dict(self) -> dict[str, Any]:
        return {"tasks": [{"task": t.key, "samples": t.samples, "prompt_tokens": t.prompt_tokens,
                           "generated_tokens": t.generated_tokens, "seconds": t.seconds,
                           "resolvable": t.resolvable, "resolution": t.resolution} for t in self.tasks],
                "samples": self.samples, "prompt_tokens": self.prompt_tokens,
                "generated_tokens": self.generated_tokens, "seconds": self.seconds, "basis": self.basis,
                "warnings": self.warnings}


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds / 86400:.1f} days"


# --- the record of measured speed ---------------------------------------------------------

def throughput_path(settings: Settings) -> Path:
    return settings.home / THROUGHPUT_FILE


def read_throughput(settings: Settings) -> dict[str, Any]:
    try:
        return json.loads(throughput_path(settings).read_text())
    except (OSError, ValueError):
        return {}


def record_throughput(settings: Settings, fingerprint: str, work_tokens: int, seconds: float) -> None:
    """One finished job's work tokens (prompt tokens planned plus the tokens its samples may
    generate) and the seconds it ran, kept for the next estimates (the last KEEP jobs)."""
    if work_tokens <= 0 or seconds <= 0:
        return
    with _lock:
        record = read_throughput(settings)
        entry = [work_tokens, round(seconds, 3)]
        checkpoints = record.setdefault("checkpoints", {})
        checkpoints[fingerprint] = (checkpoints.get(fingerprint, []) + [entry])[-KEEP:]
        record["overall"] = (record.get("overall", []) + [entry])[-KEEP:]
        write_json_atomic(throughput_path(settings), record)


def measured_speed(settings: Settings, fingerprint: str | None) -> tuple[float, str] | None:
    """Work tokens per second this service's jobs reached: on this checkpoint where it has run,
    else over every checkpoint; None where no job has been measured yet."""
    record = read_throughput(settings)
    for runs, what in (((record.get("checkpoints") or {}).get(fingerprint or ""), "this checkpoint"),
                       (record.get("overall"), "any checkpoint")):
        if runs:
            tokens, seconds = sum(r[0] for r in runs), sum(r[1] for r in runs)
            if seconds > 0:
                rate = tokens / seconds
                return rate, (f"measured: {rate:,.0f} tokens/s of work over the last {len(runs)} job(s) on {what} "
                              "on this service's workers")
    return None


def _hardware(settings: Settings, cluster_gpus: int | None) -> str:
    if settings.device == "cpu" or cluster_gpus == 0 or (cluster_gpus is None and settings.device != "cuda"):
        return "cpu"
    return "gpu"


# --- the plan ------------------------------------------------------------------------------

def plan_job(tasks: list[TaskOptions], settings: Settings, fingerprint: str | None = None,
             cluster_gpus: int | None = None) -> Cost:
    """Every task's samples and tokens, the seconds they take here, and what to warn of."""
    measured = measured_speed(settings, fingerprint)
    hardware = _hardware(settings, cluster_gpus)
    prefill, decode = RULE[hardware]
    basis = measured[1] if measured else (f"no run measured yet: assumed {prefill:,.0f} prefill tok/s and "
                                          f"{decode:,.0f} decode tok/s on {hardware.upper()}")
    costs, warnings = [], []
    for i, spec in enumerate(tasks):
        key = f"tasks[{i}] ({spec.task})"
        samples, prompts = spec.planned_samples(), spec.planned_tokens()
        generated = None if samples is None else samples * spec.generated_tokens()
        seconds = None
        if prompts is not None and generated is not None:
            seconds = (prompts + generated) / measured[0] if measured else prompts / prefill + generated / decode
            seconds = round(seconds, 1)
        else:
            warnings.append(f"{key}: its tokens are not known before its data is read (no estimate of its time)")
        costs.append(TaskCost(key, samples, prompts, generated, seconds, spec.token_counts()))
    cost = Cost(costs, basis, warnings)
    if cost.seconds is not None and cost.seconds > WARN_SECONDS:
        biggest = max((t for t in costs if t.seconds), key=lambda t: t.seconds or 0)
        cap = f"this service's limit is {duration(settings.max_job_seconds)} (LCTX_MAX_JOB_SECONDS)" \
            if settings.max_job_seconds else "no limit is set (LCTX_MAX_JOB_SECONDS)"
        warnings.insert(0, f"this job is estimated at {duration(cost.seconds)} on this service's hardware "
                           f"({basis}), most of it {biggest.key}: {_size(biggest)}; {cap}")
    return cost


def _size(task: TaskCost) -> str:
    return (f"{task.samples:,} samples, {task.prompt_tokens or 0:,} tokens to prefill, "
            f"{task.generated_tokens or 0:,} to generate")


def check_cost(cost: Cost, settings: Settings) -> None:
    """Refused when the estimate is over LCTX_MAX_JOB_SECONDS: by how much, and what to lower."""
    limit, seconds = settings.max_job_seconds, cost.seconds
    if limit is None or seconds is None or seconds <= limit:
        return
    biggest = max((t for t in cost.tasks if t.seconds), key=lambda t: t.seconds or 0)
    largest = sorted(biggest.largest.items(), key=lambda item: -item[1])  # the prompt lengths first
    lengths = ", ".join(f"{name} (largest {value:,})" for name, value in largest)
    raise InvalidRequest(
        f"the job is estimated at {duration(seconds)} on this service's hardware ({cost.basis}), "
        f"{duration(seconds - limit)} over its limit of {duration(limit)} (LCTX_MAX_JOB_SECONDS); most of it is "
        f"{biggest.key}: {_size(biggest)}. Lower its {lengths or 'lengths'} or its samples "
        "(trials, samples, limit), or split it into jobs")
