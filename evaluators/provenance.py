"""What data a result ran on (docs/guide/evaluators.md, "Data revisions"): the sha256 of each file
a task read and the Hugging Face revision of what it downloaded, with warnings about files known
to come from before a dataset's fix. `TaskRun.entry` records it for every task as the entry's
`data`, with no code of the task's own; a task that reads no file records nothing.

What a task read is known two ways. Its options say which local files it reads (`data_files` in
the data directory and its file options, resolved as the evaluators resolve them:
`evaluators.data.read_files`). What a loader downloads from the hub it notes while the task
prepares its data (`note_hub`, where `evaluators.data` downloads; `note_files` for local files
its options do not name) into the `DataLog` that `evaluators.run.planned_samples` opens around
`prepare` and `plan`; a loader's checks of the rows it reads add warnings the same way (`warn`).
Each file is hashed once per process (cached by path, size and modification time;
read in 1 MiB blocks, so a 300 MB parquet file is never held whole)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evaluators.options import TaskOptions

BLOCK = 1 << 20
_digests: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def file_key(path: Path) -> tuple[str, int, int]:
    """What identifies a file's content cheaply: (resolved path, size, mtime in ns)."""
    path = Path(path).resolve()
    stat = path.stat()
    return str(path), stat.st_size, stat.st_mtime_ns


def sha256_of(path: Path) -> str:
    """The file's sha256 (hex), computed once per (resolved path, size, mtime) in this process."""
    path = Path(path).resolve()
    key = file_key(path)
    with _lock:
        known = _digests.get(key)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    with _lock:
        _digests[key] = digest.hexdigest()
    return _digests[key]


@dataclass
class DataLog:
    """What a task's loaders noted while it prepared its data: hub downloads and warnings."""

    hub: list[dict[str, Any]] = field(default_factory=list)  # {"repo", "revision", "config"?, "files": [Path]}
    files: list[Path] = field(default_factory=list)  # local files read beyond what the options name
    warnings: list[str] = field(default_factory=list)


_current: ContextVar[DataLog | None] = ContextVar("lctx_data_log", default=None)


@contextmanager
def noting(log: DataLog) -> Iterator[DataLog]:
    """Loaders called inside note into `log` (on this thread)."""
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)


def note_hub(repo: str, revision: str | None, files: list[Path] | None = None, config: str | None = None) -> None:
    """A loader read `files` of the hub dataset `repo` at `revision` (a commit; None where the
    hub did not say); `config`: the `datasets` configuration, where it loaded one."""
    log = _current.get()
    if log is not None:
        log.hub.append({"repo": repo, "revision": revision, "config": config, "files": list(files or [])})


def note_files(files: list[Path]) -> None:
    """A loader read these local files beyond the ones its options name (BABILong's haystack books)."""
    log = _current.get()
    if log is not None:
        log.files += [Path(f) for f in files]


def warn(text: str) -> None:
    """A loader's warning about the data it read (a file from before a dataset's fix)."""
    log = _current.get()
    if log is not None and text not in log.warnings:
        log.warnings.append(text)


def _shown(path: Path, bases: list[Path]) -> str:
    """The path relative to the first base holding it, else its name: results name no server path."""
    for base in bases:
        for b in {base, base.resolve()}:
            if path.is_relative_to(b):
                return path.relative_to(b).as_posix()
    return path.name


def data_record(options: TaskOptions, data_dir: Path | None, log: DataLog | None,
                read: list[tuple[str | None, Path]]) -> dict[str, Any] | None:
    """The entry's `data` from `read` ((file option or None, path) of each local file the options
    name: `evaluators.data.read_files`) and `log`: `files` (each file read: its name relative to the data directory or
    the hub snapshot, the file option that named it, sha256 and bytes), `hub` (each dataset
    downloaded: repo, revision, config), `revision` (12 hex characters of the sha256 of the
    files' hashes and the revisions of hub datasets read without files: what the leaderboard keys
    and shows) and `warnings` (the loaders' and the files known to be faulty:
    `TaskOptions.stale_sha256`). None: the task read no file."""
    log = log or DataLog()
    local = [Path(data_dir)] if data_dir is not None else []
    found = [(key, path, local) for key, path in read] + [(None, p, local) for p in log.files]
    for hub in log.hub:
        snapshots = [Path(p).parent for p in hub["files"][:1]]
        found += [(None, Path(p), snapshots) for p in hub["files"]]
    if not found and not log.hub:  # reads nothing: records nothing
        return None
    files, seen = [], set()
    for key, path, bases in found:
        resolved = path.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        files.append({"file": _shown(path, bases), **({"option": key} if key else {}), "sha256": sha256_of(path),
                      "bytes": path.stat().st_size})
    warnings = list(log.warnings)
    for f in files:
        why = options.stale_sha256.get(f["sha256"])
        if why and (text := f"{f['file']}: {why}") not in warnings:
            warnings.append(text)
    hub = [{"repo": h["repo"], "revision": h["revision"], **({"config": h["config"]} if h["config"] else {})}
           for h in log.hub]
    unhashed = sorted(f"{h['repo']}@{h['revision']}:{h.get('config') or ''}" for h, raw in zip(hub, log.hub, strict=True)
                      if not raw["files"])
    identity = json.dumps({"files": sorted(f["sha256"] for f in files), "hub": unhashed})
    return {"revision": hashlib.sha256(identity.encode()).hexdigest()[:12], "files": files, "hub": hub,
            "warnings": warnings}
