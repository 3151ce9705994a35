"""The servers that run jobs (replicas): claims, heartbeats, release. Methods return detached rows."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from service.core.errors import Conflict
from service.store.db import Database, retried
from service.store.models import ReplicaRow, now


class ReplicaAccess(Database):
    """The store's access to replicas: claim an id, heartbeat, release."""

    @retried
    def claim_replica(self, row: ReplicaRow, lease_seconds: float, dead: Callable[[ReplicaRow], bool]) -> None:
        """Register `row` under its id. Refused (Conflict) while another instance holds the id
        and is alive: a heartbeat within `lease_seconds` and not `dead(holder)`. Our own
        instance again only refreshes the row."""
        for _ in range(2):
            try:
                with self.writing() as s:
                    held = s.scalars(select(ReplicaRow).where(ReplicaRow.id == row.id).with_for_update()).first()
                    if held is not None and held.instance != row.instance:
                        age = (now() - held.heartbeat_at).total_seconds()
                        if age < lease_seconds and not dead(held):
                            raise Conflict(
                                f"replica id {row.id!r} is held by a live lctx server: host {held.host}, pid "
                                f"{held.pid}, home {held.home}, {held.url}, started {held.started_at:%Y-%m-%d %H:%M:%S}"
                                f" UTC, last heartbeat {age:.0f} s ago; stop that server, or give this one an "
                                "id of its own with LCTX_REPLICA_ID")
                    if held is not None:
                        s.delete(held)
                        s.flush()
                    s.add(ReplicaRow(id=row.id, instance=row.instance, host=row.host, pid=row.pid, home=row.home,
                                     url=row.url, started_at=row.started_at, heartbeat_at=now()))
                return
            except IntegrityError:  # another process inserted the id between our read and write: read it
                continue
        raise Conflict(f"replica id {row.id!r} is being claimed by another server right now; retry, or set LCTX_REPLICA_ID")

    @retried
    def heartbeat_replica(self, replica_id: str, instance: str) -> bool:
        """False when the row is no longer ours (our lease lapsed and another server took the id)."""
        with self.writing() as s:
            res = s.execute(update(ReplicaRow).where(ReplicaRow.id == replica_id, ReplicaRow.instance == instance)
                            .values(heartbeat_at=now()))
            return res.rowcount == 1

    @retried
    def release_replica(self, replica_id: str, instance: str) -> None:
        """A clean stop: the id is free at once."""
        with self.writing() as s:
            s.execute(delete(ReplicaRow).where(ReplicaRow.id == replica_id, ReplicaRow.instance == instance))

    @retried
    def get_replica(self, replica_id: str) -> ReplicaRow | None:
        with self.reading() as s:
            return s.get(ReplicaRow, replica_id)
