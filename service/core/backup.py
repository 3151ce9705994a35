"""Backup and restore of a service's store with its results folder, while the service runs.

`backup(settings, folder)`: the database first, as one consistent snapshot (SQLite's online
backup API; PostgreSQL's `pg_dump`, which reads one transaction's snapshot), then the results
folder (every job the snapshot has as succeeded wrote its results before it was marked so;
files of jobs that finish later come along and are harmless: the restored service finds those
jobs running and requeues them). Then the copy is checked: it opens, and its leaderboard rows of
the jobs finished before the backup started equal the original's (`board_digest`). A
`manifest.json` records what was copied, the schema revision and that digest.

`restore(settings, folder)`: into a service that is not running (its server lock is held while
restoring): the database replaced (file copy, or `pg_restore --clean`), the results folder put
in place (the one there moved aside, never deleted), then the restored leaderboard checked
against the manifest's digest. PostgreSQL's tools are looked for on PATH and in
LCTX_PG_BIN; where they are missing, that is said, nothing half done."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import make_url

from checkpoints.jsonfiles import write_json_atomic
from service.core.errors import InvalidRequest, NotReady
from service.core.serverlock import sqlite_file
from service.core.settings import Settings
from service.store import Store
from service.store.models import ResultValueRow, TaskResultRow

MANIFEST = "manifest.json"
SQLITE_COPY = "lctx.db"
PG_DUMP = "lctx.pgdump"
RESULTS_COPY = "results"


def board_digest(store: Store, finished_before: datetime | None = None) -> dict[str, Any]:
    """sha256 over the leaderboard rows (job, task view, setting, rank and every value) of jobs
    finished before `finished_before` (None: all), in a fixed order; with the row count."""
    digest, rows = hashlib.sha256(), 0
    with store.reading() as s:
        query = select(TaskResultRow.id, TaskResultRow.job_id, TaskResultRow.task, TaskResultRow.setting_key,
                       TaskResultRow.rank, TaskResultRow.finished_at)
        if finished_before is not None:
            query = query.where(TaskResultRow.finished_at < finished_before)
        found = s.execute(query.order_by(TaskResultRow.job_id, TaskResultRow.task)).all()
        values: dict[int, list[tuple[str, float | None]]] = {}
        ids = [r.id for r in found]
        for start in range(0, len(ids), 500):
            for v in s.execute(select(ResultValueRow.result_id, ResultValueRow.column, ResultValueRow.value)
                               .where(ResultValueRow.result_id.in_(ids[start:start + 500]))):
                values.setdefault(v.result_id, []).append((v.column, v.value))
    for r in found:
        line = [r.job_id, r.task, r.setting_key, r.rank, sorted(values.get(r.id, []), key=lambda x: x[0])]
        digest.update(json.dumps(line, default=str).encode() + b"\n")
        rows += 1
    return {"sha256": digest.hexdigest(), "rows": rows}


def pg_tool(name: str, folder: Path | None = None) -> str | None:
    """A PostgreSQL client tool (pg_dump, pg_restore) in `folder` (LCTX_PG_BIN) or on PATH."""
    candidate = Path(folder) / name if folder else None
    if candidate is not None and candidate.is_file():
        return str(candidate)
    return shutil.which(name)


def _pg_args(url: str) -> tuple[list[str], dict[str, str]]:
    """libpq connection arguments of a SQLAlchemy URL, and the environment carrying its password
    (never on a command line, which every user of the machine can read)."""
    u = make_url(url)
    args = [f"--dbname={u.database}"]
    if u.host:
        args.append(f"--host={u.host}")
    if u.port:
        args.append(f"--port={u.port}")
    if u.username:
        args.append(f"--username={u.username}")
    env = {**os.environ, **({"PGPASSWORD": u.password} if u.password else {})}
    return args, env


def _run(command: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=24 * 3600)
    if done.returncode != 0:
        raise NotReady(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")


def _copy_database(settings: Settings, folder: Path) -> str:
    """The database into `folder`, one consistent snapshot; returns the copy's file name."""
    source = sqlite_file(settings.database)
    if source is not None:
        target = folder / SQLITE_COPY
        with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
            src.backup(dst)  # the online backup API: pages copied under SQLite's own locking
        return SQLITE_COPY
    if make_url(settings.database).get_backend_name() != "postgresql":
        raise InvalidRequest(f"backup knows SQLite and PostgreSQL; the database is {make_url(settings.database).drivername}")
    tool = pg_tool("pg_dump", settings.pg_bin)
    if tool is None:
        raise NotReady("pg_dump is not installed here (PATH, LCTX_PG_BIN): install PostgreSQL's client tools "
                       "(Debian: postgresql-client) to back up a PostgreSQL store; nothing was copied")
    args, env = _pg_args(settings.database)
    _run([tool, "--format=custom", f"--file={folder / PG_DUMP}", *args], env, "pg_dump")
    return PG_DUMP


