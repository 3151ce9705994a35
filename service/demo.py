"""The committed demo checkpoints (`demo/checkpoints/`, trained by `lctx train`), copied
into the first checkpoint root and registered at start-up, so a newcomer's first
`make serve` can run a passkey job on real, trained models right away.

Copies are marked with a `.lctx-demo` file: only marked folders are refreshed when the
repository's demo weights change, so a user's own folder that happens to be called
`demo-<variant>` is never overwritten."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from checkpoints.train import demo_checkpoints
from service.errors import Conflict
from service.store import Store
from service.submission import checkpoint_info

log = logging.getLogger("lctx.demo")

MARKER = ".lctx-demo"
# what a checkpoint folder needs to load; the training log travels along for the curious
FILES = ("config.json", "model.safetensors", "lctx_tokenizer.json", "train_info.json", "train_log.jsonl")


@dataclass(frozen=True)
class DemoCheckpoint:
    name: str
    path: Path
    variant: str
    action: str  # copied | refreshed | kept | skipped: <why>


def _install_copy(source: Path, target: Path, fingerprint: str) -> str:
    """Copy `source` (whose fingerprint is given) to `target` unless an identical marked
    copy is there; returns the action."""
    if target.exists() and not (target / MARKER).is_file():
        return f"skipped: {target} exists and is not an lctx demo copy"
    if target.exists():
        if checkpoint_info(target, [target.parent]).fingerprint == fingerprint:
            return "kept"
        shutil.rmtree(target)
        action = "refreshed"
    else:
        action = "copied"
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, tmp / name)
    (tmp / MARKER).write_text(f"copied by lctx serve from {source}\n")
    tmp.rename(target)  # the folder appears whole or not at all
    return action


def install_demo_checkpoints(store: Store, root: Path, source: Path | None = None) -> list[DemoCheckpoint]:
    """Copy each demo checkpoint into `root/demo-<variant>` and register it under that
    name. Idempotent; a name already registered for another path is left alone."""
    installed = []
    for name, src in demo_checkpoints(source).items():
        target = root / name
        info = checkpoint_info(src, [src.parent])  # the copy holds the same bytes: same fingerprint
        try:
            action = _install_copy(src, target, info.fingerprint)
        except OSError as e:  # a read-only checkpoint volume (docker-compose mounts it so)
            action = f"skipped: cannot copy into {root} ({e.strerror or e}); set LCTX_DEMO_CHECKPOINTS=false"
        if not action.startswith("skipped"):
            try:
                store.add_checkpoint(name, str(target.absolute()), info.fingerprint, info.variant, info.parameters)
            except Conflict as e:
                action = f"skipped: {e.message}"
        if action.startswith("skipped"):
            log.warning("demo checkpoint %s %s", name, action)
        installed.append(DemoCheckpoint(name, target, info.variant, action))
    return installed
