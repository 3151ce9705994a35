"""Schema migrations (Alembic, `service/migrations/`) on SQLite and a real PostgreSQL 15:
an empty database gets the newest revision, a database made before migrations existed
is adopted with its rows, a database from a newer lctx is refused, and the models agree
with what the migrations build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text

from service.core.errors import SchemaError
from service.store import Base, Store
from service.store.db import FIRST_REVISION, _alembic
from tests.helpers import free_port, new_postgres_database

# The layout `Base.metadata.create_all` made before migrations existed, as it printed it
# (CreateTable / CreateIndex compiled for each dialect): a database of that day.
PRE_MIGRATION_DDL = """
CREATE TABLE checkpoints (
    name VARCHAR(128) NOT NULL, path TEXT NOT NULL, fingerprint VARCHAR(64) NOT NULL,
    variant VARCHAR(64) NOT NULL, parameters INTEGER NOT NULL, created_at {ts} NOT NULL,
    PRIMARY KEY (name));
CREATE INDEX ix_checkpoints_fingerprint ON checkpoints (fingerprint);
CREATE TABLE jobs (
    id VARCHAR(32) NOT NULL, checkpoint VARCHAR(128) NOT NULL, checkpoint_path TEXT NOT NULL,
    fingerprint VARCHAR(64) NOT NULL, tasks JSON NOT NULL, task_names TEXT NOT NULL, rope JSON,
    backend VARCHAR(16) NOT NULL, priority INTEGER NOT NULL, status VARCHAR(16) NOT NULL,
    progress JSON NOT NULL, error TEXT, attempts INTEGER NOT NULL, owner VARCHAR(128),
    heartbeat_at {ts}, schedule VARCHAR(128), created_at {ts} NOT NULL, started_at {ts},
    finished_at {ts}, duration_s FLOAT,
    PRIMARY KEY (id));
CREATE INDEX ix_jobs_queue ON jobs (status, priority, created_at);
CREATE INDEX ix_jobs_checkpoint ON jobs (checkpoint);
CREATE TABLE schedules (
    name VARCHAR(128) NOT NULL, cron VARCHAR(128) NOT NULL, watch JSON NOT NULL, suite JSON NOT NULL,
    suite_hash VARCHAR(64) NOT NULL, next_run_at {ts} NOT NULL, last_run_at {ts}, created_at {ts} NOT NULL,
    PRIMARY KEY (name));
CREATE TABLE submissions (
    id {serial} NOT NULL, fingerprint VARCHAR(64) NOT NULL, suite_hash VARCHAR(64) NOT NULL,
    job_id VARCHAR(32) NOT NULL, created_at {ts} NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT uq_submission UNIQUE (fingerprint, suite_hash),
    FOREIGN KEY(job_id) REFERENCES jobs (id) ON DELETE CASCADE);
