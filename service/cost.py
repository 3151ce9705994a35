"""A job's cost before it runs: each task planned into samples, prompt tokens to prefill and
tokens to generate, and the seconds they take on this service's hardware. Every token a job
can spend counts: the answers' budgets of every sample (repeats and trials included; RULER's
tokens_to_generate), the think blocks' budgets wherever thinking can be on, and a judge's
prompt, answer and think block per graded sample. Where the options leave the samples or
prompts to the data, they are estimated from the files (`TaskOptions.data_estimate`: the card's
token counts or the bytes); a task whose work still cannot be said is refused when a cap is set.

The seconds come from what this service measured, per model and only for it (issue #60: one
"overall" speed of a fast served model let a big job on a never-measured checkpoint through):

- a checkpoint or endpoint already run here: its own jobs' speed (<home>/throughput.json, the
  last KEEP runs per checkpoint fingerprint or endpoint identity), in FLOPs per second for a
  checkpoint, so longer prompts take longer (attention's length term), in tokens per second for
  a served model (its size is not known);
- a checkpoint never run: its FLOPs (its size and the prompts' lengths) at the rule's FLOPs per
  second (RULE_FLOPS), plus the time a token of work took the other checkpoints measured on the
  same hardware (CPU or GPU workers) besides their own FLOPs at that rate (loading, the engine's
  and the evaluator's own work: what dominates a small model); nothing measured there yet: the
  stated rule (RULE and RULE_FLOPS, whichever is slower);
- a served model never run: the CPU rule (its server's speed is unknown until one of its jobs
  is measured).

FLOPs per token are Kaplan et al.'s forward count: 2 N (N the weight matrices' parameters) plus
2 n_layer n_ctx d_attn for attending to a context of n_ctx tokens (half the prompt on average in
a prefill, the whole prompt while decoding).

The cap (LCTX_MAX_JOB_SECONDS) refuses a job estimated over it at submission, naming by how
much and what to lower; a schedule's suite is refused when a job of it would be."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.options import TaskOptions
from evaluators.progress import duration
from service.core.errors import InvalidRequest
from service.core.settings import Settings

THROUGHPUT_FILE = "throughput.json"
KEEP = 20  # the last jobs measured, per checkpoint fingerprint or endpoint identity
# The rule where nothing is measured yet: a small model's speeds on one CPU core, one GPU ...
RULE = {"cpu": (2_000.0, 20.0), "gpu": (20_000.0, 200.0)}  # (prefill tok/s, decode tok/s)
# ... and, for a checkpoint of known size, the FLOPs per second they reach (a larger model or a
# longer prompt is slower): one core's fp32 matrix products, a GPU's at a modest share of its peak;
# decoding reads every weight for each token, at a tenth of it and less.
RULE_FLOPS = {"cpu": (1e10, 2e9), "gpu": (1e14, 1e12)}  # (prefill FLOP/s, decode FLOP/s)
WARN_SECONDS = 600.0  # a job estimated longer than this is said so in the answer
_lock = threading.Lock()


@dataclass(frozen=True)
class Shape:
    """What a checkpoint's FLOPs per token depend on: its weight matrices' parameters, its
    layers and its attention's width (heads x head size)."""

    parameters: int
    layers: int
    width: int

    def flops(self, prompt_tokens: int, generated_tokens: int, squares: float, mean_prompt: float) -> float:
        """Forward FLOPs of prefilling prompts of `prompt_tokens` in all (`squares`: the sum of
        each prompt's length squared) and generating `generated_tokens` after prompts of
        `mean_prompt` tokens on average."""
        dense = 2.0 * self.parameters * (prompt_tokens + generated_tokens)
        attention = self.layers * self.width * (squares + 2.0 * mean_prompt * generated_tokens)
        return dense + attention


@dataclass(frozen=True)
class ModelFacts:
    """What the estimate knows of the model a job runs: a checkpoint's shape (None for a served
    model, whose size is unknown), whether it marks thinking (its template's delimiters: think
    blocks then take their budget at the default setting too) and whether it is served."""

    shape: Shape | None = None
    thinks: bool = False
    served: bool = False


