"""The API's side of the dispatcher process (service/runner/dispatcher.py): start it, watch it,
restart it when it dies, stop it with the API.

A thread polls the child: when it dies (a Ray driver abort, a kill -9), the death is logged
with its exit code or signal and a new one starts after a back-off (1 s, doubling to 30 s;
back to 1 s after a minute of life). The restarted dispatcher's Executor requeues the jobs
its predecessor left running (`store.recover(owner=...)`) and they resume from their
recorded samples. The same thread keeps this replica's row in the `replicas` table alive
and observes the durations of jobs this replica ran that reached a final state (they end
in the dispatcher; the histogram lives here, where /metrics is served).

What the API asked of the in-process executor it now asks here: `wake()` (a byte on the
child's stdin), `gpus()` and `not_ready()` (read from `<home>/dispatcher.json`). No Ray
import: the API process never loads it."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from service.core.metrics import Metrics
from service.core.replicas import INSTANCE, register
from service.core.settings import Settings
from service.runner.dispatcher import REPORT_EVERY_S, read_status, settings_json, status_path
from service.store import Store, now

log = logging.getLogger("lctx.supervisor")

TICK_S = 0.2
OBSERVE_EVERY_S = 1.0
OBSERVE_WINDOW = timedelta(seconds=60)  # a final state committed this late is still observed once
SILENT_AFTER_S = max(15.0, 10 * REPORT_EVERY_S)  # a dispatcher this long without a report is not ready


@dataclass
class Death:
    pid: int
    returncode: int
    lived_s: float
    error: str | None  # what it reported last, if anything

    def describe(self) -> str:
        if self.returncode < 0:
            try:
                how = f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                how = f"killed by signal {-self.returncode}"
        else:
            how = f"exited with code {self.returncode}"
        return f"pid {self.pid} {how} after {self.lived_s:.1f} s" + (f" ({self.error})" if self.error else "")


def dispatcher_command() -> list[str]:
    return [sys.executable, "-m", "service.runner.dispatcher"]


class DispatcherSupervisor:
    """`command` is the child to run (the dispatcher; the supervisor's own tests give it
    small stand-in programs to die on cue); the back-off numbers are parameters for the same reason."""

    def __init__(self, settings: Settings, store: Store, metrics: Metrics | None = None, *,
                 command: list[str] | None = None, backoff_s: float = 1.0, backoff_max_s: float = 30.0,
                 stable_after_s: float = 60.0, stop_timeout_s: float = 45.0) -> None:
        self.settings, self.store, self.metrics = settings, store, metrics
        self.command = command or dispatcher_command()
        self.backoff_s, self.backoff_max_s, self.stable_after_s = backoff_s, backoff_max_s, stable_after_s
        self.stop_timeout_s = stop_timeout_s
        self.deaths: list[Death] = []
        self.starts: list[float] = []  # monotonic times the child was started
        self.returncode: int | None = None  # of the last child, once stopped
        self._lock = threading.Lock()
        self._observe_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._proc_started = 0.0
        self._next_start = 0.0
        self._delay = 0.0
        self._status: dict[str, Any] | None = None
        self._gpus: int | None = None
        self._reported = threading.Event()  # set at the dispatcher's first report of the cluster's GPUs
        self._last_heartbeat = 0.0
        self._last_observed = 0.0
        self._since = now()
        self._observed: dict[str, datetime] = {}

    # -- life cycle ----------------------------------------------------------------

    def start(self) -> None:
        """Claim the replica id (Conflict when a live server holds it), start the child and the watcher."""
        register(self.store, self.settings)
        status_path(self.settings).unlink(missing_ok=True)
        self._since = now()
        with self._lock:
            self._spawn()
        self._thread = threading.Thread(target=self._main, name="lctx-supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """SIGTERM the child (it requeues its running jobs), wait, SIGKILL if it hangs; free the replica id."""
        with self._lock:
            self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.error("dispatcher pid %d did not stop within %.0f s of SIGTERM; killing it", proc.pid,
                          self.stop_timeout_s)
                proc.kill()
                proc.wait(30)
        if proc is not None:
            self.returncode = proc.returncode
            if proc.stdin:
                proc.stdin.close()
        try:
            self.store.release_replica(self.settings.replica_id, INSTANCE)
        except Exception:
            log.exception("cannot free replica id %s", self.settings.replica_id)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    # -- what the API asks -----------------------------------------------------------

    def wake(self) -> None:
        """A job was submitted or cancelled: tell the dispatcher to poll now (it also polls on its own)."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        try:
            os.write(proc.stdin.fileno(), b"w")
        except (BlockingIOError, BrokenPipeError, ValueError, OSError):
            pass  # a full pipe has wake-ups enough; a dead child is restarted and polls anyway

    def gpus(self) -> int | None:
        """GPUs in the Ray cluster as the dispatcher last reported them (None before any report)."""
        return self._gpus

    def wait_gpus(self, timeout: float) -> int | None:
        """`gpus()`, waiting up to `timeout` seconds for the dispatcher's first report (right
        after start, Ray is still starting): woken by the report, not by polling."""
        self._reported.wait(timeout)
        return self._gpus

    def not_ready(self) -> str | None:
        """None when the dispatcher is connected and reporting; otherwise why not, for /readyz."""
        status, proc = self._status, self._proc
        if proc is None or proc.poll() is not None:
            if self.deaths:
                wait = max(0.0, self._next_start - time.monotonic())
                return f"dispatcher is restarting: {self.deaths[-1].describe()}; next start in {wait:.0f} s"
            return "dispatcher is starting"
        if status is None or status.get("pid") != proc.pid:
            after = f" after {self.deaths[-1].describe()}" if self.deaths else ""
            return f"dispatcher is starting (pid {proc.pid}){after}"
        if status.get("error"):
            return f"dispatcher: {status['error']}"
        if not status.get("ready"):
            return f"dispatcher (pid {proc.pid}) is {status.get('state', 'starting')}"
        silent = time.time() - float(status.get("updated_at", 0))
        if silent > SILENT_AFTER_S:
            return f"dispatcher (pid {proc.pid}) has not reported for {silent:.0f} s"
        return None

    # -- the watcher -------------------------------------------------------------------

    def _spawn(self) -> None:
        """Start a child (under the lock); its stdin gets the settings, then wake-ups."""
        proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, bufsize=0,
                                start_new_session=True)  # the terminal's Ctrl-C reaches the API, which stops it
        assert proc.stdin is not None
        try:
            proc.stdin.write(settings_json(self.settings).encode() + b"\n")
        except BrokenPipeError:
            pass  # it died at once: the watcher sees it
        fd = proc.stdin.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)  # wake() never blocks
        self._proc, self._proc_started = proc, time.monotonic()
        self.starts.append(self._proc_started)
        log.info("dispatcher started: pid %d", proc.pid)

    def _main(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception:  # the database may be briefly unavailable; keep watching
                log.exception("dispatcher supervisor tick failed")
            self._stop.wait(TICK_S)

    def _tick(self) -> None:
        t = time.monotonic()
        status = read_status(status_path(self.settings))
        if status is not None:
            self._status = status
            if status.get("gpus") is not None:
                self._gpus = int(status["gpus"])
                self._reported.set()
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is not None:
                self._died(proc, t)
            if self._proc is None and t >= self._next_start and not self._stop.is_set():
                self._spawn()
        if t - self._last_heartbeat >= min(5.0, self.settings.lease_seconds / 4):
            self._last_heartbeat = t  # first: a database that is down is retried at this pace, not every tick
            if not self.store.heartbeat_replica(self.settings.replica_id, INSTANCE):
                log.error("replica id %s is held by another server now (our heartbeat lapsed); its running jobs "
                          "and ours may be requeued by each other: stop one of them", self.settings.replica_id)
        if t - self._last_observed >= OBSERVE_EVERY_S:
            self._last_observed = t
            self.observe_finished()

    def _died(self, proc: subprocess.Popen[bytes], t: float) -> None:
        lived = t - self._proc_started
        status = self._status if self._status and self._status.get("pid") == proc.pid else None
        death = Death(proc.pid, int(proc.returncode), lived, status.get("error") if status else None)
        if not self.deaths or lived >= self.stable_after_s:
            self._delay = self.backoff_s
        else:
            self._delay = min(self._delay * 2, self.backoff_max_s)
        self.deaths.append(death)
        self._next_start = t + self._delay
        self._proc = None
        if proc.stdin:
            proc.stdin.close()
        log.error("dispatcher %s; restarting it in %.1f s (its running jobs are requeued on start)",
                  death.describe(), self._delay)

    def observe_finished(self) -> None:
        """Job durations, once each: this replica's jobs that reached a final state since the
        last look. The watcher calls it every second and /metrics before it answers."""
        if self.metrics is None:
            return
        with self._observe_lock:
            window = max(self._since, now() - OBSERVE_WINDOW)
            for job in self.store.finished_since(self.settings.replica_id, window):
                if job.id not in self._observed:
                    self.metrics.observe_job(job)
                    self._observed[job.id] = job.finished_at
            self._observed = {k: v for k, v in self._observed.items() if v >= window}
