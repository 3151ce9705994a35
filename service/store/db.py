"""The database under the store: engines (SQLite tuned for one writer at a time, PostgreSQL by
URL), sessions, Alembic's migrations, and `retried` for the callers that outlive a database
restart."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, event, inspect, select, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service.core.errors import Missing, SchemaError

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
FIRST_REVISION = "0001"  # the schema `Base.metadata.create_all` made before migrations existed
MIGRATION_LOCK = 0x6C637478  # PostgreSQL advisory lock: one replica migrates at a time ("lctx")


log = logging.getLogger("lctx.store")


F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")  # a table's row class


def retried(method: F) -> F:
    """A call the dispatcher, scheduler or a worker makes, retried while the database server
    is away (restarted, failed over: connection errors), for up to the store's
    `retry_seconds`, so a running job outlives a PostgreSQL restart instead of failing. The
    API's own store does not retry: a request answers 503 at once (service/app.py). Writes
    retried this way are idempotent or guarded by the job's status (a commit whose answer was
    lost finds the row already changed)."""

    @functools.wraps(method)
    def call(self: Database, *args: Any, **kwargs: Any) -> Any:
        deadline, delay, said = None, 0.1, False
        while True:
            try:
                return method(self, *args, **kwargs)
            except (OperationalError, InterfaceError) as e:
                t = time.monotonic()
                deadline = deadline or t + self.retry_seconds
                if self.url.startswith("sqlite") or t >= deadline:  # SQLite's own timeout has waited
                    raise
                if not said:
                    log.warning("the database is unavailable (%s); %s retries for up to %.0f s",
                                str(e.orig or e).splitlines()[0], method.__name__, self.retry_seconds)
                    said = True
                time.sleep(min(delay, deadline - t))
                delay = min(delay * 2, 2.0)

    return call  # type: ignore[return-value]


def _alembic() -> tuple[Any, Any]:
    """Alembic's config and script directory for the migrations shipped in this package."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config, ScriptDirectory.from_config(config)


def _our_tables(conn: Connection) -> bool:
    """True when the database holds the store's tables, False when it holds none of them.
    Some but not all, with no alembic_version (checked by the caller through `current`),
    is a database lctx did not make: refused."""
    present = set(inspect(conn).get_table_names())
    ours = {"checkpoints", "jobs", "schedules", "submissions"}
    if not present & ours:
        return False
    if (missing := ours - present) and "alembic_version" not in present:
        raise SchemaError(f"the database has some lctx tables but not {', '.join(sorted(missing))}, and no "
                          "alembic_version table: it was not made by lctx; give an empty database or restore a backup")
    return True


def _sqlite_engines(url: str) -> tuple[Engine, Engine]:
    """A read engine (autocommit: each SELECT sees the latest commit, and status polls skip
    the BEGIN/ROLLBACK round trip) and a write engine (BEGIN IMMEDIATE)."""

    def make(immediate: bool) -> Engine:
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=8)

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # no implicit BEGIN: writes issue their own below
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        if immediate:

            @event.listens_for(engine, "begin")
            def _begin(conn: Any) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine

    return make(False), make(True)


class Database:
    """The engines, sessions and schema of one database URL; `Store` adds each table's access."""

    def __init__(self, url: str, retry_seconds: float = 0.0) -> None:
        self.url, self.retry_seconds = url, retry_seconds  # see `retried`
        if url.startswith("sqlite"):
            self.read_engine, self.write_engine = _sqlite_engines(url)
        else:
            connect_args = {"connect_timeout": 5} if url.startswith("postgresql") else {}
            engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, connect_args=connect_args)
            self.read_engine = self.write_engine = engine
        self._read = sessionmaker(self.read_engine, expire_on_commit=False)
        self._write = sessionmaker(self.write_engine, expire_on_commit=False)

    def upgrade(self, settings: Any = None) -> str:
        """Bring the database to this code's newest schema revision, in one transaction (on
        PostgreSQL under an advisory lock, so replicas starting together migrate once).
        Returns that revision. The data migrations a revision asks for (0007: the leaderboard's
        rows of jobs already run, from their results) are registered here and run after, in
        batches, by service/upgrades.py (`lctx serve` while /healthz says how far; `settings` is
        no longer needed here and is accepted for the callers of before). A database at a
        revision this code does not know (made by a newer lctx) is refused with SchemaError;
        tables made before migrations existed are adopted as the first revision, then upgraded."""
        from alembic import command
        from alembic.runtime.migration import MigrationContext

        config, script = _alembic()
        head = script.get_current_head()
        with self.write_engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            current = MigrationContext.configure(conn).get_current_heads()
            known = {rev.revision for rev in script.walk_revisions()}
            unknown = [r for r in current if r not in known]
            if unknown:
                raise SchemaError(f"the database {self.safe_url} is at schema revision {', '.join(unknown)}, which "
                                  f"this lctx does not know (its newest is {head}): a newer lctx has upgraded it; "
                                  "upgrade lctx to that version (or newer) before starting it on this database")
            config.attributes["connection"] = conn
            present = _our_tables(conn)
            if not current and present:
                command.stamp(config, FIRST_REVISION)  # made by create_all before migrations existed
            elif current and not present:
                command.stamp(config, "base", purge=True)  # every table dropped by hand: start afresh
            command.upgrade(config, "head")  # env.py registers the data migrations the revisions asked for
        return head

    def create_all(self) -> None:
        """The store's tables, at the newest revision: `upgrade()` (the name tests and older callers use)."""
        self.upgrade()

    def revision(self) -> str | None:
        """The schema revision the database is at (None: no schema yet)."""
        from alembic.runtime.migration import MigrationContext

        with self.read_engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    @property
    def safe_url(self) -> str:
        """The URL with any password masked, for messages."""
        return make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        self.read_engine.dispose()
        if self.write_engine is not self.read_engine:
            self.write_engine.dispose()

    def ping(self) -> None:
        with self.read_engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    @contextmanager
    def reading(self) -> Iterator[Session]:
        with self._read() as s, s.begin():
            yield s

    @contextmanager
    def writing(self) -> Iterator[Session]:
        with self._write() as s, s.begin():
            yield s

    # The tables keyed by a name (checkpoints, endpoints, schedules) share their lookups:

    def named(self, model: type[R], kind: str, name: str) -> R:
        """The row of `model` called `name`; `Missing(kind, name)` when there is none."""
        with self.reading() as s:
            row = s.get(model, name)
        if row is None:
            raise Missing(kind, name)
        return row

    def all_named(self, model: type[R]) -> list[R]:
        """Every row of `model`, by name."""
        with self.reading() as s:
            return list(s.scalars(select(model).order_by(model.name)))  # type: ignore[attr-defined]

    def delete_named(self, model: type[Any], kind: str, name: str) -> None:
        """Delete the row of `model` called `name`; `Missing(kind, name)` when there is none."""
        with self.writing() as s:
            row = s.get(model, name)
            if row is None:
                raise Missing(kind, name)
            s.delete(row)