def checkpoint_facts(path: Path) -> ModelFacts:
    """A checkpoint folder's shape and thinking, from its config and tokenizer files (imported
    here: the CLI's client commands read this module's `duration` without torch)."""
    from checkpoints.config_reader import load_config
    from checkpoints.errors import CheckpointError
    from checkpoints.tokenizer import marks_thinking

    try:
        config = load_config(path)
    except CheckpointError:
        return ModelFacts(None, marks_thinking(path))
    shape = Shape(config.matrix_parameters(), config.num_layers, config.num_heads * config.head_dim)
    return ModelFacts(shape, marks_thinking(path))


def endpoint_facts(tokenizer: str | None) -> ModelFacts:
    """A served model: thinking from its registered tokenizer folder, no shape."""
    from checkpoints.tokenizer import marks_thinking

    return ModelFacts(None, bool(tokenizer) and marks_thinking(tokenizer or ""), served=True)


@dataclass(frozen=True)
class TaskCost:
    key: str  # tasks[i] (name)
    samples: int | None  # None: the data decides and its files did not say
    prompt_tokens: int | None
    generated_tokens: int | None
    seconds: float | None
    largest: dict[str, int]  # the options that count tokens, their largest values (what to lower)
    flops: float | None = None
    estimated: bool = False  # samples or prompts estimated from the data files
    resolvable: float | None = None  # the smallest difference its samples per length resolve at 95% (service/resolution.py)
    resolution: str = ""  # how that was reckoned


@dataclass(frozen=True)
class Cost:
    tasks: list[TaskCost]
    basis: str  # how the seconds were estimated: measured, scaled, or the rule
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
    def flops(self) -> float | None:
        known = [t.flops for t in self.tasks]
        return None if not known or any(f is None for f in known) else float(sum(f or 0 for f in known))

    @property
    def seconds(self) -> float | None:
        known = [t.seconds for t in self.tasks if t.seconds is not None]
        return round(sum(known), 1) if known else None

    @property
    def unknown(self) -> list[TaskCost]:
        """The tasks whose seconds cannot be said before their data is read."""
        return [t for t in self.tasks if t.seconds is None]

    def as_dict(self) -> dict[str, Any]:
        return {"tasks": [{"task": t.key, "samples": t.samples, "prompt_tokens": t.prompt_tokens,
                           "generated_tokens": t.generated_tokens, "seconds": t.seconds,
                           "resolvable": t.resolvable, "resolution": t.resolution} for t in self.tasks],
                "samples": self.samples, "prompt_tokens": self.prompt_tokens,
                "generated_tokens": self.generated_tokens, "seconds": self.seconds, "basis": self.basis,
                "warnings": self.warnings}


# --- the record of measured speed ---------------------------------------------------------

def throughput_path(settings: Settings) -> Path:
    return settings.home / THROUGHPUT_FILE


def read_throughput(settings: Settings) -> dict[str, Any]:
    """The record as data: {"runs": {key: [run, ...]}}, each run {"tokens", "flops", "seconds",
    "hardware"}; an unreadable file or entry counts for nothing. The first layout's per-checkpoint
    lists ([tokens, seconds]) are read as runs of unknown FLOPs and hardware; its "overall" is not
    read (a speed of any model says nothing of another)."""
    try:
        raw = json.loads(throughput_path(settings).read_text())
    except (OSError, ValueError):
        return {"runs": {}}
    if not isinstance(raw, dict):
        return {"runs": {}}
    runs: dict[str, list[dict[str, Any]]] = {}
    for source in (raw.get("checkpoints"), raw.get("runs")):
        for key, entries in (source or {}).items() if isinstance(source, dict) else ():
            kept = [r for e in entries if (r := _run(e)) is not None] if isinstance(entries, list) else []
            if kept:
                runs[str(key)] = (runs.get(str(key), []) + kept)[-KEEP:]
    return {"runs": runs}


def _run(entry: object) -> dict[str, Any] | None:
    """One run of the record, checked (positive numbers), or None."""
    if isinstance(entry, list) and len(entry) == 2:
        entry = {"tokens": entry[0], "seconds": entry[1]}
    if not isinstance(entry, dict):
        return None
    tokens, seconds, flops = entry.get("tokens"), entry.get("seconds"), entry.get("flops")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in (tokens, seconds)):
        return None
    if not (isinstance(flops, int | float) and not isinstance(flops, bool) and flops > 0):
        flops = None
    hardware = entry.get("hardware") if entry.get("hardware") in ("cpu", "gpu", "served") else None
    return {"tokens": tokens, "flops": flops, "seconds": seconds, "hardware": hardware}


