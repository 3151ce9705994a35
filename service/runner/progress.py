"""A running job's progress as the store keeps it: the per-task progress and its estimates
(`evaluators.progress.JobProgress`, which `lctx eval` shows too), the notes each unit run
writes beside its records (`UnitNote`), and the feed that gathers them for the store."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.progress import JobProgress
from evaluators.samplelog import UNITS_DIR, sample_files

NOTE_SUFFIX = ".json"  # beside a unit run's records (`units/<run>.jsonl`): `units/<run>.json`


class UnitNote:
    """What a unit run reports beside its records, in `units/<run>.json` (written by the
    coordinator from the worker's mail, `service.runner.mail`): the unit, its label and the
    job's attempt it ran in, when it started, where (pid, host), how many of its slice's
    samples an earlier run had recorded (`resumed`), the prompt tokens it prefilled so far
    and generated so far (throttled; records alone say nothing during a long prefill or a batch's
decoding), of those prompt tokens the ones the prefix cache served (`reused`) and those it should
still serve (`foreseen`, 0 once the run ends) and, at its end, the samples it
    recorded, the prompt tokens it asked for and those the prefix cache served. Notes outlive
    their records (merged into samples.jsonl): every unit run of every attempt of the job has
    one (results' `work`). `send(state)` gets every new state, each with a growing `seq`."""

    def __init__(self, send: Callable[[dict[str, Any]], None], unit: str, every: float = 0.5,
                 **about: Any) -> None:
        self.send, self.every, self.last = send, every, 0.0
        self.state: dict[str, Any] = {"unit": unit, **about, "started": time.time(), "tokens": 0, "generated": 0,
                                      "pid": os.getpid(), "host": socket.gethostname(), "seq": 0}

    def prefilled(self, tokens: int) -> None:
        self.state["tokens"] += int(tokens)
        if time.monotonic() - self.last >= self.every:
            self.write()

    def reused(self, tokens: int) -> None:
        """Prompt tokens the prefix cache served: counted as prefilled, and apart (the ETA charges
        them no time), no longer foreseen."""
        self.state["reused"] = self.state.get("reused", 0) + int(tokens)
        self.state["foreseen"] = max(0, self.state.get("foreseen", 0) - int(tokens))
        self.prefilled(tokens)

    def foreseen(self, tokens: int) -> None:
        """Prompt tokens the prefix cache should serve in the engine's call starting now."""
        self.state["foreseen"] = int(tokens)
        if time.monotonic() - self.last >= self.every:
            self.write()

    def generated(self, tokens: int) -> None:
        self.state["generated"] += int(tokens)
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
    incrementally), prompt tokens prefilled and tokens generated (the unit runs' notes)."""

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
            notes = unit_notes(folder)
            tokens = sum(int(n.get("tokens", 0)) for n in notes)
            generated = sum(int(n.get("generated", 0)) for n in notes)  # notes from before it counted none
            reused = sum(int(n.get("reused", 0)) for n in notes)
            pending = sum(int(n.get("foreseen", 0)) for n in notes if n.get("samples") is None)  # runs going on
            self.progress.set(key, done=len(self.ids[key]), total=(totals or {}).get(key), tokens=tokens,
                              generated=generated, reused=reused, pending=pending)
