"""The disk a job and a history take: results/<job>/ walked (results.json, each task's
entry, its per-sample records and plots), so an operator sees what a history costs and what
retention (service/retention.py) would free. A job's walk reads a handful of directory
entries; the whole folder's, for /metrics, is cached for a few minutes."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evaluators.samplelog import SAMPLES_FILE, UNITS_DIR
from service.core.layout import PLOTS_DIR, TASKS_DIR, job_dir
from service.core.settings import Settings

KINDS = ("samples", "plots", "results")  # per-sample records (and unit files), plots, the rest (results JSON)


def _task_of(relative: Path) -> str | None:
    """The task key a file under a job's folder belongs to (tasks/<key>/...), None for the job's own."""
    parts = relative.parts
    return parts[1] if len(parts) >= 3 and parts[0] == TASKS_DIR else None


def _kind(relative: Path) -> str:
    """What a file under a job's folder is: a task's samples or unit files, its plots, or results."""
    parts = relative.parts
    if _task_of(relative) is not None and parts[2] in (SAMPLES_FILE, UNITS_DIR):
        return "samples"
    if _task_of(relative) is not None and parts[2] == PLOTS_DIR:
        return "plots"
    return "results"


def job_files(folder: Path) -> Iterator[tuple[Path, str, str | None, int]]:
    """Each file under a job's folder: (path, kind, task key or None, bytes). The one
    classification of a job's files: what `job_disk` counts and retention prunes (its samples
    and plots)."""
    if not folder.is_dir():
        return
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            try:
                size = path.stat().st_size
            except OSError:  # removed meanwhile (a unit folded, a prune)
                continue
            relative = path.relative_to(folder)
            yield path, _kind(relative), _task_of(relative), size


def job_disk(folder: Path) -> dict[str, Any]:
    """{"total", "samples", "plots", "results", "tasks": {key: {kind: bytes}}} of one job's folder
    (bytes; a task key as its folder is named)."""
    out: dict[str, Any] = {"total": 0, **dict.fromkeys(KINDS, 0), "tasks": {}}
    for _path, kind, key, size in job_files(folder):
        out[kind] += size
        out["total"] += size
        if key is not None:
            task = out["tasks"].setdefault(key, dict.fromkeys(KINDS, 0))
            task[kind] += size
    return out


def disk_of(settings: Settings, job_id: str) -> dict[str, Any]:
    return job_disk(job_dir(settings, job_id))


class HistoryDisk:
    """The results folder's bytes by kind and by task name (a task folder `passkey`, `passkey-2`
    counted as passkey). A scrape never waits for the walk (a year of history is tens of
    thousands of folders: seconds): it answers the last walk's figures and, when they are older
    than `ttl` seconds, starts the next walk in the background. `None` until the first walk ends."""

    def __init__(self, results: Path, ttl: float = 300.0) -> None:
        self.results, self.ttl = results, ttl
        self._lock = threading.Lock()
        self._started = -float("inf")
        self._walking = False
        self._value: dict[str, Any] | None = None

    def read(self, wait: bool = False) -> dict[str, Any] | None:
        """The last figures (`wait`: walk now if there are none yet, for a command or a test)."""
        with self._lock:
            stale = time.monotonic() - self._started >= self.ttl
            start = stale and not self._walking
            if start:
                self._walking, self._started = True, time.monotonic()
        if start:
            if wait and self._value is None:
                self._refresh()
            else:
                threading.Thread(target=self._refresh, name="lctx-disk-walk", daemon=True).start()
        return self._value

    def _refresh(self) -> None:
        try:
            self._value = self._walk()
        finally:
            with self._lock:
                self._walking = False

    def _walk(self) -> dict[str, Any]:
        total: dict[str, Any] = {"total": 0, "jobs": 0, **dict.fromkeys(KINDS, 0), "tasks": {}}
        if not self.results.is_dir():
            return total
        for entry in os.scandir(self.results):
            if not entry.is_dir():
                continue
            job = job_disk(Path(entry.path))
            total["jobs"] += 1
            for kind in ("total", *KINDS):
                total[kind] += job[kind]
            for key, sizes in job["tasks"].items():
                name = key.split("-")[0]
                task = total["tasks"].setdefault(name, dict.fromkeys(KINDS, 0))
                for kind in KINDS:
                    task[kind] += sizes[kind]
        return total