def record_throughput(settings: Settings, key: str, work_tokens: int, seconds: float, flops: float | None = None,
                      hardware: str | None = None) -> None:
    """One finished job's work (the tokens, and for a checkpoint the FLOPs, its plan counts) and
    the seconds it ran, kept for the next estimates of the same model (`key`: the checkpoint's
    fingerprint or the endpoint's identity; the last KEEP runs)."""
    if work_tokens <= 0 or seconds <= 0:
        return
    with _lock:
        runs = read_throughput(settings)["runs"]
        entry = {"tokens": work_tokens, "flops": flops, "seconds": round(seconds, 3), "hardware": hardware,
                 "at": int(time.time())}
        runs[key] = (runs.get(key, []) + [entry])[-KEEP:]
        write_json_atomic(throughput_path(settings), {"version": 2, "runs": runs})


def record_job(settings: Settings, job: Any, seconds: float, device: str | None, tokenizer: str | None = None) -> None:
    """A finished job's run recorded under its model's key, its work counted as `plan_job`
    counts it (the same plan: what is measured is what is estimated). `device`: where its
    worker ran ("cpu", "cuda:0"; None for a served model); `tokenizer`: a served model's
    registered tokenizer folder."""
    tasks = [_typed(t) for t in job.tasks]
    facts = endpoint_facts(tokenizer) if job.endpoint else checkpoint_facts(Path(job.checkpoint_path))
    work = [task_work(spec, settings, facts) for spec in tasks]
    if any(w.samples is None or w.prompt_tokens is None for w in work):
        return  # a task whose work is not known: nothing to divide by
    hardware = "served" if job.endpoint else ("gpu" if (device or "").startswith("cuda") else "cpu")
    flops = None if facts.shape is None else sum(w.flops or 0 for w in work)
    record_throughput(settings, job.fingerprint, sum((w.prompt_tokens or 0) + (w.generated_tokens or 0) for w in work),
                      seconds, flops, hardware)


def _typed(task: dict[str, Any]) -> TaskOptions:
    from evaluators.registry import parse_task

    return parse_task(task)


@dataclass(frozen=True)
class Speed:
    """How fast a job's work goes here and why: seconds = flops / flops_per_s (where both are
    known) or tokens / tokens_per_s, the larger of the two where both apply."""

    tokens_per_s: float | None
    flops_per_s: float | None
    basis: str
    rule: tuple[str, ...] | None = None  # the hardware whose stated rule applies (nothing measured)
    overhead: float | None = None  # seconds a token of work costs besides its FLOPs, measured on other checkpoints

    def seconds(self, tokens: int, generated: int, flops: float | None, decode_flops: float | None) -> float:
        if self.overhead is not None and self.rule is not None and flops is not None and decode_flops is not None:
            prefill_f, decode_f = RULE_FLOPS[self.rule[0]]  # a checkpoint scaled from others' runs
            return tokens * self.overhead + (flops - decode_flops) / prefill_f + decode_flops / decode_f
        if self.rule is not None:
            hardware = self.rule[0]
            prefill, decode = RULE[hardware]
            by_tokens = (tokens - generated) / prefill + generated / decode
            if flops is None or decode_flops is None:
                return by_tokens
            prefill_f, decode_f = RULE_FLOPS[hardware]
            return max(by_tokens, (flops - decode_flops) / prefill_f + decode_flops / decode_f)
        out = []
        if self.flops_per_s and flops is not None:
            out.append(flops / self.flops_per_s)
        if self.tokens_per_s:
            out.append(tokens / self.tokens_per_s)
        return max(out) if out else 0.0


