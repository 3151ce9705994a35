"""A run's progress as people read it and the service stores it: per task, samples done of
its planned total (known for every task from the start), prompt tokens prefilled, the
measured prefill speed and an ETA; `lctx eval`'s bars and the service's job rows show the
same numbers (`JobProgress`), and say them the same way (`tokens_text`, `duration`).

A batch of long prompts is prefilled before its first sample finishes, so counting samples
alone shows 0/30 for minutes: the engine reports each prefilled chunk (`Engine.on_prefill`)
and the ETA is taken from tokens when the task's options say how many it will read (their
`planned_tokens`), else from samples. Updates are written at most every `every` seconds,
and a throttled update is written by a timer when its burst ends, so the written state never
stays behind the work. Pydantic only (the client commands print progress with it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evaluators.options import TaskOptions
from evaluators.registry import parse_task


def duration(seconds: float) -> str:
    """A duration as people read it (`lctx eval`'s ETA, a job's, the cost plan's warnings)."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds / 86400:.1f} days"


@dataclass(frozen=True)
class PlannedWork:
    """What a task's options plan, read from them typed once: samples (0 where the data
    decides), prompt tokens and tokens of work (prompt tokens plus the tokens each sample may
    generate; None where unknown), and whether a sequential search runs it (each block
    decides the next, so it is never split)."""

    samples: int
    prompt_tokens: int | None
    work_tokens: int | None
    sequential: bool


def plan_of(task: dict[str, Any] | TaskOptions) -> PlannedWork:
    """The plan of a task spec as a job records it (typed here: the JSON boundary) or of
    options already typed."""
    options = task if isinstance(task, TaskOptions) else parse_task(task)
    samples, prompts = options.planned_samples() or 0, options.planned_tokens()
    work = None if prompts is None else prompts + (options.planned_generated() or 0)
    return PlannedWork(samples, prompts, work, options.sequential())


def tokens_text(done: int, total: int, tokens: int, planned: int | None, tokens_per_s: float | None) -> str:
    """A task's prefill as people read it: tokens of the planned total while it runs (the plan
    is an estimate), the tokens reached once its samples are done, and the measured speed."""
    if not tokens:
        return ""
    planned_text = f"/{planned:,}" if planned and done < total and tokens < planned else ""
    speed = f" ({tokens_per_s:,.0f} tok/s)" if tokens_per_s else ""
    return f"{tokens:,}{planned_text} tokens prefilled{speed}"


class JobProgress:
    """Per-task progress of one job run, written through `write(state)` (the store)."""

    def __init__(self, write: Callable[[dict[str, dict[str, Any]]], None], tasks: dict[str, dict[str, Any]],
                 previous: dict[str, dict[str, Any]] | None = None, every: float = 0.5) -> None:
        self.write, self.every = write, every
        self.lock = threading.Lock()
        self.state: dict[str, dict[str, Any]] = {}
        self.started: dict[str, tuple[float, int]] = {}  # task -> (monotonic start, samples done then)
        self.plans = {key: plan_of(task) for key, task in tasks.items()}  # typed once per job run
        for key, plan in self.plans.items():
            old = (previous or {}).get(key, {})
            self.state[key] = {"done": int(old.get("done", 0)), "total": max(plan.samples, int(old.get("total", 0))),
                               "tokens": 0, "planned_tokens": plan.prompt_tokens, "tokens_per_s": None,
                               "eta_s": None}
        self.last = 0.0
        self.timer: threading.Timer | None = None

    # --- what the evaluators call ----------------------------------------------------

    def samples(self, key: str) -> Callable[[str, int, int], None]:
        def report(_label: str, done: int, total: int) -> None:
            self.set(key, done=done, total=total)

        return report

    def prefilled(self, key: str) -> Callable[[int], None]:
        def report(tokens: int) -> None:
            self.set(key, tokens=self.state[key]["tokens"] + int(tokens))

        return report

    def set(self, key: str, done: int | None = None, total: int | None = None, tokens: int | None = None) -> None:
        """A task's samples done, planned total or tokens prefilled as measured now; the
        estimates follow and the state is written (throttled)."""
        with self.lock:
            cell = self.state[key]
            self.started.setdefault(key, (time.monotonic(), cell["done"] if done is None else int(done)))
            changed = any(v is not None and v != cell[k] for k, v in (("done", done), ("total", total),
                                                                       ("tokens", tokens)))
            if not changed:
                return
            for name, value in (("done", done), ("total", total), ("tokens", tokens)):
                if value is not None:
                    cell[name] = int(value)
            self._estimate(key)
        self.flush(force=False)

    # --- estimates and writes --------------------------------------------------------

    def _estimate(self, key: str) -> None:
        """Speed and ETA of the task from what this run measured: the share of its planned
        tokens prefilled (samples recorded before this run counted as theirs), else of its
        samples done."""
        cell = self.state[key]
        start, done_before = self.started[key]
        elapsed = time.monotonic() - start
        if elapsed <= 0 or cell["total"] <= 0:
            return
        cell["tokens_per_s"] = round(cell["tokens"] / elapsed, 1) if cell["tokens"] else None
        before = done_before / cell["total"]
        share = cell["done"] / cell["total"]
        if cell["planned_tokens"]:  # planned tokens are an estimate: once reached, the samples left say the rest
            by_tokens = before + cell["tokens"] / cell["planned_tokens"]
            share = by_tokens if by_tokens < 1.0 else share
        gained = share - before
        if cell["done"] >= cell["total"]:
            cell["eta_s"] = 0.0
        elif gained > 0:  # never 0 s while samples remain
            cell["eta_s"] = max(0.1, round(elapsed * (1 - share) / gained, 1))
        else:
            cell["eta_s"] = None  # measuring again: the prompts are read, no sample of this run has finished

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {k: dict(v) for k, v in self.state.items()}

    def flush(self, force: bool = True) -> None:
        """Write now when forced or `every` seconds have passed; otherwise make sure a timer
        writes this state when the interval ends (the last update of a burst is never lost)."""
        now = time.monotonic()
        with self.lock:
            due = force or now - self.last >= self.every
            if not due:
                if self.timer is None:
                    self.timer = threading.Timer(self.every - (now - self.last), self._timed)
                    self.timer.daemon = True
                    self.timer.start()
                return
            self.last = now
        self.write(self.snapshot())

    def _timed(self) -> None:
        with self.lock:
            self.timer = None
        self.flush(force=True)

    def heartbeat(self, interval: float = 1.0) -> None:
        """Re-estimate and write every `interval` seconds whatever the work reports (`lctx eval`'s
        bars): a long prefill's ETA grows with the time it takes instead of standing still, and the
        elapsed time moves. The service writes on reports only (its store is not a terminal)."""
        stop = self._beating = threading.Event()

        def beat() -> None:
            while not stop.wait(interval):
                with self.lock:
                    for key, cell in self.state.items():
                        if key in self.started and cell["done"] < cell["total"]:
                            self._estimate(key)
                self.flush(force=True)

        threading.Thread(target=beat, name="lctx-progress-heartbeat", daemon=True).start()

    def close(self, write: bool = True) -> dict[str, dict[str, Any]]:
        """No more timed writes; the last state, written unless `write` is False (the job's end
        writes it with its status: `Store.finish`)."""
        beating = getattr(self, "_beating", None)
        if beating is not None:
            beating.set()
        with self.lock:
            timer, self.timer = self.timer, None
        if timer is not None:
            timer.cancel()
        if write:
            self.flush(force=True)
        return self.snapshot()
