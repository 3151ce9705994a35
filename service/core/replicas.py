"""This server's row in the `replicas` table: one live server per replica id.

The id names the jobs a server runs; a server starting up requeues the running jobs of
its own id (its previous run died with them). Two live servers with one id would requeue
each other's jobs, so the second is refused. A holder counts as dead when its heartbeat
is older than the lease, or when it ran on this host and its pid is gone (or is ours: a
container restarted with the same pid) — so a server restarted after a crash is accepted
at once."""

from __future__ import annotations

import os
import secrets
import socket
from datetime import datetime

from service.core.settings import Settings
from service.store import ReplicaRow, Store, now

INSTANCE = secrets.token_hex(8)  # this process; `lctx serve`'s check and the app's registration share it


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def holder_is_dead(row: ReplicaRow) -> bool:
    """A holder on this host whose process is gone (or is this very process: a pid reused)."""
    if row.host != socket.gethostname():
        return False  # another host: only its heartbeat tells
    return row.pid == os.getpid() or not pid_alive(row.pid)


def this_replica(settings: Settings, started_at: datetime | None = None) -> ReplicaRow:
    return ReplicaRow(id=settings.replica_id, instance=INSTANCE, host=socket.gethostname(), pid=os.getpid(),
                      home=str(settings.home), url=settings.url, started_at=started_at or now(),
                      heartbeat_at=now())


def register(store: Store, settings: Settings) -> None:
    """Claim this server's replica id (service.core.errors.Conflict when a live server holds it)."""
    store.claim_replica(this_replica(settings), settings.lease_seconds, holder_is_dead)
