"""One `lctx serve` per home (and per SQLite database file): an exclusive, non-blocking
flock on `<home>/server.lock` (and on `<database>.server.lock`), taken before anything
touches the database. The lock belongs to the open file, so the OS drops it when the
process dies: a crashed server never blocks the next one. The holder's pid, URL, host and
start time go to a JSON file beside each lock, so a refused server can name it."""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url

from checkpoints.jsonfiles import write_json_atomic
from service.core.errors import Conflict
from service.core.settings import Settings

HOME_LOCK = "server.lock"
HOME_INFO = "server.json"


class ServerRunning(Conflict):
    """Another live server holds this home or database."""


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL (None for another database or an in-memory one)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).absolute()


def _holder(info: Path) -> str:
    try:
        held = json.loads(info.read_text())
        return f"pid {held['pid']}, {held['url']}, host {held['host']}, started {held['started_at']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its details are not written yet (it is starting)"


class ServerLock:
    """The locks of one server; `acquire()` raises ServerRunning naming the holder."""

    def __init__(self, settings: Settings) -> None:
        home = settings.home.absolute()
        self.places: list[tuple[Path, Path, str]] = [
            (home / HOME_LOCK, home / HOME_INFO,
             f"on this home ({home}): {{holder}}; stop it, or give this one its own LCTX_HOME")]
        database = sqlite_file(settings.database)
        if database is not None:
            self.places.append((database.with_name(database.name + ".server.lock"),
                                database.with_name(database.name + ".server.json"),
                                f"on this database ({database}): {{holder}}; stop it, or give this one its own "
                                "LCTX_DATABASE_URL"))
        self.info = {"pid": os.getpid(), "url": settings.url, "host": socket.gethostname(), "home": str(home),
                     "started_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")}
        self._fds: list[int] = []

    def acquire(self) -> None:
        try:
            for lock, info, where in self.places:
                lock.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (PEP 446)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise ServerRunning(f"another lctx server is running {where.format(holder=_holder(info))}") \
                        from None
                self._fds.append(fd)
                write_json_atomic(info, self.info)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Unlock (the OS does it too when the process ends); the info files go with the locks."""
        for fd, (_, info, _) in zip(self._fds, self.places, strict=False):
            info.unlink(missing_ok=True)
            os.close(fd)
        self._fds.clear()
