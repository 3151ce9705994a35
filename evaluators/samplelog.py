"""The per-sample log of a task folder: `samples.jsonl`, plus while a job runs spread
over workers one file per run of a work unit under `units/` (each worker appends to its
own file: appends from several nodes to one file on shared storage interleave).

Readers take every file (a record is done wherever it landed); `merge_units` folds the
unit files into `samples.jsonl` once the task's units have all finished, keeping each
(task, id, config) once, so the finished task's `samples.jsonl` holds every sample exactly
once however often a unit was re-run. No torch: the API reads these files too."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkpoints import jsonfiles

SAMPLES_FILE = "samples.jsonl"
UNITS_DIR = "units"


def sample_files(folder: Path) -> list[Path]:
    """`samples.jsonl` then the unit files, the ones that exist."""
    folder = Path(folder)
    main = folder / SAMPLES_FILE
    units = sorted((folder / UNITS_DIR).glob("*.jsonl")) if (folder / UNITS_DIR).is_dir() else []
    return ([main] if main.is_file() else []) + units


def unit_stem(run: str) -> str:
    """The unit a run's file belongs to: `u00003of00017` of `u00003of00017-9f2c1a0b`."""
    return run.rsplit("-", 1)[0]


def files_for_unit(folder: Path, unit: str) -> list[Path]:
    """The files that can hold records of unit run `unit`'s slice: `samples.jsonl`, the files
    of every run of the same unit, and those of units of another slicing (a job re-planned
    with another unit size); never the other units of this slicing, whose slices are
    disjoint from its own. A unit run's reads then grow with its slice, not with the task."""
    stem = unit_stem(unit)
    count = stem.partition("of")[2]
    out = []
    for f in sample_files(folder):
        if f.name == SAMPLES_FILE:
            out.append(f)
            continue
        other = unit_stem(f.stem)
        if other == stem or other.partition("of")[2] != count:
            out.append(f)
    return out


def _key(rec: dict[str, Any]) -> tuple[Any, Any, Any]:
    return rec.get("task"), rec.get("id"), rec.get("config")


class SampleLog:
    """Finished samples of one task folder, read back to resume. Appends go to
    `samples.jsonl`, or with `unit` to that unit run's own file."""

    def __init__(self, folder: Path, unit: str | None = None) -> None:
        self.folder, self.unit = Path(folder), unit
        self.path = self.folder / UNITS_DIR / f"{unit}.jsonl" if unit else self.folder / SAMPLES_FILE

    def records(self) -> list[dict[str, Any]]:
        """Every record of the task; a unit run's log reads only the files that can hold its slice."""
        files = files_for_unit(self.folder, self.unit) if self.unit else sample_files(self.folder)
        return [rec for f in files for _, rec in jsonfiles.records(f, strict=False)]

    def done(self, task: str, config: str) -> dict[str, dict[str, Any]]:
        """Records already finished for this task and configuration, by id (the first of each)."""
        return done_of(self.records(), task, config)

    def last_config(self, task: str) -> str | None:
        """The configuration of the task's most recently recorded sample."""
        last = None
        for rec in self.records():
            if rec.get("task") == task:
                last = rec.get("config")
        return last

    def append(self, record: dict[str, Any]) -> None:
        jsonfiles.append_record(self.path, record)


def done_of(records: list[dict[str, Any]], task: str, config: str) -> dict[str, dict[str, Any]]:
    """The records of this task and configuration, by id (the first of each)."""
    found: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec.get("task") == task and rec.get("config") == config:
            found.setdefault(rec["id"], rec)
    return found


class HandedLog:
    """A task's sample log handed over instead of read from a folder: the records given (a
    service worker's, sent by the job's coordinator, which alone reads and writes the task
    folder) and this run's appends, each passed to `send` (the worker's outbox)."""

    def __init__(self, records: list[dict[str, Any]], send: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._records, self.send = list(records), send

    def records(self) -> list[dict[str, Any]]:
        return list(self._records)

    def done(self, task: str, config: str) -> dict[str, dict[str, Any]]:
        return done_of(self._records, task, config)

    def append(self, record: dict[str, Any]) -> None:
        self._records.append(record)
        if self.send is not None:
            self.send(record)


def merge_units(folder: Path) -> int:
    """Fold the unit files into `samples.jsonl` (its lines kept as they are, then each unit
    record not already there), atomically, then remove the unit files; returns the records
    added. Run once no unit of the task is running; a crash in between leaves files a later
    merge folds again without duplicates."""
    folder = Path(folder)
    units = sample_files(folder)
    main = folder / SAMPLES_FILE
    units = [f for f in units if f != main]
    if not units:
        return 0
    lines: list[str] = []  # each a JSONL line, ASCII (jsonfiles.json_line)
    seen: set[tuple[Any, Any, Any]] = set()
    if main.is_file():
        for _, rec in jsonfiles.records(main, strict=False):
            seen.add(_key(rec))
            lines.append(jsonfiles.json_line(rec))
    added = 0
    for f in units:
        for _, rec in jsonfiles.records(f, strict=False):  # a line a dying worker cut short is skipped
            if _key(rec) not in seen:
                seen.add(_key(rec))
                lines.append(jsonfiles.json_line(rec))
                added += 1
    tmp = main.with_name(f".{main.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as out:
        out.write("".join(lines))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, main)
    for f in units:
        f.unlink(missing_ok=True)
    return added
