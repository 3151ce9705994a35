"""Jobs run on Ray. With no address, `ray.init()` starts a local Ray, so the laptop default
and a cluster share one code path.

The executor claims queued jobs (a conditional update, so replicas never run one job twice)
up to the cluster's capacity, in priority order, and runs each job's coordinator
(`service.runner.coordinator.JobRun`) in a thread: the job's work units go to Ray actors (`ActorHandle`:
one `service.runner.worker.Worker` each, the checkpoint loaded once; one GPU each on GPU clusters,
`job_cpus` CPUs otherwise), as many as `job_workers` or one per GPU. A cancelled job's
coordinator kills its actors; a dead actor's unit runs again on a fresh one, placed by Ray
wherever resources are free. The executor keeps a heartbeat on its running jobs; on
start-up, jobs left running by a dead process go back to the queue and resume from their
per-sample records."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import (
    NodeDiedError,
    ObjectLostError,
    OutOfMemoryError,
    OwnerDiedError,
    RayActorError,
    WorkerCrashedError,
)

from service.core.metrics import Metrics
from service.core.settings import Settings
from service.core.status import FINAL
from service.runner.calls import Loaded, WorkerCall, checked_call
from service.runner.coordinator import JobRun
from service.runner.resolve import model_key, worker_config
from service.runner.warm import WarmPool, same_weights
from service.store import JobRow, Store

log = logging.getLogger("lctx.execution")

HEARTBEAT_EVERY_S = 5.0
CAPACITY_EVERY_S = 10.0
UNBLOCK_AFTER_S = 1.0  # at most one idle warm worker let go a second for each blocked worker


LOOPBACK = ("127.0.0.1", "localhost", "::1")

# Unix socket paths (<temp>/session_<date>_<pid>/sockets/plasma_store) must fit in 107 bytes.
MAX_RAY_TEMP_DIR = 44


def local_ray_options(settings: Settings) -> dict[str, Any]:
    """How the embedded Ray starts: every server on loopback (like the API's default
    host), its session files and auth token under LCTX_HOME, nothing in ~/.ray or /tmp/ray.

    Ray binds its gRPC servers to the node's address, which it resolves to the machine's
    outward IP unless clusters are off (its single-machine mode): that switch, read from
    the environment by the Ray processes we start and from `ray_constants` here, puts
    GCS, raylet, object manager and workers on 127.0.0.1."""
    import ray._private.ray_constants as ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    folder = (settings.home / "ray").absolute()
    folder.mkdir(parents=True, exist_ok=True)
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        token = folder / "auth_token"  # Ray's token auth, kept here instead of ~/.ray/auth_token
        if not token.is_file():
            token.touch(mode=0o600)
            token.write_text(secrets.token_hex(32))
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
    options: dict[str, Any] = {"_node_ip_address": "127.0.0.1"}
    if len(str(folder)) <= MAX_RAY_TEMP_DIR:
        options["_temp_dir"] = str(folder)
    else:
        log.warning("LCTX_HOME %s is too long for Ray's socket paths; Ray's session files go to its default "
                    "temporary folder", settings.home)
    return options


def connect_ray(settings: Settings) -> None:
    """Join the Ray cluster of `settings.ray_address` / RAY_ADDRESS, or start a local one."""
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "include_dashboard": False, "log_to_driver": False}
    address = settings.ray_address or os.environ.get("RAY_ADDRESS")  # the container's entrypoint sets RAY_ADDRESS
    if address:
        kwargs["address"] = address  # joining: Ray refuses num_cpus for a cluster it did not start
        if address.rsplit(":", 1)[0].strip("[]") in LOOPBACK:
            # A cluster on loopback (head and worker raylets on 127.0.0.1): Ray would rewrite the
            # address to this machine's outward IP, where nothing listens, unless clusters are off
            # for this process (the switch `local_ray_options` uses; other nodes are still joined).
            import ray._private.ray_constants as ray_constants

            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
            ray_constants.ENABLE_RAY_CLUSTER = False
    else:
        kwargs.update(local_ray_options(settings))
        if settings.ray_num_cpus:
            kwargs["num_cpus"] = settings.ray_num_cpus
    # ray.init replaces the SIGTERM handler with one that raises SystemExit inside the
    # event loop (a traceback on every stop); the server's own handler shuts down cleanly.
    previous = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    ray.init(**kwargs)
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


# A worker that died (its process, its node) makes its calls raise one of these; the unit it
# was running runs again on a fresh worker.
DIED = (RayActorError, WorkerCrashedError, NodeDiedError, ObjectLostError, OwnerDiedError)


def killed_for_memory(error: BaseException) -> bool:
    """Whether a worker's death looks like the out-of-memory killer's: Ray's memory monitor
    killed it, or its process was killed outright (SIGKILL: Ray's SYSTEM_ERROR exit, for which
    Ray itself names the kernel's OOM killer first) while its node lives. Without the kernel's
    log the two cannot be told apart; re-running at half the batch costs little either way.
    A node that died, or a worker lctx killed, is not memory."""
    if isinstance(error, OutOfMemoryError):
        return True
    if isinstance(error, NodeDiedError):
        return False
    text = str(getattr(error, "error_msg", "") or error)
    return ("worker process has died" in text and "SYSTEM_ERROR" in text) or "memory" in text.lower()


class ActorHandle:
    """A `Worker` as a Ray actor: one per GPU it asks for, or `job_cpus` CPUs. Its compute calls
    run one at a time, in order; control calls (`Drain`) in a concurrency group of their own, beside
    a running unit. It is given the worker's settings only (no database, no results folder)."""

    def __init__(self, settings: Settings, job_id: str, gpus: int) -> None:
        from service.runner.worker import Worker

        self.gpus = gpus
        remote = ray.remote(concurrency_groups={"control": 1})(Worker)
        self.actor = remote.options(num_cpus=settings.job_cpus, num_gpus=gpus, max_restarts=0, max_task_retries=0,
                                    name=f"lctx-worker-{job_id}-{secrets.token_hex(3)}").remote(worker_config(settings))
        # done once the actor runs: until then it starts, or waits for resources (which idle
        # warm workers may hold; Executor._unblock frees them)
        self.created = self.actor.__ray_ready__.remote().future()
        self.nudged = time.monotonic()

    def waiting(self) -> bool:
        """Not running yet: starting, or waiting for resources."""
        return not self.created.done()

    def call(self, call: WorkerCall) -> Future:
        """`call` sent to the actor's one entry point (`Worker.answer`): a control call (`Drain`)
        in the "control" concurrency group, beside a running unit."""
        answer = self.actor.answer
        if checked_call(call).control:
            answer = answer.options(concurrency_group="control")
        return answer.remote(call).future()

    def kill(self) -> None:
        ray.kill(self.actor, no_restart=True)


@dataclass
class _InFlight:
    run: JobRun
    thread: threading.Thread
    key: tuple  # its model key (service/runner/warm.py)


class Executor:
    def __init__(self, settings: Settings, store: Store, metrics: Metrics | None = None) -> None:
        self.settings, self.store, self.metrics = settings, store, metrics
        self.owner = settings.replica_id
        self.running: dict[str, _InFlight] = {}
        self.ready = threading.Event()
        self.error: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._capacity = (0, 0.0)
        self.pool = WarmPool(settings.warm_workers, settings.warm_memory_limit(), settings.warm_idle_seconds)
        self._last_heartbeat = 0.0
        self._last_recover = 0.0

    # -- life cycle ----------------------------------------------------------------

    def start(self) -> None:
        """Connect to Ray (in the calling thread: Ray's start-up wants the main thread),
        requeue what a dead process left running, then poll in a thread."""
        try:
            connect_ray(self.settings)
        except Exception as e:
            self.error = f"cannot start or join Ray: {e}"
            log.exception("executor failed to start")
            return
        recovered = self.store.recover(self.settings.lease_seconds, owner=self.owner)
        if recovered:
            log.info("requeued %d job(s) left running by a dead process: %s", len(recovered), recovered)
        self.ready.set()
        self._thread = threading.Thread(target=self._main, name="lctx-executor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Graceful: our running jobs go back to the queue and their tasks are killed,
        so the next start resumes them."""
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=30)
        for item in self.running.values():
            item.run.stop()  # requeued; its workers are killed
        for item in self.running.values():
            item.thread.join(timeout=30)
        self.running.clear()
        self.pool.clear()

    def wake(self) -> None:
        """Something changed (a submission, a cancel): poll now."""
        self._wake.set()

    def _main(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # the database may be briefly unavailable; keep serving
                log.exception("executor step failed")
            self._wake.wait(self.settings.poll_interval)
            self._wake.clear()

    # -- one poll ------------------------------------------------------------------

    def step(self) -> None:
        self._reap()
        self.pool.expire()
        self._unblock()
        t = time.monotonic()
        if t - self._last_heartbeat >= HEARTBEAT_EVERY_S:
            self.store.heartbeat(list(self.running), self.owner)
            self._last_heartbeat = t
        if t - self._last_recover >= self.settings.lease_seconds / 2:
            self.store.recover(self.settings.lease_seconds)  # stale leases of dead replicas
            self._last_recover = t
        self._fill()

    def capacity(self) -> int:
        if self.settings.max_running_jobs:
            return self.settings.max_running_jobs
        value, at = self._capacity
        if time.monotonic() - at > CAPACITY_EVERY_S or value == 0:
            res = ray.cluster_resources()
            gpus = int(res.get("GPU", 0))
            value = gpus if gpus else max(1, int(res.get("CPU", 1) // self.settings.job_cpus))
            self._capacity = (value, time.monotonic())
        return value

    def _room_for(self, gpus: int) -> bool:
        """Whether the cluster has the resources of one more worker free now."""
        free = ray.available_resources()
        return free.get("CPU", 0) >= self.settings.job_cpus and free.get("GPU", 0) >= gpus

    def _gpus(self) -> int:
        return 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0

    def gpus(self) -> int | None:
        """GPUs in the Ray cluster (None until connected), for refusing a backend it cannot run."""
        if not self.ready.is_set():
            return None
        return int(ray.cluster_resources().get("GPU", 0))

    def workers(self, job: JobRow) -> int:
        """Workers a job spreads over: LCTX_JOB_WORKERS, else one per GPU of the cluster, else 2."""
        if self.settings.job_workers:
            return self.settings.job_workers
        gpus = int(ray.cluster_resources().get("GPU", 0))
        return gpus if gpus and not job.endpoint else 2

    def _fill(self) -> None:
        while len(self.running) < self.capacity():
            job = self.store.claim_next(self.owner)
            if job is None:
                return
            gpus = 0 if job.endpoint else self._gpus()  # a served model's worker only sends requests
            key = model_key(job, self.settings)

            def spawn(job_id: str = job.id, gpus: int = gpus, key: tuple = key) -> ActorHandle:
                warm = self.pool.take(key, near=lambda other: same_weights(other, key))
                if warm is not None:
                    return warm
                if not self._room_for(gpus):  # idle warm workers of other models hold what it needs
                    self.pool.evict_one(keep=key)
                return ActorHandle(self.settings, job_id, gpus)

            def release(handle: ActorHandle, info: Loaded, key: tuple = key) -> None:
                self.pool.put(handle, key, info.model_bytes)

            run = JobRun(self.settings, self.store, job, spawn, self.workers(job), died=DIED, release=release,
                         for_memory=killed_for_memory, cluster_gpus=self.gpus())
            thread = threading.Thread(target=run.run, name=f"lctx-job-{job.id}", daemon=True)
            self.running[job.id] = _InFlight(run, thread, key)
            thread.start()
            log.info("job %s started (attempt %d, up to %d workers)", job.id, job.attempts, run.size)

    def _unblock(self) -> None:
        """A worker Ray cannot place because idle warm workers hold the resources gets them:
        one idle worker is let go per wait (at most one a second per waiting worker). Without
        this, a worker spawned while another job's worker ran waits forever once that one is
        kept warm. A worker merely starting (its process coming up) waits too; it is told
        apart by counting: only when the workers held and waited for ask more than the
        cluster has is one blocked."""
        waiting = [(item, h) for item in list(self.running.values()) for h in list(item.run.handles)
                   if isinstance(h, ActorHandle) and h.waiting()]
        if not waiting or not len(self.pool):
            return
        held = [h for item in list(self.running.values()) for h in list(item.run.handles)] + self.pool.handles()
        total = ray.cluster_resources()
        if (len(held) * self.settings.job_cpus <= total.get("CPU", 0)
                and sum(getattr(h, "gpus", 0) for h in held) <= total.get("GPU", 0)):
            return  # every worker fits: those waiting are starting, not blocked
        now = time.monotonic()
        for item, handle in waiting:
            if now - handle.nudged >= UNBLOCK_AFTER_S:
                handle.nudged = now
                self.pool.evict_one(keep=item.key, any_key=True)

    def _reap(self) -> None:
        for job_id, item in list(self.running.items()):
            if item.thread.is_alive():
                continue
            self.running.pop(job_id, None)
            status = item.run.status or self.store.get_job(job_id).status
            log.info("job %s ended: %s (%d unit runs, %d re-run after a worker died)", job_id, status,
                     item.run.unit_runs, len(item.run.reruns))
            if self.metrics and status in FINAL:
                self.metrics.observe_job(self.store.get_job(job_id))
