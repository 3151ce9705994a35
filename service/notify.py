"""Webhooks: lctx POSTs a small JSON when a job finishes or fails or a regression is found, to
the URLs a schedule names (`alerts.webhooks`) or the service names for every job
(LCTX_WEBHOOKS). Each body has a Slack-compatible `text`, so a Slack incoming webhook works as
it is. Sending never blocks a job: a `Notifier` is one background thread with a bounded queue,
retrying with exponential backoff (a 4xx other than 408/429 is final). A body carries names,
numbers and the dashboard's link, never a server path or a secret (every text is masked with
the service's secrets); a secret for the receiver travels only in the header the hook names,
read from a variable on the endpoint keys' allow-list when sent."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from checkpoints.errors import EndpointError
from clients.endpoint.client import check_base_url
from service.core.errors import InvalidRequest
from service.core.redact import mask
from service.core.settings import Settings

log = logging.getLogger("lctx.notify")

EVENTS = ("finished", "failed", "regression")
ATTEMPTS = 5
BACKOFF_S = 1.0  # 1, 2, 4, 8 s between the attempts
TIMEOUT_S = 10.0
QUEUE_SIZE = 1000  # bodies waiting at most; beyond, one is dropped and logged (a dead receiver never grows memory)


def check_webhook(settings: Settings, url: str, secret_env: str | None, where: str = "webhook") -> str:
    """The URL normalised, or InvalidRequest: on the hosts endpoints may be on (the same allow-list
    check), its secret variable on the endpoint keys' allow-list."""
    try:
        checked = check_base_url(url, settings.endpoint_host_list)
    except EndpointError as e:
        raise InvalidRequest(f"{where}: {str(e).replace('endpoint', 'webhook')}") from e
    settings.check_endpoint_key(secret_env)
    return checked


@dataclass(frozen=True)
class Hook:
    url: str
    events: frozenset[str] = frozenset(EVENTS)
    secret_env: str | None = None
    secret_header: str = "Authorization"

    @classmethod
    def of(cls, data: dict[str, Any]) -> Hook:
        return cls(url=data["url"], events=frozenset(data.get("events") or EVENTS), secret_env=data.get("secret_env"),
                   secret_header=data.get("secret_header") or "Authorization")

    def headers(self) -> dict[str, str]:
        value = os.environ.get(self.secret_env) if self.secret_env else None
        if not value:
            return {}
        return {self.secret_header: f"Bearer {value}" if self.secret_header.lower() == "authorization" else value}


def hooks_for(settings: Settings, schedule_alerts: dict[str, Any] | None, event: str) -> list[Hook]:
    """The service's hooks and the schedule's that want `event` (each URL once)."""
    hooks = [Hook(url) for url in settings.webhooks]
    hooks += [Hook.of(h) for h in (schedule_alerts or {}).get("webhooks", []) if isinstance(h, dict) and "url" in h]
    seen: set[str] = set()
    out = []
    for h in hooks:
        if event not in h.events or h.url in seen:
            continue
        seen.add(h.url)
        try:  # checked when sent too: the allow-lists may have changed since the hook was named
            check_webhook(settings, h.url, h.secret_env)
        except InvalidRequest as e:
            log.warning("webhook skipped: %s", e)
            continue
        out.append(h)
    return out


def clean(body: dict[str, Any], secrets: Iterable[str]) -> dict[str, Any]:
    """Every string of the body masked with the service's secrets."""
    secrets = list(secrets)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return mask(v, secrets)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v
    return walk(body)


class Notifier:
    """One background thread POSTing queued bodies, each retried with backoff; `send` never
    waits for the network. `flush` waits until the queue is empty (tests, shutdown)."""

    def __init__(self, attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S, timeout_s: float = TIMEOUT_S) -> None:
        self.attempts, self.backoff_s, self.timeout_s = attempts, backoff_s, timeout_s
        self.queue: queue.Queue[tuple[Hook, dict[str, Any]]] = queue.Queue(QUEUE_SIZE)
        self.sent = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._loop, name="lctx-notify", daemon=True)
        self._thread.start()

    def send(self, hook: Hook, body: dict[str, Any]) -> None:
        try:
            self.queue.put_nowait((hook, body))
        except queue.Full:
            log.warning("webhook queue full: a %s notification to %s dropped", body.get("event"), hook.url)

    def flush(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while self.queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.queue.unfinished_tasks

    def _loop(self) -> None:
        with httpx.Client(timeout=self.timeout_s, follow_redirects=False) as client:
            while True:
                hook, body = self.queue.get()
                try:
                    self._post(client, hook, body)
                finally:
                    self.queue.task_done()

    def _post(self, client: httpx.Client, hook: Hook, body: dict[str, Any]) -> None:
        for attempt in range(self.attempts):
            try:
                r = client.post(hook.url, json=body, headers=hook.headers())
                if r.is_success:
                    self.sent += 1
                    return
                final = 400 <= r.status_code < 500 and r.status_code not in (408, 429)
                why = f"HTTP {r.status_code}"
            except httpx.HTTPError as e:
                final, why = False, type(e).__name__
            if final or attempt + 1 == self.attempts:
                break
            time.sleep(self.backoff_s * 2 ** attempt)
        self.failed += 1
        log.warning("webhook %s: the %s notification was not delivered after %d attempts (%s)", hook.url,
                    body.get("event"), attempt + 1, why)


_notifier: Notifier | None = None
_lock = threading.Lock()


def notifier() -> Notifier:
    """The process's notifier (started on first use)."""
    global _notifier
    with _lock:
        if _notifier is None:
            _notifier = Notifier()
        return _notifier


def job_body(settings: Settings, job: Any, status: str) -> dict[str, Any]:
    """A job's end: its id, checkpoint name, tasks, status, error as stored (client text) and link."""
    event = "finished" if status == "succeeded" else "failed"
    tasks = [t.get("name") for t in job.tasks if isinstance(t, dict)]
    link = f"{settings.url}/jobs/{job.id}"
    error = f": {job.error}" if event == "failed" and job.error else ""
    return {"event": event, "job": job.id, "checkpoint": job.checkpoint, "schedule": job.schedule, "status": status,
            "tasks": tasks, "error": job.error if event == "failed" else None, "link": link,
            "text": f"lctx: job {job.id} ({job.checkpoint}; {', '.join(map(str, tasks))}) {status}{error} {link}"}


def regression_body(settings: Settings, job: Any, rows: list[Any]) -> dict[str, Any]:
    """One job's regressions in one body: each column's drop with its interval."""
    link = f"{settings.url}/jobs/{job.id}"
    items = [{"task": r.task, "column": r.column, "against": r.against, "baseline_job": r.baseline_job_id,
              "value": r.value, "baseline_value": r.baseline_value, "difference": r.difference,
              "interval": [r.low, r.high], "threshold": r.threshold} for r in rows]
    lines = "; ".join(f"{r.task} {r.column} {r.baseline_value:.3g} -> {r.value:.3g} ({r.difference:+.3g}, 95% "
                      f"[{r.low:+.3g}, {r.high:+.3g}], vs {r.against} job {r.baseline_job_id})" for r in rows)
    return {"event": "regression", "job": job.id, "checkpoint": job.checkpoint, "schedule": job.schedule,
            "regressions": items, "link": link,
            "text": f"lctx: regression in {job.checkpoint} (job {job.id}): {lines} {link}"}
