"""A running job's progress as the store keeps it and clients show it: per task, samples
done of its planned total (known for every task from the start), prompt tokens prefilled,
the measured prefill speed and an ETA.

A batch of long prompts is prefilled before its first sample finishes, so counting samples
alone shows 0/30 for minutes: the engine reports each prefilled chunk (`Engine.on_prefill`)
and the ETA is taken from tokens when the task's options say how many it will read (their
`planned_tokens`), else from samples. Updates are written at most every `every` seconds,
and a throttled update is written by a timer when its burst ends, so the stored state never
stays behind the work."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from evaluators.registry import task_options


def planned(task: dict[str, Any]) -> tuple[int, int | None]:
    """(samples, prompt tokens) a task's options plan; 0 / None where the data decides."""
    opts = task_options()[task["name"]].model_validate({k: v for k, v in task.items() if k != "name"})
    return opts.planned_samples() or 0, opts.planned_tokens()


class JobProgress:
    """Per-task progress of one job run, written through `write(state)` (the store)."""

    def __init__(self, write: Callable[[dict[str, dict[str, Any]]], None], tasks: dict[str, dict[str, Any]],
                 previous: dict[str, dict[str, Any]] | None = None, every: float = 0.5) -> None:
        self.write, self.every = write, every
        self.lock = threading.Lock()
        self.state: dict[str, dict[str, Any]] = {}
        self.started: dict[str, tuple[float, int]] = {}  # task -> (monotonic start, samples done then)
        for key, task in tasks.items():
            samples, tokens = planned(task)
            old = (previous or {}).get(key, {})
            self.state[key] = {"done": int(old.get("done", 0)), "total": max(samples, int(old.get("total", 0))),
                               "tokens": 0, "planned_tokens": tokens, "tokens_per_s": None, "eta_s": None}
        self.last = 0.0
        self.timer: threading.Timer | None = None

    # --- what the evaluators call ----------------------------------------------------

    def samples(self, key: str) -> Callable[[str, int, int], None]:
        def report(_label: str, done: int, total: int) -> None:
            with self.lock:
                cell = self.state[key]
                self.started.setdefault(key, (time.monotonic(), int(done)))
                cell["done"], cell["total"] = int(done), int(total)
                self._estimate(key)
            self.flush(force=False)

        return report

    def prefilled(self, key: str) -> Callable[[int], None]:
        def report(tokens: int) -> None:
            with self.lock:
                self.started.setdefault(key, (time.monotonic(), self.state[key]["done"]))
                self.state[key]["tokens"] += int(tokens)
                self._estimate(key)
            self.flush(force=False)

        return report

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
        if cell["planned_tokens"]:
            share = min(1.0, before + cell["tokens"] / cell["planned_tokens"])
        else:
            share = cell["done"] / cell["total"]
        gained = share - before
        if cell["done"] >= cell["total"]:
            cell["eta_s"] = 0.0
        elif gained > 0:
            cell["eta_s"] = round(elapsed * (1 - share) / gained, 1)

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

    def close(self) -> None:
        with self.lock:
            timer, self.timer = self.timer, None
        if timer is not None:
            timer.cancel()
        self.flush(force=True)
