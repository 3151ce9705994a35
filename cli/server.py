"""`lctx serve`: the API, after the database is upgraded and the demo checkpoints are
installed. Everything it runs is imported when it runs: the service, uvicorn, torch."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def _usable(path: Path) -> bool:
    from checkpoints.errors import CheckpointError
    from checkpoints.fingerprint import inspect_checkpoint

    try:
        inspect_checkpoint(path)
        return True
    except (CheckpointError, OSError):
        return False


def example_checkpoint(root: Path) -> Path:
    """A checkpoint for the example requests: the first usable one in the root (config,
    complete weights, tokenizer), or on a fresh install a tiny random-weight model
    written there (scores near zero; it shows the flow end to end until you add yours)."""
    found = sorted(p for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []
    for path in found:
        if _usable(path):
            return path
    from checkpoints.config import ModelConfig
    from checkpoints.loading import save_model
    from checkpoints.model import Decoder
    from checkpoints.tokenizer import ByteTokenizer

    model = Decoder(ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                                intermediate_size=128, vocab_size=259))
    try:
        return save_model(model, root / "demo-random", ByteTokenizer())
    except OSError:  # a read-only root: the printed examples name a folder for the user to fill
        return root / "my-checkpoint"


def _upgrade_database(settings: Any) -> None:
    """Migrate the store to this code's schema (the app's start-up does it again, at no cost); an
    upgrade's data migrations run once the API answers, which says how far they are (/healthz)."""
    from service.store import Store

    store = Store(settings.database)
    try:
        store.upgrade()
    finally:
        store.close()


def _install_demos(settings: Any) -> list[Any]:
    """Copy and register the committed demo checkpoints before the API starts."""
    from service.demo import install_demo_checkpoints
    from service.store import Store

    store = Store(settings.database)
    try:
        return install_demo_checkpoints(store, settings.roots[0])
    finally:
        store.close()


def _claim_replica(settings: Any) -> None:
    """Refuse to start when a live server holds this replica id (its jobs would be requeued)."""
    from service.core.replicas import register
    from service.store import Store

    store = Store(settings.database)
    try:
        register(store, settings)
    finally:
        store.close()


# The settings a user commonly sets on the command line (flag -> the LCTX_ variable it sets). Secrets
# (the token, a database URL with its password) stay in the environment: a command line is visible to
# every user of the machine in `ps`.
SETTING_FLAGS: dict[str, str] = {
    "home": "LCTX_HOME",
    "data_dir": "LCTX_DATA_DIR",
    "checkpoint_root": "LCTX_CHECKPOINT_ROOTS",
    "results_dir": "LCTX_RESULTS_DIR",
    "max_job_seconds": "LCTX_MAX_JOB_SECONDS",
    "max_running_jobs": "LCTX_MAX_RUNNING_JOBS",
    "retention_days": "LCTX_RETENTION_DAYS",
    "retention_keep": "LCTX_RETENTION_KEEP",
}
# each flag's declaration, once for every command that takes it (`lctx serve`, `lctx backup`, ...)
_FLAG_ARGUMENTS: dict[str, dict[str, Any]] = {
    "home": {"help": "root of the embedded defaults: database, results, checkpoints (sets LCTX_HOME; default ./var)"},
    "data_dir": {"help": "local benchmark files the jobs' data-backed tasks read (sets LCTX_DATA_DIR; none by "
                 "default: such jobs are refused, naming the files)"},
    "checkpoint_root": {"action": "append", "metavar": "DIR", "help": "a folder checkpoints may lie in; repeat for "
                        "several (sets LCTX_CHECKPOINT_ROOTS; default <home>/checkpoints)"},
    "results_dir": {"help": "where results/<job>/ are written (sets LCTX_RESULTS_DIR; default <home>/results)"},
    "max_job_seconds": {"type": float, "help": "refuse jobs estimated to take longer (sets LCTX_MAX_JOB_SECONDS; "
                        "default no cap)"},
    "max_running_jobs": {"type": int, "help": "jobs run at once (sets LCTX_MAX_RUNNING_JOBS)"},
    "retention_days": {"type": float, "help": "prune jobs finished more than this many days ago "
                       "(sets LCTX_RETENTION_DAYS)"},
    "retention_keep": {"type": int, "help": "keep the newest N jobs of each lineage whatever their age "
                       "(sets LCTX_RETENTION_KEEP)"},
}


