"""What a worker is given: its node's settings (`WorkerConfig`) when it starts, and for each
job a `JobSpec` (the job's tasks, the checkpoint or served model, its judges, the tasks an
earlier attempt finished) built by the coordinator from the store. Plain frozen data sent
through Ray: a worker reads no database and no results folder, and these carry no database
URL, no token and no results path. Inputs (checkpoint weights, benchmark data files) are read
by the worker at the paths given here: on a cluster they live on storage every node mounts at
the same path, as the checkpoint roots do."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from checkpoints.engine_options import EngineOptions
from clients.endpoint.options import EndpointSpec


@dataclass(frozen=True)
class WorkerConfig:
    """A worker's settings, taken from the service's `Settings` (`service.runner.coordinator.
    worker_config`): the device and the engine's options, where inputs are read from and may be read
    from (the checkpoint roots, checked again before loading), and the home whose `triton/` and
    `judgments/` caches the worker keeps when its node sets no LCTX_HOME of its own."""

    device: str
    roots: tuple[Path, ...]
    data_dir: Path | None
    endpoint_hosts: tuple[str, ...]
    home: Path
    triton_cache: Path | None = None  # LCTX_TRITON_CACHE_DIR where set; else <node home>/triton
    engine: EngineOptions = EngineOptions()

    def node_home(self) -> Path:
        """This node's home for caches: its own LCTX_HOME (a worker node of a cluster), else the
        service's (one machine); created if missing."""
        home = Path(os.environ.get("LCTX_HOME") or self.home).absolute()
        home.mkdir(parents=True, exist_ok=True)
        return home


@dataclass(frozen=True)
class JudgeSpec:
    """A judge a job's task names (`ref`, `name@identity`), resolved from its registration by
    the coordinator: a served model (its spec, the allow-listed key variable's name only) or a
    checkpoint folder the worker loads and fingerprints again before judging."""

    ref: str
    kind: Literal["endpoint", "checkpoint"]
    name: str
    endpoint: EndpointSpec | None = None
    path: str | None = None
    described: dict[str, Any] = field(default_factory=dict)  # how results name the judge


@dataclass(frozen=True)
class JobSpec:
    """One job as its workers need it."""

    id: str
    attempt: int
    tasks: list[dict[str, Any]]
    checkpoint: dict[str, Any] | None  # name, path, fingerprint; None for a served model
    rope: Any
    backend: str
    endpoint: EndpointSpec | None = None
    source: dict[str, Any] = field(default_factory=dict)  # how results name the model (checkpoint or endpoint)
    judges: dict[str, JudgeSpec] = field(default_factory=dict)
    finished: frozenset[str] = frozenset()  # task keys an earlier attempt finished (nothing to draw for them)
