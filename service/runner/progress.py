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

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.options import TaskOptions
from evaluators.registry import parse_task
from evaluators.samplelog import UNITS_DIR, sample_files


@dataclass(frozen=True)
class Plan:
    """What a task's options plan, read from them typed once: samples (0 where the data
    decides), prompt tokens and tokens of work (prompt tokens plus the tokens each sample may
    generate; None where unknown), and whether a sequential search runs it (each block
    decides the next, so it is never split)."""

    samples: int
    prompt_tokens: int | None
    work_tokens: int | None
    sequential: bool


def plan_of(task: dict[str, Any] | TaskOptions) -> Plan:
    """The plan of a task spec as a job records it (typed here: the JSON boundary) or of
    options already typed."""
    options = task if isinstance(task, TaskOptions) else parse_task(task)
    samples, prompts = options.planned_samples() or 0, options.planned_tokens()
    work = None if prompts is None else prompts + (options.planned_generated() or 0)
    return Plan(samples, prompts, work, options.sequential())


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

    def close(self, write: bool = True) -> dict[str, dict[str, Any]]:
        """No more timed writes; the last state, written unless `write` is False (the job's end
        writes it with its status: `Store.finish`)."""
        with self.lock:
            timer, self.timer = self.timer, None
        if timer is not None:
            timer.cancel()
        if write:
            self.flush(force=True)
        return self.snapshot()


NOTE_SUFFIX = ".json"  # beside a unit run's records (`units/<run>.jsonl`): `units/<run>.json`


class UnitNote:
    """What a unit run reports beside its records, in `units/<run>.json` (written by the
    coordinator from the worker's mail, `service.runner.mail`): the unit, its label and the
    job's attempt it ran in, when it started, where (pid, host), how many of its slice's
    samples an earlier run had recorded (`resumed`), the prompt tokens it prefilled so far
    (throttled; records alone say nothing during a long prefill) and, at its end, the samples it
    recorded, the prompt tokens it asked for and those the prefix cache served. Notes outlive
    their records (merged into samples.jsonl): every unit run of every attempt of the job has
    one (results' `work`). `send(state)` gets every new state, each with a growing `seq`."""

    def __init__(self, send: Callable[[dict[str, Any]], None], unit: str, every: float = 0.5,
                 **about: Any) -> None:
        self.send, self.every, self.last = send, every, 0.0
        self.state: dict[str, Any] = {"unit": unit, **about, "started": time.time(), "tokens": 0, "pid": os.getpid(),
                                      "host": socket.gethostname(), "seq": 0}

    def prefilled(self, tokens: int) -> None:
        self.state["tokens"] += int(tokens)
        if time.monotonic() - self.last >= self.every:
            self.write()

    def write(self, **final: Any) -> None:
        self.state.update(final)
        self.state["seq"] += 1
        self.send(dict(self.state))
        self.last = time.monotonic()


def write_note(folder: Path, run: str, state: dict[str, Any]) -> None:
    """A unit run's note, replaced whole (`units/<run>.json`)."""
    path = Path(folder) / UNITS_DIR / f"{run}{NOTE_SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, state)


def unit_notes(folder: Path) -> list[dict[str, Any]]:
    """Every unit run's note in a task folder (a note being replaced is read whole or not at all)."""
    units = Path(folder) / UNITS_DIR
    notes = []
    for f in sorted(units.glob(f"*{NOTE_SUFFIX}")) if units.is_dir() else []:
        try:
            notes.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return notes


def prefix_use(folder: Path) -> dict[str, Any] | None:
    """The task's prompt tokens and the share its prefix cache served, summed over the unit
    runs that finished (None where none ran lctx's engine: a served model)."""
    runs = [n for n in unit_notes(folder) if n.get("enabled") is not None]
    if not runs:
        return None
    prompt, reused = sum(n["prompt_tokens"] for n in runs), sum(n["reused_tokens"] for n in runs)
    return {"prompt_tokens": prompt, "reused_tokens": reused,
            "reused_fraction": round(reused / prompt, 6) if prompt else 0.0, "enabled": any(n["enabled"] for n in runs)}


class ProgressFeed:
    """A job's progress read from its task folders while workers anywhere in the cluster
    fill them: samples recorded (each id once over `samples.jsonl` and the unit files, read
    incrementally) and prompt tokens prefilled (the unit runs' notes)."""

    def __init__(self, progress: JobProgress, folders: dict[str, Path]) -> None:
        self.progress, self.folders = progress, folders
        self.ids: dict[str, set[str]] = {key: set() for key in folders}
        self.read: dict[Path, tuple[int, int]] = {}  # file -> (inode, bytes consumed)

    def _new_ids(self, path: Path) -> set[str]:
        try:
            stat = path.stat()
            inode, offset = self.read.get(path, (stat.st_ino, 0))
            if inode != stat.st_ino or offset > stat.st_size:  # replaced (units merged): read it again
                offset = 0
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:  # a unit file merged away meanwhile: its ids are in samples.jsonl
            return set()
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self.read[path] = (stat.st_ino, offset + len(complete))
        ids = set()
        for line in complete.splitlines():
            try:
                ids.add(json.loads(line)["id"])
            except (ValueError, KeyError, TypeError):
                continue
        return ids

    def refresh(self, totals: dict[str, int] | None = None) -> None:
        for key, folder in self.folders.items():
            for f in sample_files(folder):
                self.ids[key] |= self._new_ids(f)
            tokens = sum(int(n.get("tokens", 0)) for n in unit_notes(folder))
            self.progress.set(key, done=len(self.ids[key]), total=(totals or {}).get(key), tokens=tokens)
