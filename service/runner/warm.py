"""Warm workers: a worker that finished a job keeps its model loaded (and its kernels
compiled) for the next job of the same model key (checkpoint, RoPE setting, backend,
device), so a small job does not pay for starting an actor, importing torch and loading
weights (issue #41 item 5, #40 item 2); a job of the same weights with another RoPE setting
or backend takes an idle one of those, which keeps its weights (no actor start, no torch
import, nothing read from disk). Idle workers are kept within a memory budget of
weights and a count, least recently used out first, and let go after a while idle or
when the cluster needs their resources for a worker of another model."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("lctx.warm")


def same_weights(a: tuple, b: tuple) -> bool:
    """Whether two model keys (`service.runner.resolve.model_key`) name the same checkpoint's
    weights on the same device, a RoPE setting or backend apart: a worker idle with one takes a
    job of the other in its own process, keeping the weights it holds (a RoPE sweep's jobs, one
    after another: no actor start, no torch import, nothing read from disk)."""
    return a[0] == b[0] == "checkpoint" and a[1:3] == b[1:3] and a[5] == b[5]


@dataclass
class _Idle:
    handle: Any  # service.runner.coordinator.Handle
    key: tuple
    nbytes: int
    since: float


class WarmPool:
    """Idle workers by model key. `take` hands the most recently used one of a key out;
    `put` keeps one (evicting the least recently used while over `budget_bytes` or
    `max_workers`); `evict_one` frees one of another key; `expire` lets go of those idle
    longer than `idle_seconds`. Thread-safe: job coordinators run in threads."""

    def __init__(self, max_workers: int, budget_bytes: int, idle_seconds: float,
                 kill: Callable[[Any], None] = lambda handle: handle.kill()) -> None:
        self.max_workers, self.budget_bytes, self.idle_seconds = max_workers, budget_bytes, idle_seconds
        self.kill = kill
        self.idle: list[_Idle] = []  # least recently used first
        self.lock = threading.Lock()

    def take(self, key: tuple, near: Callable[[tuple], bool] | None = None) -> Any | None:
        """The most recently used idle worker of `key`; else, with `near`, the most recently
        used one whose key `near` accepts (it loads the job's model in its own process)."""
        with self.lock:
            for wanted in (lambda k: k == key, near):
                if wanted is None:
                    continue
                for i in range(len(self.idle) - 1, -1, -1):
                    if wanted(self.idle[i].key):
                        return self.idle.pop(i).handle
        return None

    def put(self, handle: Any, key: tuple, nbytes: int) -> None:
        if self.max_workers <= 0 or nbytes > self.budget_bytes:
            self._let_go([handle], "the warm pool is off or the model is larger than its budget")
            return
        with self.lock:
            self.idle.append(_Idle(handle, key, nbytes, time.monotonic()))
            out = []
            while len(self.idle) > self.max_workers or sum(i.nbytes for i in self.idle) > self.budget_bytes:
                out.append(self.idle.pop(0).handle)
        self._let_go(out, "over the warm pool's budget")

    def evict_one(self, keep: tuple, any_key: bool = False) -> bool:
        """Let go of the least recently used idle worker of another key (its resources are
        wanted by a worker of `keep`), or with `any_key` of `keep` itself when there is no
        other (a worker already waiting for resources cannot use an idle one's); False when
        there is none."""
        with self.lock:
            others = [i for i, item in enumerate(self.idle) if item.key != keep]
            if not others and not (any_key and self.idle):
                return False
            handle = self.idle.pop(others[0] if others else 0).handle
        self._let_go([handle], "its resources are wanted by a worker waiting for them")
        return True

    def expire(self) -> None:
        cutoff = time.monotonic() - self.idle_seconds
        with self.lock:
            old = [i.handle for i in self.idle if i.since < cutoff]
            self.idle = [i for i in self.idle if i.since >= cutoff]
        self._let_go(old, "idle too long")

    def clear(self) -> None:
        with self.lock:
            out, self.idle = [i.handle for i in self.idle], []
        self._let_go(out, "the executor stops")

    def handles(self) -> list[Any]:
        with self.lock:
            return [i.handle for i in self.idle]

    def __len__(self) -> int:
        with self.lock:
            return len(self.idle)

    def _let_go(self, handles: list[Any], why: str) -> None:
        for handle in handles:
            log.info("a warm worker is let go: %s", why)
            try:
                self.kill(handle)
            except Exception:  # already gone
                log.warning("could not kill a warm worker", exc_info=True)