def add_setting_flags(p: argparse.ArgumentParser, *names: str) -> None:
    """Declare the setting flags `names` (SETTING_FLAGS' keys) on a command; `apply_setting_flags`
    then puts those given into the environment."""
    for name in names:
        p.add_argument("--" + name.replace("_", "-"), **_FLAG_ARGUMENTS[name])


def apply_setting_flags(args: argparse.Namespace, environ: dict[str, str] | None = None) -> None:
    """Put the flags given into the environment as their LCTX_ variables, before any settings are
    read: the dispatcher and its workers are other processes and read the same environment."""
    environ = os.environ if environ is None else environ
    for attribute, variable in SETTING_FLAGS.items():
        value = getattr(args, attribute, None)
        if value is None:
            continue
        environ[variable] = ",".join(value) if isinstance(value, list) else str(value)


def _serve(args: argparse.Namespace) -> int:
    from service.core.serverlock import ServerLock
    from service.core.settings import get_settings

    apply_setting_flags(args)
    settings = get_settings()
    settings = settings.model_copy(update={"host": args.host or settings.host, "port": args.port or settings.port})
    settings.prepare()
    lock = ServerLock(settings)
    lock.acquire()  # before anything touches the database: a second server on this home stops here
    try:
        return _run(args, settings)
    finally:
        lock.release()


def _run(args: argparse.Namespace, settings: Any) -> int:
    import uvicorn

    sys.stdout.reconfigure(line_buffering=True)  # what to do next, printed as it is known (a log file, a pipe)

    from service.app import create_app
    from service.core.redact import install_log_redaction, redact

    install_log_redaction(settings.secrets)
    url = f"http://{settings.host}:{settings.port}"
    auth = " -H \"Authorization: Bearer $LCTX_API_TOKEN\"" if settings.token else ""
    _upgrade_database(settings)  # a database newer than this code stops here, before the API starts
    if settings.executor:
        _claim_replica(settings)  # before the dispatcher requeues "its" running jobs
    demos = _install_demos(settings) if settings.demo_checkpoints else []
    registered = [d.name for d in demos if not d.action.startswith("skipped")]
    demo = None if registered else example_checkpoint(settings.roots[0])
    print(f"lctx API on {url}  (docs {url}/docs; database {redact(settings.database)}; results {settings.results};"
          f" checkpoint roots {', '.join(map(str, settings.roots))}). Ready when {url}/readyz answers 200.")
    from service.core.settings import get_settings

    cli_url = get_settings().url  # where `lctx submit` and the other client commands of this environment look
    if cli_url != url:  # `make serve PORT=8124`: the client commands would look at the default address
        print(f"the lctx client commands look at {cli_url} unless told: in another shell, "
              f"export LCTX_BASE_URL={url}")
    from cli.client_commands import task_flag
    from training.train import DEMO_TASK  # the task the demo checkpoints were trained for

    if demos:
        print(f"registered demo checkpoints: {', '.join(registered)} (trained {DEMO_TASK['name']} models, 256-token "
              "context); compare them at 1x, 2x and 4x their training length:\n"
              f"  .venv/bin/lctx submit {registered[0]} --task {task_flag(DEMO_TASK)} --wait"
              if registered else "demo checkpoints: none registered (see the warnings above)")
    register = ""
    if demo is not None:  # nothing registered yet: register the example first (a path relative to the root)
        name = demo.name
        register = (f"  curl -s{auth} -X POST {url}/v1/checkpoints -H 'Content-Type: application/json' "
                    f"-d '{{\"name\": \"{name}\", \"path\": \"{demo.relative_to(settings.roots[0]).as_posix()}\"}}'\n")
    else:
        name = registered[0]
    print("try:\n" + register +
          f"  curl -s{auth} -X POST {url}/v1/jobs -H 'Content-Type: application/json' "
          f"-d '{json.dumps({'checkpoint': name, 'tasks': [{**DEMO_TASK, 'lengths': [256, 512], 'trials': 5}]})}'\n"
          f"  curl -s {url}/v1/jobs/JOB_ID", flush=True)
    if settings.demo_real_model:
        from service.demo import install_real_model

        install_real_model(settings, announce=lambda line: print(line, flush=True))
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=args.log_level)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start the API (SQLite, results and checkpoints under ./var by default)")
    p.add_argument("--host", help="bind address (default LCTX_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default LCTX_PORT or 8000)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (default info)")
    add_setting_flags(p, "home", "data_dir", "checkpoint_root", "results_dir", "max_job_seconds", "max_running_jobs")
    p.set_defaults(func=_serve)

