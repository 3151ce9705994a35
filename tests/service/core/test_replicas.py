"""Replica ids (#27), on SQLite and a real PostgreSQL 15: the default id is unique per
home and stable across restarts; a live server holding an id (a real second process)
refuses another; a holder that died (its pid gone, or its heartbeat past the lease) is
taken over at once."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from service.core.errors import Conflict
from service.core.replicas import INSTANCE, register, this_replica
from service.core.settings import Settings
from service.store import Base, ReplicaRow, Store, now


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'lctx.db'}"
    url = request.getfixturevalue("postgres_url")
    s = Store(url)
    with s.write_engine.begin() as conn:  # one server for the session: start from empty tables
        Base.metadata.drop_all(conn)
    s.close()
    return url


@pytest.fixture
def store(url: str) -> Store:
    s = Store(url)
    s.upgrade()
    yield s
    s.close()


HOLDER = textwrap.dedent("""
    import sys, time
    from service.core.replicas import register
    from service.core.settings import Settings
    from service.store import Store
    register(Store(sys.argv[1]), Settings(home=sys.argv[2], replica_id="shared"))
    print("registered", flush=True)
    time.sleep(120)
""")


def test_default_ids_are_unique_per_home_and_stable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LCTX_REPLICA_ID", raising=False)
    a, b = Settings(home=tmp_path / "a"), Settings(home=tmp_path / "b")
    assert a.replica_id == Settings(home=tmp_path / "a").replica_id  # a restart knows its jobs
    assert a.replica_id != b.replica_id and a.replica_id.startswith(socket.gethostname() + "-")
    monkeypatch.setenv("LCTX_REPLICA_ID", "gpu-box-1")
    assert Settings(home=tmp_path / "a").replica_id == "gpu-box-1"


@pytest.mark.timeout(60)
def test_an_id_held_by_a_live_process_is_refused_until_it_dies(store: Store, tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, store.url, str(tmp_path / "other")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "registered"
        ours = Settings(home=tmp_path / "ours", replica_id="shared")
        with pytest.raises(Conflict) as refused:
            register(store, ours)
        message = str(refused.value)
        assert f"pid {holder.pid}" in message and socket.gethostname() in message and "LCTX_REPLICA_ID" in message
        assert str(tmp_path / "other") in message
        assert store.get_replica("shared").pid == holder.pid  # untouched
    finally:
        holder.kill()
        holder.wait(10)
    register(store, ours)  # its heartbeat is fresh, but its process is gone: a restart is accepted at once
    row = store.get_replica("shared")
    assert row.instance == INSTANCE and row.home == str(tmp_path / "ours")


def test_another_hosts_holder_counts_until_its_lease_lapses(store: Store, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, replica_id="r1", lease_seconds=60)
    elsewhere = ReplicaRow(id="r1", instance="elsewhere", host="another-host", pid=1, home="/srv/lctx",
                           url="http://10.0.0.7:8000", started_at=now(), heartbeat_at=now())
    store.claim_replica(elsewhere, 60, lambda row: False)
    with pytest.raises(Conflict, match="host another-host, pid 1, home /srv/lctx, http://10.0.0.7:8000"):
        register(store, settings)
    with store.writing() as s:  # its heartbeats stopped a lease ago
        s.get(ReplicaRow, "r1").heartbeat_at = now() - timedelta(seconds=61)
    register(store, settings)
    assert store.get_replica("r1").instance == INSTANCE
    assert not store.heartbeat_replica("r1", "elsewhere")  # the old holder learns it lost the id
    assert store.heartbeat_replica("r1", INSTANCE)
    register(store, settings)  # our own instance again: a refresh, not a conflict


def test_a_clean_stop_frees_the_id(store: Store, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, replica_id="r2")
    register(store, settings)
    store.release_replica("r2", "someone-else")  # only the holder releases
    assert store.get_replica("r2") is not None
    store.release_replica("r2", INSTANCE)
    assert store.get_replica("r2") is None
    other = this_replica(settings)
    other.instance = "next-server"
    store.claim_replica(other, settings.lease_seconds, lambda row: False)
    assert store.get_replica("r2").instance == "next-server"