def backup(settings: Settings, folder: Path) -> dict[str, Any]:
    """A consistent copy of the store and the results into `folder` (new or empty), checked;
    returns the manifest."""
    folder = Path(folder).absolute()
    if folder.exists() and any(folder.iterdir()):
        raise InvalidRequest(f"{folder} is not empty: back up into a new folder (a backup is never merged)")
    if folder == settings.results or settings.results in folder.parents:
        raise InvalidRequest(f"{folder} is inside the results folder {settings.results}: back up elsewhere")
    folder.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).replace(tzinfo=None)
    store = Store(settings.database)
    try:
        revision = store.revision()
        before = board_digest(store, started)
        database = _copy_database(settings, folder)
    finally:
        store.close()
    if settings.results.is_dir():
        shutil.copytree(settings.results, folder / RESULTS_COPY, symlinks=True)
    else:
        (folder / RESULTS_COPY).mkdir()
    manifest = {"made_at": datetime.now(UTC).isoformat(timespec="seconds"), "started": started.isoformat(),
                "database": database, "revision": revision, "board": before,
                "results_bytes": sum(p.stat().st_size for p in (folder / RESULTS_COPY).rglob("*") if p.is_file())}
    if database == SQLITE_COPY:  # the copy opens and holds the same leaderboard
        copy = Store(f"sqlite:///{folder / SQLITE_COPY}")
        try:
            after = board_digest(copy, started)
        finally:
            copy.close()
        if after != before:
            raise NotReady(f"the copy's leaderboard differs from the original's ({after} vs {before}): the backup "
                           f"in {folder} is not usable; run it again")
        manifest["checked"] = "the copy opens; its leaderboard rows equal the original's"
    else:
        manifest["checked"] = ("pg_dump's archive written; `lctx restore` checks the restored leaderboard against "
                               "this manifest")
    write_json_atomic(folder / MANIFEST, manifest)
    return manifest


def restore(settings: Settings, folder: Path) -> dict[str, Any]:
    """Put a backup in place of the store and results of a service that is not running (the
    caller holds its server lock), then check the restored leaderboard; returns what was done."""
    folder = Path(folder).absolute()
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InvalidRequest(f"{folder} is not an lctx backup ({MANIFEST}: {e}); give a folder `lctx backup` "
                             "wrote") from None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    done: dict[str, Any] = {"from": str(folder), "revision": manifest.get("revision")}
    target = sqlite_file(settings.database)
    if manifest.get("database") == SQLITE_COPY:
        if target is None:
            raise InvalidRequest("the backup is of a SQLite store and the service's database is not SQLite: "
                                 "restore into a service configured with LCTX_DATABASE_URL unset (or sqlite:///...)")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            aside = target.with_name(f"{target.name}.before-restore-{stamp}")
            with sqlite3.connect(target) as src, sqlite3.connect(aside) as dst:
                src.backup(dst)
            done["database_kept_as"] = str(aside)
            for suffix in ("-wal", "-shm"):
                target.with_name(target.name + suffix).unlink(missing_ok=True)
        with sqlite3.connect(folder / SQLITE_COPY) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
    elif manifest.get("database") == PG_DUMP:
        if make_url(settings.database).get_backend_name() != "postgresql":
            raise InvalidRequest("the backup is of a PostgreSQL store: restore into a service whose "
                                 "LCTX_DATABASE_URL names a PostgreSQL database")
        tool = pg_tool("pg_restore", settings.pg_bin)
        if tool is None:
            raise NotReady("pg_restore is not installed here (PATH, LCTX_PG_BIN): install PostgreSQL's client tools "
                           "(Debian: postgresql-client); nothing was restored")
        args, env = _pg_args(settings.database)
        _run([tool, "--clean", "--if-exists", "--no-owner", "--single-transaction", *args, str(folder / PG_DUMP)],
             env, "pg_restore")
    else:
        raise InvalidRequest(f"{folder}/{MANIFEST} names no database copy this lctx knows")
    if settings.results.exists():
        aside = settings.results.with_name(f"{settings.results.name}.before-restore-{stamp}")
        settings.results.rename(aside)
        done["results_kept_as"] = str(aside)
    shutil.copytree(folder / RESULTS_COPY, settings.results, symlinks=True)
    store = Store(settings.database)
    try:
        board = board_digest(store, datetime.fromisoformat(manifest["started"]))
    finally:
        store.close()
    if board != manifest.get("board"):
        raise NotReady(f"the restored leaderboard differs from the backup's ({board} vs {manifest.get('board')}); "
                       "the previous store and results are kept beside (see above)")
    done["checked"] = f"the restored leaderboard equals the backup's ({board['rows']} rows)"
    return done
