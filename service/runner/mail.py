"""What a worker sends back besides its calls' answers: the records its unit runs made and
each run's latest note, gathered in the worker's `Outbox` and taken by the coordinator (a
`drain` call while a unit runs, the rest with the unit's answer). The coordinator alone
writes them (`Mailroom`) into the task folder's `units/`, so a worker node needs no shared
results folder, and a worker that dies loses only what it recorded since it was last asked."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import append_records
from evaluators.samplelog import UNITS_DIR
from service.runner.progress import write_note

Run = tuple[str, str]  # (task key, unit run name)


@dataclass
class Mail:
    records: dict[Run, list[dict[str, Any]]] = field(default_factory=dict)
    notes: dict[Run, dict[str, Any]] = field(default_factory=dict)  # each run's latest note (its `seq` grows)

    def __bool__(self) -> bool:
        return bool(self.records or self.notes)


class Outbox:
    """The worker's side: records and notes since the last `take` (thread-safe: units record on
    the compute thread, the coordinator's `drain` takes on the control thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mail = Mail()

    def record(self, run: Run, record: dict[str, Any]) -> None:
        with self._lock:
            self._mail.records.setdefault(run, []).append(record)

    def note(self, run: Run, state: dict[str, Any]) -> None:
        with self._lock:
            self._mail.notes[run] = dict(state)

    def take(self) -> Mail:
        with self._lock:
            mail, self._mail = self._mail, Mail()
        return mail


class Mailroom:
    """The coordinator's side: a mail's records appended to `units/<run>.jsonl` (one write and
    fsync per run) and its notes written to `units/<run>.json`, an older note never over a
    newer one (two answers of one worker may be read in either order)."""

    def __init__(self, folder_of: Callable[[str], Path]) -> None:
        self.folder_of = folder_of
        self.seq: dict[Run, int] = {}

    def deliver(self, mail: Mail) -> None:
        for (key, run), records in mail.records.items():
            append_records(self.folder_of(key) / UNITS_DIR / f"{run}.jsonl", records)
        for (key, run), state in mail.notes.items():
            seq = int(state.get("seq", 0))
            if seq >= self.seq.get((key, run), -1):
                self.seq[(key, run)] = seq
                write_note(self.folder_of(key), run, state)