"""
TYPES = {"sqlite": {"ts": "DATETIME", "serial": "INTEGER"},
         "postgresql": {"ts": "TIMESTAMP WITHOUT TIME ZONE", "serial": "SERIAL"}}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: a file on SQLite, a new database on the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'lctx.db'}"
    return new_postgres_database(request.getfixturevalue("postgres_url"), "migrations")


def head() -> str:
    return _alembic()[1].get_current_head()


def test_empty_database_gets_head_and_the_models_match_the_migrations(url: str) -> None:
    store = Store(url)
    try:
        assert store.revision() is None
        assert store.upgrade() == head() and store.revision() == head()
        with store.read_engine.connect() as conn:
            # a model change without its migration shows up here
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        assert store.upgrade() == head()  # idempotent: the second start does nothing
    finally:
        store.close()


def test_pre_migration_database_is_adopted_with_its_rows(url: str) -> None:
    engine = create_engine(url)
    ddl = PRE_MIGRATION_DDL.format(**TYPES[engine.dialect.name])
    with engine.begin() as conn:
        for statement in filter(str.strip, ddl.split(";")):
            conn.execute(text(statement))
        conn.execute(text(
            "INSERT INTO jobs (id, checkpoint, checkpoint_path, fingerprint, tasks, task_names, rope, backend, "
            "priority, status, progress, attempts, created_at) VALUES ('old-job', 'ck', '/m/ck', :fp, :tasks, "
            "',passkey,', NULL, 'auto', 0, 'succeeded', '{}', 1, '2025-01-02 03:04:05')"),
            {"fp": "f" * 64, "tasks": json.dumps([{"name": "passkey"}])})
        conn.execute(text(
            "INSERT INTO jobs (id, checkpoint, checkpoint_path, fingerprint, tasks, task_names, rope, backend, "
            "priority, status, progress, attempts, created_at) VALUES ('nightly', 'ck', '/m/ck', :fp, :tasks, "
            "',needle,', :rope, 'torch', 7, 'queued', '{}', 0, '2025-01-03 03:04:05')"),
            {"fp": "e" * 64, "tasks": json.dumps([{"name": "needle", "trials": 2}]),
             "rope": json.dumps({"rope_type": "yarn", "factor": 4})})
        conn.execute(text("INSERT INTO submissions (fingerprint, suite_hash, job_id, created_at) "
                          "VALUES (:fp, 'h', 'nightly', '2025-01-03')"), {"fp": "e" * 64})
        conn.execute(text("INSERT INTO checkpoints VALUES ('ck', '/m/ck', :fp, 'softmax', 10, '2025-01-02')"),
                     {"fp": "f" * 64})
    engine.dispose()

    store = Store(url)
    try:
        assert store.upgrade() == head()
        with store.read_engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [head()]
        job = store.get_job("old-job")
        assert job.status == "succeeded" and job.tasks == [{"name": "passkey"}] and job.fingerprint == "f" * 64
        assert store.get_checkpoint("ck").variant == "softmax"
        assert store.count_by_status()["succeeded"] == 1
        # 0002: each job's request is what its columns held; the schedule's submission stays
        assert store.get_job("nightly").request == {"tasks": [{"name": "needle", "trials": 2}], "backend": "torch",
                                                    "rope": {"rope_type": "yarn", "factor": 4}, "priority": 7}
        assert store.get_job("old-job").request == {"tasks": [{"name": "passkey"}], "rope": None, "backend": "auto",
                                                    "priority": 0}
        with store.read_engine.connect() as conn:
            assert conn.execute(text("SELECT job_id FROM submissions")).scalars().all() == ["nightly"]
        assert [j.id for j in store.list_jobs(task="needle")[0]] == ["nightly"]
        new = store.add_job(checkpoint="ck", checkpoint_path="/m/ck", fingerprint="e" * 64,
                            tasks=[{"name": "passkey"}], rope=None, backend="auto", priority=0)
        assert store.get_job(new.id).status == "queued"
    finally:
        store.close()


def test_first_revision_is_the_pre_migration_layout() -> None:
    assert FIRST_REVISION == _alembic()[1].get_base()


def test_database_from_a_newer_lctx_is_refused(url: str) -> None:
    store = Store(url)
    try:
        store.upgrade()
        with store.write_engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
        with pytest.raises(SchemaError, match="at schema revision 9999_from_the_future.*upgrade lctx") as e:
            store.upgrade()
        assert "\n" not in str(e.value)
        assert store.revision() == "9999_from_the_future"  # refused, not touched
    finally:
        store.close()


@pytest.mark.integration
def test_serve_refuses_a_newer_database_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lctx.db'}"
    store = Store(url)
    store.upgrade()
    with store.write_engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    store.close()
    env = {**os.environ, "LCTX_HOME": str(tmp_path / "var"), "LCTX_DATABASE_URL": url,
           "LCTX_DEMO_CHECKPOINTS": "false", "LCTX_EXECUTOR": "false", "LCTX_SCHEDULER": "false"}
    proc = subprocess.run([sys.executable, "-m", "cli.main", "serve", "--port", str(free_port())],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lctx: error: "), proc.stderr
    assert "9999_from_the_future" in lines[0] and "upgrade lctx" in lines[0]
