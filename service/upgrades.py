"""Data migrations, run after the schema upgrade in committed batches (#61): what a revision
asks to be written from the jobs already run (0007: each succeeded job's leaderboard rows from
its results.json), at the speed of the batched writer, with its progress shown, resumable.

A revision asks for one by name (`config.attributes["data_migrations"]`); once the newest
revision is reached, `register` records it in `data_migrations` in the schema's transaction:
the jobs it covers (those of its statuses finished up to the newest one then) and how many.
`Upgrade.run` then goes through them in their finishing order, `settings.upgrade_batch` jobs
a transaction: a batch's rows and the migration's progress (its last job) commit together, so
a process killed at any point and started again resumes after the last committed batch and
ends with every row once (a job that has rows already is left as it is, besides).

What makes it fast (25,000 jobs in well under a minute on two cores): a batch's rows written
in a few statements (store/results.py `insert_results_many`; on PostgreSQL by COPY); the
tables it fills from empty without most of their indexes, made once at its end; on
PostgreSQL the next batches' files read and made into rows in a thread (`Ahead`) while the
server writes the batch before, and the tables ANALYZEd as they grow.

`lctx serve` runs them in a thread of the app's start-up (service/app.py): /healthz answers
with `upgrading` (done, total, rate, ETA), /readyz answers 503 until they are done, and the
dispatcher and scheduler start after them (no job finishes while old rows are written). The
log says how far they are every few seconds."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, func, insert, inspect, select, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from service.core.settings import Settings
from service.core.status import SUCCEEDED
from service.standings import read_batch, write_batch
from service.store import JobRow, Store, now
from service.store.models import DataMigrationRow, ResultValueRow, TaskResultRow

log = logging.getLogger("lctx.upgrade")

M, J = DataMigrationRow.__table__, JobRow.__table__
SQLITE_CACHE_KIB = 65536  # the page cache of the data migrations' connection on SQLite (default 2,000 KiB),
# and 4x as much of the file memory-mapped
LOG_EVERY_S = 5.0  # a progress line at most this often (and after the first batch and the last)


@dataclass(frozen=True)
class DataMigration:
    """What a data migration goes through (jobs of `statuses`, oldest first) and does with a
    batch of them: `read` what it needs with no database at hand (files; run a batch or two
    ahead in a thread), then `write` it in the batch's transaction (returns the jobs it wrote
    rows for)."""

    name: str
    what: str  # for the log: "the leaderboard rows of succeeded jobs"
    statuses: tuple[str, ...]
    read: Callable[[Settings, list[JobRow]], Any]
    write: Callable[[Connection, Any], int]
    # the tables it fills: found empty at its first batch, their indexes but `needs` (those its
    # writing reads through) are dropped in that batch's transaction and made again in its last
    # one (an index built once from its rows costs a fraction of an entry added per row)
    tables: tuple[Table, ...] = ()
    needs: frozenset[str] = frozenset()


MIGRATIONS = {m.name: m for m in (
    DataMigration("leaderboard", "the leaderboard rows of jobs run before", (SUCCEEDED,), read_batch, write_batch,
                  (TaskResultRow.__table__, ResultValueRow.__table__),
                  frozenset({"ix_task_results_job", "ix_task_results_setting", "ix_task_results_lineage_key"})),
)}
AHEAD = 2  # batches read ahead of the one being written (each held in memory until written)
Cursor = tuple[Any, Any]  # (finished_at, id) of the last job a batch went through; (None, None) before the first


def _jobs(m: DataMigration) -> list[Any]:
    return [J.c.status.in_(m.statuses), J.c.finished_at.is_not(None)]


def _next_jobs(conn: Connection, m: DataMigration, until: Cursor, after: Cursor, size: int) -> list[JobRow]:
    """The `size` jobs of a data migration after `after`, up to `until`, in their finishing order."""
    where = [*_jobs(m), tuple_(J.c.finished_at, J.c.id) <= tuple_(*until)]
    if after[0] is not None:
        where.append(tuple_(J.c.finished_at, J.c.id) > tuple_(*after))
    with Session(bind=conn) as session:  # the ORM's loading: a third of the CPU of JobRow(**row)
        return list(session.scalars(select(JobRow).where(*where).order_by(J.c.finished_at, J.c.id).limit(size)))


class Ahead:
    """The next batches of a data migration picked and read in a thread (`lctx-upgrade-read`)
    while the one before is written: reading files and making rows (Python) overlaps the
    database's writing. Its own connection of the store's read engine, no transaction held
    between batches; at most AHEAD batches waiting. A batch is taken only if it starts where
    the migration's committed progress stands (`take`): else (another replica moved it) None,
    and the caller reads the batch itself."""

    def __init__(self, store: Store, settings: Settings, m: DataMigration, row: Any, size: int,
                 stop: threading.Event) -> None:
        self.store, self.settings, self.m, self.size, self.stop = store, settings, m, size, stop
        self.until, self.after = (row.until_at, row.until_id), (row.after_at, row.after_id)
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=AHEAD)
        self.off = False
        self.thread = threading.Thread(target=self._main, name="lctx-upgrade-read", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        after = self.after
        try:
            with self.store.read_engine.connect() as conn:
                while not self.stop.is_set() and not self.off:
                    jobs = _next_jobs(conn, self.m, self.until, after, self.size)
                    conn.rollback()  # no read transaction held while the batch is read
                    if not self._put((after, jobs, self.m.read(self.settings, jobs) if jobs else None)):
                        return
                    if len(jobs) < self.size:
                        return
                    after = (jobs[-1].finished_at, jobs[-1].id)
        except BaseException as e:  # given to the writer, which raises it
            self._put(e)

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set() and not self.off:
            try:
                self.queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def take(self, after: Cursor) -> tuple[list[JobRow], Any] | None:
        """The batch starting after `after`, read; None when this reader is off or out of step."""
        item = None
        while item is None:
            if self.off:
                return None
            try:
                item = self.queue.get(timeout=0.2)
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():  # stopped: the caller reads
                    return None
        if isinstance(item, BaseException):
            self.close()
            raise item
        start, jobs, read = item
        if start != after:
            log.info("data migration %s moved on elsewhere: its batches read here from now on", self.m.name)
            self.close()
            return None
        return jobs, read

    def close(self) -> None:
        self.off = True
        self.thread.join(timeout=60)


def register(conn: Connection, names: list[str]) -> None:
    """Record the data migrations a schema upgrade asked for (run by the migrations' env.py at
    the newest revision, in the schema's transaction): the jobs each covers and their count.
    One registered again (an upgrade run again after a downgrade) starts afresh."""
    for name in dict.fromkeys(names):
        m = MIGRATIONS[name]
        total = conn.execute(select(func.count()).select_from(J).where(*_jobs(m))).scalar() or 0
        last = conn.execute(select(J.c.finished_at, J.c.id).where(*_jobs(m))
                            .order_by(J.c.finished_at.desc(), J.c.id.desc()).limit(1)).first()
        conn.execute(M.delete().where(M.c.name == name))
        conn.execute(insert(M).values(
            name=name, total=total, done=0, filled=0, until_at=last.finished_at if last else None,
            until_id=last.id if last else None, created_at=now(), finished_at=None if total else now()))
        if total:
            log.info("data migration %s registered: %s, %d jobs", name, m.what, total)


def batch(conn: Connection, settings: Settings, name: str, size: int, ahead: Ahead | None = None) -> Any:
    """One batch of a data migration in one transaction on `conn` (a connection of the store's
    write engine): its next `size` jobs done and its progress moved past them (on PostgreSQL
    under the row's lock: replicas starting together take turns), read by `ahead` when it has
    them. Returns the migration's row as it then stands."""
    with conn.begin():
        query = select(M).where(M.c.name == name)
        row = conn.execute(query.with_for_update() if conn.dialect.name == "postgresql" else query).first()
        if row is None or row.finished_at is not None:
            return row
        m = MIGRATIONS[name]
        taken = ahead.take((row.after_at, row.after_id)) if ahead is not None else None
        if taken is None:
            jobs = _next_jobs(conn, m, (row.until_at, row.until_id), (row.after_at, row.after_id), size)
            taken = jobs, m.read(settings, jobs) if jobs else None
        jobs, read = taken
        if row.done == 0 and m.tables and all(conn.execute(select(t).limit(1)).first() is None for t in m.tables):
            _drop_indexes(conn, m)
        filled = m.write(conn, read) if jobs else 0
        batches = (row.done + len(jobs)) // size
        if conn.dialect.name == "postgresql" and jobs and batches & (batches - 1) == 0 and batches != row.done // size:
            # the tables' statistics as they grow (after the 1st, 2nd, 4th, 8th... batch): without them
            # (autovacuum comes by a new database once a minute at most) the planner takes a list of
            # 500 job ids for most of the table and reads all of it, a batch slower than the one before
            for table in m.tables:
                conn.exec_driver_sql(f"ANALYZE {table.name}")
        values: dict[str, Any] = {"done": row.done + len(jobs), "filled": row.filled + filled}
        if jobs:
            values |= {"after_at": jobs[-1].finished_at, "after_id": jobs[-1].id}
        if len(jobs) < size:
            values["finished_at"] = now()
            _make_indexes(conn, m)
        conn.execute(update(M).where(M.c.name == name).values(**values))
        return conn.execute(select(M).where(M.c.name == name)).first()


def _drop_indexes(conn: Connection, m: DataMigration) -> None:
    for table in m.tables:
        for index in table.indexes:
            if index.name not in m.needs:
                index.drop(conn, checkfirst=True)
    log.info("data migration %s: %s filled from empty, their indexes made at the end", m.name,
             ", ".join(t.name for t in m.tables))


def _make_indexes(conn: Connection, m: DataMigration) -> None:
    """Every index of the migration's tables there (those it dropped made again: the last batch's)."""
    started = time.monotonic()
    made = 0
    for table in m.tables:
        for index in table.indexes:
            if not inspect(conn).has_index(table.name, index.name):
                index.create(conn)
                made += 1
    if made:
        log.info("data migration %s: %d indexes made in %.1f s", m.name, made, time.monotonic() - started)


def pending(store: Store) -> list[str]:
    """The registered data migrations not yet done."""
    with store.read_engine.connect() as conn:
        return list(conn.execute(select(M.c.name).where(M.c.finished_at.is_(None)).order_by(M.c.name)).scalars())


class Upgrade:
    """The data migrations of one start, run to their end (`run`) or in a thread (`start`), and
    what /healthz and /readyz say of them."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store, self.settings = store, settings
        self.error: str | None = None
        self._progress: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def pending(self) -> bool:
        return bool(pending(self.store))

    def run(self) -> bool:
        """Every pending data migration to its end, batch after batch; False when stopped first.
        One connection for them all: on SQLite with a larger page cache while they run (the
        indexes of a growing leaderboard stay in memory from batch to batch: 30% less CPU at
        12,000 jobs), given back at the end."""
        with self.store.write_engine.connect() as conn:
            sqlite = conn.dialect.name == "sqlite"
            if sqlite:
                conn.exec_driver_sql(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
                conn.exec_driver_sql(f"PRAGMA mmap_size={SQLITE_CACHE_KIB * 4096}")
                conn.commit()
            try:
                return self._run(conn)
            finally:
                if sqlite:
                    conn.rollback()  # a batch cut short by an error leaves nothing begun
                    conn.exec_driver_sql("PRAGMA cache_size=-2000")  # SQLite's defaults: the memory given back
                    conn.exec_driver_sql("PRAGMA mmap_size=0")
                    conn.commit()

    def _run(self, conn: Connection) -> bool:
        for name in pending(self.store):
            m = MIGRATIONS[name]
            with self.store.read_engine.connect() as reading:
                start = reading.execute(select(M).where(M.c.name == name)).first()
            if start is None or start.finished_at is not None:
                continue
            first = start.done  # done before this start
            # read ahead on PostgreSQL, whose writing is the server's: on SQLite the writing is this
            # process's own, and a reading thread would only take turns with it
            ahead = Ahead(self.store, self.settings, m, start, self.settings.upgrade_batch, self._stop) \
                if conn.dialect.name == "postgresql" else None
            try:
                self._migrate(conn, name, m, first, ahead)
            finally:
                if ahead is not None:
                    ahead.close()
        self._progress = None
        return not self._stop.is_set()

    def _migrate(self, conn: Connection, name: str, m: DataMigration, first: int, ahead: Ahead | None) -> None:
        started, said = time.monotonic(), 0.0
        while not self._stop.is_set():
            row = batch(conn, self.settings, name, self.settings.upgrade_batch, ahead)
            if row is None:
                break
            elapsed = time.monotonic() - started
            rate = (row.done - first) / elapsed if elapsed > 0 and row.done > first else None
            left = max(0, row.total - row.done)
            self._progress = {"migration": name, "what": m.what, "done": row.done, "total": row.total,
                              "rate_per_s": round(rate, 1) if rate else None,
                              "eta_s": round(left / rate, 1) if rate else None}
            if row.finished_at is not None:
                log.info("data migration %s done: %d jobs gone through (%d given rows) in %.1f s", name,
                         row.done, row.filled, elapsed)
                break
            if said == 0.0 or time.monotonic() - said >= LOG_EVERY_S:
                said = time.monotonic()
                log.info("upgrading: %s: %d of %d jobs (%s jobs/s, about %s s left)", m.what, row.done,
                         row.total, f"{rate:.0f}" if rate else "?", f"{left / rate:.0f}" if rate else "?")

    def start(self, then: Callable[[], None]) -> None:
        """`run` in a thread, then `then` (the dispatcher's and scheduler's start); a failure of
        either is logged and kept for /readyz (the start is not retried: restart the service)."""
        self._progress = {"migration": None, "what": "starting", "done": 0, "total": None, "rate_per_s": None,
                          "eta_s": None}

        def main() -> None:
            try:
                finished = self.run()
            except Exception as e:
                log.exception("the upgrade's data migration stopped")
                self.error = f"the upgrade's data migration failed ({type(e).__name__}: {e}".splitlines()[0] + ")"
                self._progress = None
                return
            try:
                if finished:
                    then()
            except Exception as e:
                log.exception("the start after the upgrade failed")
                self.error = f"the start after the upgrade failed ({type(e).__name__}: {e}".splitlines()[0] + ")"

        self._thread = threading.Thread(target=main, name="lctx-upgrade", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the batch under way (it commits whole; the next start resumes after it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def status(self) -> dict[str, Any] | None:
        """The upgrade under way (/healthz's `upgrading`): None when there is none."""
        return dict(self._progress) if self._progress else None

    def not_ready(self) -> str | None:
        """Why the service is not ready for the upgrade's sake (/readyz), None when it is."""
        if self.error:
            return f"{self.error}; see the log, then restart the service"
        p = self._progress
        if p is None:
            return None
        if p["total"] is None:
            return "upgrading: starting the data migrations"
        eta = f", about {p['eta_s']:.0f} s left" if p["eta_s"] is not None else ""
        return f"upgrading: {p['what']}: {p['done']} of {p['total']} jobs{eta}"


def upgrade(store: Store, settings: Settings) -> str:
    """The schema to the newest revision, then its data migrations to their end, in this thread
    (what callers without an HTTP server to keep answering use). Returns the revision."""
    head = store.upgrade()
    Upgrade(store, settings).run()
    return head

