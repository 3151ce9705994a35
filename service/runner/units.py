"""A job's work units and the queue the coordinator hands them out from: a unit is a
contiguous slice of one task's planned samples (neighbours in the plan share prompts, so a
slice keeps prefix reuse), sized by the work its samples plan, not by their count."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from evaluators.progress import PlannedWork, plan_of


@dataclass(frozen=True)
class Unit:
    """A work unit: part `index` of `count` contiguous slices of one task's planned samples."""

    key: str  # the task's key in the job (`passkey`, `passkey#2`)
    task: dict[str, Any] = field(compare=False, hash=False)  # the same for every unit of the key
    index: int = 0
    count: int = 1

    @property
    def label(self) -> str:
        return f"{self.key} part {self.index + 1}/{self.count}"

    @property
    def stem(self) -> str:
        """Names this unit's files (`units/<stem>-<run>.jsonl`); the count is in it, so a job
        re-planned with another unit size never mixes two slicings' names."""
        return f"u{self.index:05d}of{self.count:05d}"


def plan_units(tasks: dict[str, dict[str, Any]], unit_samples: int | None, workers: int,
               unit_tokens: int = 131_072, plans: dict[str, PlannedWork] | None = None) -> list[Unit]:
    """The job's work units: a task its options plan n samples for splits into slices of about
    `unit_tokens` tokens of work each (its planned prompt and generated tokens: a few seconds
    of a worker's time, so what each unit costs around its samples stays small beside them,
    however cheap or dear a sample is), or of `unit_samples` samples when that is set; one
    whose data decides its samples into one slice per worker; a sequential search (each
    block decides the next) stays one unit. `plans`: the tasks' plans where already read
    (`JobProgress.plans`)."""
    units: list[Unit] = []
    for key, task in tasks.items():
        plan = (plans or {}).get(key) or plan_of(task)
        samples, work = plan.samples, plan.work_tokens
        if plan.sequential:
            count = 1
        elif samples:
            count = math.ceil(samples / unit_samples) if unit_samples else math.ceil((work or 0) / unit_tokens)
            count = min(max(1, count), samples)
        else:
            count = max(1, workers)
        units += [Unit(key, task, i, count) for i in range(count)]
    return units


class UnitQueue:
    """The job's work still to hand out: units waiting to run (one whose worker died goes
    first), how many times each has been handed out, the units of each task still to finish,
    and the tasks whose units are all done, waiting for a worker to finish them."""

    def __init__(self, units: list[Unit], keys: Iterable[str]) -> None:
        self.pending = deque(units)
        self.attempts: dict[Unit, int] = {}
        self.remaining = {k: {u.index for u in units if u.key == k} for k in keys}
        self.finishing: deque[str] = deque()

    def __len__(self) -> int:
        """Units waiting to run."""
        return len(self.pending)

    def has_work(self) -> bool:
        return bool(self.finishing or self.pending)

    def take(self) -> Unit:
        unit = self.pending.popleft()
        self.attempts.setdefault(unit, 1)
        return unit

    def take_task(self) -> str | None:
        """A task to finish (before any unit: its results come sooner), if one waits."""
        return self.finishing.popleft() if self.finishing else None

    def put_back(self, unit: Unit) -> None:
        """A unit whose worker died runs next."""
        self.pending.appendleft(unit)

    def died_in(self, unit: Unit) -> int:
        """The unit's worker died: the number of the run it goes on to."""
        self.attempts[unit] = self.attempts.get(unit, 1) + 1
        return self.attempts[unit]

    def unit_done(self, unit: Unit) -> None:
        self.remaining[unit.key].discard(unit.index)
        if not self.remaining[unit.key]:
            self.finishing.append(unit.key)

    def finish_again(self, key: str) -> None:
        """A task whose finishing worker died is finished next."""
        self.finishing.appendleft(key)
