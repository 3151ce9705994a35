"""JSON files the way every layer writes and reads them: JSONL records (read strictly,
naming the file and line of a bad one, or leniently, skipping with a warning a line a crash
cut short or that is not UTF-8), appended durably as ASCII (a write cut anywhere leaves bad
JSON, never half a character), and JSON documents replaced atomically. The one place these
rules live; it sits at the bottom (no lctx import) so the train log, the sample logs, the
data loaders and the service all use it."""

from __future__ import annotations

import gzip
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("lctx.jsonfiles")


class BadRecord(ValueError):
    """A line of a JSONL file that is not a JSON object (the message names file and line)."""


def records(path: Path, strict: bool = True, what: str = "a record") -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line, each line decoded on its own (one line
    that is not UTF-8 spoils no other). Strict: BadRecord for a line that is not a JSON
    object. Lenient: such lines are skipped with a warning naming file and line (a line being
    written, cut short by a crash, or written by something else: its sample runs again)."""
    with Path(path).open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                problem = f"not UTF-8 (byte {e.start}: {e.reason})"
            except json.JSONDecodeError as e:
                problem = f"not valid JSON ({e.msg})"
            else:
                if isinstance(rec, dict):
                    yield lineno, rec
                    continue
                problem = f"{what} must be a JSON object, got {type(rec).__name__}"
            if strict:
                raise BadRecord(f"{path}:{lineno}: {problem}")
            log.warning("%s:%d skipped: %s", path, lineno, problem)


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a line and fsync (`append_records` of one)."""
    append_records(path, [record])


def append_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Append records as lines with one write and one fsync; a partial last line left by a
    crash is ended first, so the new records start on a fresh line. A write that fails (the
    disk full) is cut back to where it began, so no torn line stays behind, and the error
    names the file. Lines are ASCII (`json_line`): a write cut short by kill -9 or a power
    loss leaves a line that is bad JSON, which readers skip, never a torn character."""
    if not records:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    line = "".join(json_line(r) for r in records).encode("ascii")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        if start and os.pread(fd, 1, start - 1) != b"\n":
            line = b"\n" + line
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as e:
            os.ftruncate(fd, start)  # frees what the torn line took; needs no space
            raise OSError(e.errno, e.strerror, str(path)) from e
    finally:
        os.close(fd)


def json_line(record: dict[str, Any]) -> str:
    """One record as a JSONL line: ASCII only (other characters escaped), no NaN, newline-ended."""
    return json.dumps(record, ensure_ascii=True, allow_nan=False) + "\n"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Temporary file, fsync, rename, fsync of the folder: a reader sees the old file or
    the whole new one, even across a crash. A name ending in .gz is gzipped (level 1: caches
    of long prompts, written while a job waits; `read_json` reads either)."""
    data = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False).encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=1, mtime=0)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:  # the disk full: no half-written temporary file left behind
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from e
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: Path) -> Any:
    """A JSON document as `write_json_atomic` writes it (gzipped when the name ends in .gz)."""
    with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as f:
        return json.loads(f.read())