def speed(settings: Settings, key: str | None, facts: ModelFacts, hardware: str) -> Speed:
    """The speed a job of this model is estimated at (see the module's docstring)."""
    runs = read_throughput(settings)["runs"]
    own = runs.get(key or "", [])
    what = "served model" if facts.served else "checkpoint"
    if own:
        seconds = sum(r["seconds"] for r in own)
        tokens = sum(r["tokens"] for r in own) / seconds
        if facts.shape is not None and all(r["flops"] for r in own):
            flops = sum(r["flops"] for r in own) / seconds
            return Speed(None, flops, f"measured: {flops:,.3g} FLOP/s ({tokens:,.0f} tokens/s of work) over the "
                                      f"last {len(own)} job(s) of this {what} on this service's workers")
        return Speed(tokens, None, f"measured: {tokens:,.0f} tokens/s of work over the last {len(own)} job(s) of "
                                   f"this {what}")
    if facts.shape is not None:
        others = [r for k, rs in runs.items() if k != key for r in rs if r["flops"] and r["hardware"] == hardware]
        if others:
            seconds, tokens = sum(r["seconds"] for r in others), sum(r["tokens"] for r in others)
            compute = sum(r["flops"] for r in others) / RULE_FLOPS[hardware][0]
            overhead = max(0.0, seconds - compute) / tokens
            return Speed(None, None, f"this checkpoint has not run here yet: {overhead * 1000:,.2f} ms a token of "
                                     f"work besides its FLOPs, as {len(others)} job(s) of other checkpoints took on "
                                     f"this service's {hardware.upper()} workers, and its FLOPs (its size and the "
                                     "prompts' lengths) at the rule's rate", rule=(hardware,), overhead=overhead)
    if facts.served:
        prefill, decode = RULE["cpu"]
        return Speed(None, None, f"this served model has not run here yet: assumed {prefill:,.0f} prefill tok/s and "
                                 f"{decode:,.0f} decode tok/s (the CPU rule) until one of its jobs is measured",
                     rule=("cpu",))
    prefill, decode = RULE[hardware]
    basis = f"no run measured yet: assumed {prefill:,.0f} prefill tok/s and {decode:,.0f} decode tok/s on " \
            f"{hardware.upper()}"
    if facts.shape is not None:
        prefill_f, decode_f = RULE_FLOPS[hardware]
        basis += f", or {prefill_f:,.3g} and {decode_f:,.3g} FLOP/s at its size, whichever is slower"
    return Speed(None, None, basis, rule=(hardware,))


def _hardware(settings: Settings, cluster_gpus: int | None) -> str:
    if settings.device == "cpu" or cluster_gpus == 0 or (cluster_gpus is None and settings.device != "cuda"):
        return "cpu"
    return "gpu"


# --- the plan ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Work:
    """A task's work as the estimate counts it."""

    samples: int | None
    prompt_tokens: int | None
    generated_tokens: int | None
    flops: float | None
    decode_flops: float | None
    estimated: bool


def task_work(spec: TaskOptions, settings: Settings, facts: ModelFacts) -> Work:
    """Every token one task can spend: its prompts (from the data's files where the options
    leave them to it), its answers' budgets, its think blocks' budgets where thinking can be on,
    a judge's prompt, answer and think block per graded sample; and their FLOPs on a checkpoint."""
    samples, prompts = spec.planned_samples(), spec.planned_tokens()
    answers = spec.planned_generated()
    estimated = False
    if prompts is None or samples is None:
        data_dir = settings.data_dir.absolute() if settings.data_dir else None
        found_samples, found_prompts = spec.data_estimate(data_dir)
        estimated = (samples is None and found_samples is not None) or (prompts is None and found_prompts is not None)
        samples = samples if samples is not None else found_samples
        prompts = prompts if prompts is not None else found_prompts
        if answers is None and samples is not None:
            answers = samples * spec.generated_tokens()
    if samples is None or prompts is None or answers is None:
        return Work(samples, prompts, None, None, None, estimated)
    judge_prompt, judge_answer = spec.judge_tokens()
    generated = answers + samples * (spec.thinking_tokens(facts.thinks) + judge_answer)
    prompts += samples * judge_prompt
    if facts.shape is None:
        return Work(samples, prompts, generated, None, None, estimated)
    mean = prompts / max(1, samples)
    given = spec.lengths_option()
    lengths = [n for n in given if isinstance(n, int)]  # token counts (not MRCR v2's named bins)
    if lengths and len(lengths) == len(given) and sum(lengths):
        squares = prompts / sum(lengths) * sum(n * n for n in lengths)  # the lengths asked for, in proportion
    else:
        squares = prompts * mean  # every prompt of the mean length (a lower bound where lengths vary)
    shape = facts.shape
    flops = shape.flops(prompts, generated, squares, mean)
    decode = shape.flops(0, generated, 0.0, mean)
    return Work(samples, prompts, generated, flops, decode, estimated)


