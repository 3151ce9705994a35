"""A run's progress as people read it and the service stores it: per task, samples done of
its planned total (known for every task from the start), prompt tokens prefilled, tokens
generated, the measured prefill speed and an ETA; `lctx eval`'s bars and the service's job rows
show the same numbers (`JobProgress`), and say them the same way (`tokens_text`, `duration`).

A batch of long prompts is prefilled before its first sample finishes, and decoded together
after, so counting samples alone shows 0/30 for minutes: the engine reports each prefilled chunk
(`Engine.on_prefill`, a layer at a time) and each decoding step (`Engine.on_generated`), and the
ETA weighs the prompt and generated tokens the task's options plan (`planned_tokens`,
`planned_generated`) by the time each kind took so far (`evaluators.eta.Eta`), else counts
samples. Prompt tokens the prefix cache serves (`Engine.on_reused`) count as prefilled but took no
time, and those it should serve (`Engine.on_foreseen`) are not left to read. Updates are written at most every `every` seconds, and a throttled update is written by
a timer when its burst ends, so the written state never stays behind the work. Pydantic only (the
client commands print progress with it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evaluators.eta import Eta
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
    generated_tokens: int | None = None  # the answers' budgets (None: the data decides)


def plan_of(task: dict[str, Any] | TaskOptions) -> PlannedWork:
    """The plan of a task spec as a job records it (typed here: the JSON boundary) or of
    options already typed."""
    options = task if isinstance(task, TaskOptions) else parse_task(task)
    samples, prompts, generated = options.planned_samples() or 0, options.planned_tokens(), options.planned_generated()
    work = None if prompts is None else prompts + (generated or 0)
    return PlannedWork(samples, prompts, work, options.sequential(), generated)


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
                 previous: dict[str, dict[str, Any]] | None = None, every: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.write, self.every, self.clock = write, every, clock  # clock: a test's own time
        self.lock = threading.Lock()
        self.state: dict[str, dict[str, Any]] = {}
        self.started: dict[str, Eta] = {}  # task -> its estimate, from the moment this run first heard of it
        # task -> [prompt tokens the prefix cache served in this run, those it should still serve]
        self.reuse: dict[str, list[int]] = {key: [0, 0] for key in tasks}
        self.plans = {key: plan_of(task) for key, task in tasks.items()}  # typed once per job run
        for key, plan in self.plans.items():
            old = (previous or {}).get(key, {})
            self.state[key] = {"done": int(old.get("done", 0)), "total": max(plan.samples, int(old.get("total", 0))),
                               "tokens": 0, "planned_tokens": plan.prompt_tokens, "tokens_per_s": None,
                               "generated": 0, "eta_s": None}
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

    def reused(self, key: str) -> Callable[[int], None]:
        """Prompt tokens the prefix cache served: prefilled as far as the count goes, in no time."""
        def report(tokens: int) -> None:
            served, pending = self.reuse[key]
            self.set(key, tokens=self.state[key]["tokens"] + int(tokens), reused=served + int(tokens),
                     pending=max(0, pending - int(tokens)))

        return report

    def foreseen(self, key: str) -> Callable[[int], None]:
        """Prompt tokens the prefix cache should serve in the engine's call starting now (what an
        earlier call foresaw and did not serve is no longer expected)."""
        def report(tokens: int) -> None:
            self.set(key, pending=int(tokens))

        return report

    def generated(self, key: str) -> Callable[[int], None]:
        def report(tokens: int) -> None:
            self.set(key, generated=self.state[key]["generated"] + int(tokens))

        return report

    def set(self, key: str, done: int | None = None, total: int | None = None, tokens: int | None = None,
            generated: int | None = None, reused: int | None = None, pending: int | None = None) -> None:
        """A task's samples done, planned total, tokens prefilled or generated as measured now
        (the first call starts the task's clock: what was counted then is an earlier run's);
        the estimates follow and the state is written (throttled). `reused`: how many of the
        tokens the prefix cache served, `pending`: how many more it should serve (foreseen)."""
        fields = (("done", done), ("total", total), ("tokens", tokens), ("generated", generated))
        with self.lock:
            cell, reuse = self.state[key], self.reuse[key]
            moved = [v is not None and v != now for v, now in zip((reused, pending), reuse, strict=True)]
            reuse[:] = [now if v is None else int(v) for v, now in zip((reused, pending), reuse, strict=True)]
            if key not in self.started:
                plan = self.plans[key]
                first = {name: cell[name] if value is None else int(value) for name, value in fields}
                self.started[key] = Eta(plan.prompt_tokens, plan.generated_tokens, plan.samples, first["done"],
                                        first["tokens"], first["generated"], self.clock(), reuse[0])
            changed = any(v is not None and v != cell[k] for k, v in fields) or any(moved)
            if not changed:
                return
            for name, value in fields:
                if value is not None:
                    cell[name] = int(value)
            self._estimate(key)
        self.flush(force=False)

    # --- estimates and writes --------------------------------------------------------

    def _estimate(self, key: str) -> None:
        """Speed and ETA of the task from what this run measured (`Eta`: the prompt and
        generated tokens its plan has left, each at the time a token of its kind took)."""
        cell, eta = self.state[key], self.started[key]
        now = self.clock()
        tokens, generated = cell["tokens"], cell["generated"]
        served, pending = self.reuse[key]
        eta.observe(now, tokens, generated, served)
        elapsed = now - eta.start
        read = tokens - eta.tokens - (served - eta.served)  # this run's tokens read, not served
        if elapsed > 0 and read > 0:
            cell["tokens_per_s"] = round(read / elapsed, 1)
        cell["eta_s"] = eta.seconds_left(now, cell["done"], cell["total"], tokens, generated, pending)

    def tick(self) -> None:
        """Re-estimate every running task now, whatever it reported (the heartbeat): time passing
        without work is measured too."""
        with self.lock:
            for key, cell in self.state.items():
                if key in self.started and cell["done"] < cell["total"]:
                    self._estimate(key)

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
        elapsed time moves. Beats keep to their times (a late one does not push the next back). The
        service writes on reports only (its store is not a terminal)."""
        stop = self._beating = threading.Event()

        def beat() -> None:
            due = time.monotonic() + interval
            while not stop.wait(max(0.0, due - time.monotonic())):
                self.tick()
                self.flush(force=True)
                due = max(due + interval, time.monotonic() + interval / 4)

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
