"""The dispatcher process: `python -m service.runner.dispatcher`, started and restarted by the
API's `DispatcherSupervisor` (service/runner/supervisor.py). It runs the Executor — Ray's driver:
claiming jobs, handing them to Ray, reaping them — in a process of its own, so a fatal
error inside Ray's driver (a C++ abort) takes down this process, not the API.

The API talks to it over two channels:
- stdin: the first line is the Settings as JSON (secrets included: nothing on argv or in
  the environment); after it, every byte is a wake-up (a job was submitted or cancelled:
  poll now), and end-of-file means the API process is gone: stop, as on SIGTERM, so no
  orphan keeps running jobs.
- `<home>/dispatcher.json`, written atomically every second: pid, ready, error, the
  cluster's GPU count, running jobs, started/updated times. /readyz and the submission
  check read it through the supervisor.

SIGTERM (or stdin's end) stops gracefully: the running jobs go back to the queue and their
Ray tasks are killed, then the process exits 0. A dispatcher that cannot start or join Ray
reports the error and exits 3; the supervisor restarts it with a back-off. One dispatcher
per home: it holds `<home>/dispatcher.lock`, so a new one waits until one left over from a
killed server has requeued its jobs and gone."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from checkpoints.jsonfiles import write_json_atomic
from service.core.redact import install_log_redaction
from service.core.settings import Settings
from service.store import Store

log = logging.getLogger("lctx.dispatcher")

STATUS_FILE = "dispatcher.json"
LOCK_FILE = "dispatcher.lock"
REPORT_EVERY_S = 1.0
EXIT_NO_RAY = 3


def settings_json(settings: Settings) -> str:
    """The settings as one JSON line, secrets in clear (they travel over a private pipe)."""
    data = settings.model_dump(mode="json")
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            data[name] = value.get_secret_value()
    return json.dumps(data)


def status_path(settings: Settings) -> Path:
    return settings.home / STATUS_FILE


def read_status(path: Path) -> dict[str, Any] | None:
    """The last report, or None when there is none (or it cannot be read)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_line(fd: int) -> bytes:
    """One line from a raw fd, byte by byte: nothing after it is read ahead (the wake bytes)."""
    line = bytearray()
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return bytes(line)


class _Reporter:
    def __init__(self, settings: Settings) -> None:
        self.path = status_path(settings)
        self.base = {"pid": os.getpid(), "started_at": time.time()}
        self.gpus: int | None = None

    def write(self, state: str, ready: bool = False, error: str | None = None, running: int = 0) -> None:
        write_json_atomic(self.path, {**self.base, "state": state, "ready": ready, "error": error,
                                      "gpus": self.gpus, "running": running, "updated_at": time.time()})


def _listen(fd: int, wake: Any, stop: threading.Event) -> None:
    """Wake-ups from the API; end-of-file: the API is gone."""
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:
            log.warning("the API process is gone (its pipe closed); stopping")
            stop.set()
            return
        wake()


def _lock_home(settings: Settings, stop: threading.Event, reporter: _Reporter) -> int | None:
    """Wait for `<home>/dispatcher.lock` (held until this process ends); None when told to stop first."""
    fd = os.open(settings.home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if not waited:
                log.warning("another dispatcher on %s is still stopping; waiting for it", settings.home)
                reporter.write("waiting for the previous dispatcher on this home to stop")
                waited = True
            if stop.wait(0.2):
                os.close(fd)
                return None


def run(settings: Settings, stdin: int) -> int:
    from service.runner.executor import Executor  # ray loads here, in this process only

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    reporter = _Reporter(settings)
    store = Store(settings.database, retry_seconds=settings.db_retry_seconds)
    executor = Executor(settings, store)  # durations are observed by the API, from the store
    threading.Thread(target=_listen, args=(stdin, executor.wake, stop), name="lctx-dispatcher-pipe",
                     daemon=True).start()
    if _lock_home(settings, stop, reporter) is None:
        return 0
    reporter.write("connecting to Ray")
    executor.start()  # in the main thread: Ray's start-up wants it
    if executor.error:
        reporter.write("failed", error=executor.error)
        store.close()
        return EXIT_NO_RAY
    log.info("dispatcher %d ready (replica %s)", os.getpid(), settings.replica_id)
    while True:
        try:
            reporter.gpus = executor.gpus()
        except Exception as e:  # Ray's GCS briefly unreachable: keep the last count
            log.warning("cannot read the cluster's resources: %s", e)
        reporter.write("ready", ready=True, running=len(executor.running))
        if stop.wait(REPORT_EVERY_S):
            break
    reporter.write("stopping", running=len(executor.running))
    executor.stop()
    reporter.write("stopped")
    store.close()
    log.info("dispatcher %d stopped; its running jobs are back in the queue", os.getpid())
    return 0


def main() -> int:
    install_log_redaction()
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"%(asctime)s dispatcher[{os.getpid()}] %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("lctx").addHandler(handler)
    logging.getLogger("lctx").setLevel(logging.INFO)
    line = _read_line(0)
    if not line.strip():
        print("lctx dispatcher: no settings on stdin; it is started by `lctx serve` (service/runner/supervisor.py), "
              "which writes them there", file=sys.stderr)
        return 2
    settings = Settings(**json.loads(line))
    install_log_redaction(settings.secrets)  # and the values of its secrets, known now
    log.info("dispatcher %d starting at %s", os.getpid(), datetime.now(UTC).isoformat(timespec="seconds"))
    return run(settings, 0)


if __name__ == "__main__":
    sys.exit(main())