def plan_job(tasks: list[TaskOptions], settings: Settings, fingerprint: str | None = None,
             cluster_gpus: int | None = None, model: ModelFacts | None = None) -> Cost:
    """Every task's samples and tokens, the seconds they take here for this model (`fingerprint`:
    its checkpoint's or endpoint's key; `model`: what is known of it), and what to warn of."""
    facts = model or ModelFacts()
    hardware = _hardware(settings, cluster_gpus)
    rate = speed(settings, fingerprint, facts, hardware)
    costs, warnings = [], []
    for i, spec in enumerate(tasks):
        key = f"tasks[{i}] ({spec.task})"
        work = task_work(spec, settings, facts)
        seconds = None
        if work.prompt_tokens is not None and work.generated_tokens is not None:
            seconds = round(rate.seconds(work.prompt_tokens + work.generated_tokens, work.generated_tokens,
                                         work.flops, work.decode_flops), 1)
            if work.estimated:
                warnings.append(f"{key}: its samples and prompt tokens are estimated from its data files (the card's "
                                "token counts, or the files' size at about 4 bytes a token) before they are read")
        else:
            warnings.append(f"{key}: its tokens are not known before its data is read (no estimate of its time); "
                            "give it a `limit` to plan it")
        costs.append(TaskCost(key, work.samples, work.prompt_tokens, work.generated_tokens, seconds,
                              spec.token_counts(), work.flops, work.estimated))
    cost = Cost(costs, rate.basis, warnings)
    if cost.seconds is not None and cost.seconds > WARN_SECONDS:
        biggest = max((t for t in costs if t.seconds), key=lambda t: t.seconds or 0)
        cap = f"this service's limit is {duration(settings.max_job_seconds)} (LCTX_MAX_JOB_SECONDS)" \
            if settings.max_job_seconds else "no limit is set (LCTX_MAX_JOB_SECONDS)"
        warnings.insert(0, f"this job is estimated at {duration(cost.seconds)} on this service's hardware "
                           f"({rate.basis}), most of it {biggest.key}: {_size(biggest)}; {cap}")
    return cost


def _size(task: TaskCost) -> str:
    return (f"{task.samples or 0:,} samples, {task.prompt_tokens or 0:,} tokens to prefill, "
            f"{task.generated_tokens or 0:,} to generate (answers, think blocks and a judge's, at their budgets)")


def check_cost(cost: Cost, settings: Settings) -> None:
    """Refused when the estimate is over LCTX_MAX_JOB_SECONDS (by how much, and what to lower),
    or, with a limit set, when a task's work cannot be estimated before its data is read."""
    limit, seconds = settings.max_job_seconds, cost.seconds
    if limit is None:
        return
    if cost.unknown:
        task = cost.unknown[0]
        raise InvalidRequest(
            f"{task.key}: its samples or prompt tokens are not known before its data is read, and this service "
            f"limits a job to {duration(limit)} by its estimate (LCTX_MAX_JOB_SECONDS); give the task a `limit` "
            "(its first N questions) so its work can be estimated, or split it into jobs")
    if seconds is None or seconds <= limit:
        return
    biggest = max((t for t in cost.tasks if t.seconds), key=lambda t: t.seconds or 0)
    largest = sorted(biggest.largest.items(), key=lambda item: -item[1])  # the prompt lengths first
    lengths = ", ".join(f"{name} (largest {value:,})" for name, value in largest)
    raise InvalidRequest(
        f"the job is estimated at {duration(seconds)} on this service's hardware ({cost.basis}), "
        f"{duration(seconds - limit)} over its limit of {duration(limit)} (LCTX_MAX_JOB_SECONDS); most of it is "
        f"{biggest.key}: {_size(biggest)}. Lower its {lengths or 'lengths'} or its samples "
        "(trials, samples, limit, repeats), or split it into jobs")
