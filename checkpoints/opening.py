"""A checkpoint opened to run requests: the one way `lctx eval`, the service's worker and a
checkpoint judge open a model. The tokenizer first (what needs only it, drawing a task's
samples, starts on it while the weights load: `with_tokenizer`), then the weights, the
engine with its options (`checkpoints.engine_options`), and the kernels compiled, each
timed. `CheckpointTarget` is a checkpoint judge before it is opened (the fingerprint read
first, then `open_model`): what `evaluators.judges.open_judge` opens, as it opens a served
judge's `clients.endpoint.engine.EndpointTarget`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from checkpoints.config_reader import load_config
from checkpoints.engine import Engine
from checkpoints.engine.warmup import warm_up
from checkpoints.engine_options import EngineOptions
from checkpoints.fingerprint import inspect_checkpoint
from checkpoints.loading import LoadedModel, load_model
from checkpoints.model import Decoder
from checkpoints.tokenizer import Tokenizer, load_tokenizer


@dataclass
class Opened:
    """A loaded model, its engine, and the seconds opening took (`load_s`, `warm_up_s`)."""

    loaded: LoadedModel
    engine: Engine
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def source(self) -> LoadedModel:
        return self.loaded

    @property
    def behaviour(self) -> str:
        """"": a checkpoint's answers depend on its weights only (its identity)."""
        return ""

    @property
    def notes(self) -> dict[str, Any]:
        """Nothing to add to how results describe a checkpoint judge."""
        return {}


def open_model(path: str | Path, options: EngineOptions | None = None, *, rope: Any = None, backend: str = "auto",
               dtype: str | None = None, device: str = "cpu",
               with_tokenizer: Callable[[Tokenizer], None] | None = None, weights: Decoder | None = None) -> Opened:
    """The checkpoint at `path` loaded (RoPE override, attention backend, dtype, device), its
    engine made with `options` (default: the engine's defaults) and its kernels compiled;
    `with_tokenizer(tokenizer)` runs once the tokenizer is read, before the weights load;
    `weights`: a model of this folder already held (`load_model`: its tensors are taken)."""
    tokenizer = load_tokenizer(path, load_config(path))
    if with_tokenizer is not None:
        with_tokenizer(tokenizer)
    started = time.perf_counter()
    loaded = load_model(path, rope=rope, backend=backend, dtype=dtype, device=device, tokenizer=tokenizer,
                        weights=weights)
    seconds = {"load_s": time.perf_counter() - started}
    engine = (options or EngineOptions()).engine(loaded)
    seconds["warm_up_s"] = warm_up(loaded.model)  # Triton's kernels compiled (or read from its cache) here
    return Opened(loaded, engine, seconds)


@dataclass(frozen=True)
class CheckpointTarget:
    """A checkpoint folder a judge runs from, not opened yet: its identity (the weights'
    fingerprint) is read before the weights load, so a judge that is no longer the model a
    job names is refused without loading it."""

    path: Path
    device: str = "cpu"
    options: EngineOptions | None = None
    kind: Literal["checkpoint"] = "checkpoint"

    def identity(self) -> str:
        return inspect_checkpoint(self.path).fingerprint

    def open(self) -> Opened:
        return open_model(self.path, self.options, device=self.device)
