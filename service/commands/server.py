"""`lctx serve` starts the API; `lctx submit | status | results | checkpoints add|list`
talk to it (base URL and token from settings: LCTX_BASE_URL, LCTX_API_TOKEN)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from checkpoints.attention.backend import Backend
from service.client import ApiError, Client
from service.settings import get_settings

LIST_OPTIONS = ("lengths", "datasets", "depths")
FINAL = ("succeeded", "failed", "cancelled")


def parse_task(text: str) -> dict[str, Any]:
    """`passkey:lengths=256,512:trials=10` -> {"name": "passkey", "lengths": [256, 512], "trials": 10}."""
    name, *options = text.split(":")
    if not name:
        raise ValueError(f"--task {text!r}: give a task name first, e.g. passkey:lengths=256,512")
    task: dict[str, Any] = {"name": name}
    for option in options:
        key, sep, raw = option.partition("=")
        if not sep or not key:
            raise ValueError(f"--task {text!r}: option {option!r} must look like key=value")
        values = [_scalar(v) for v in raw.split(",")]
        task[key] = values if key in LIST_OPTIONS or len(values) > 1 else values[0]
    return task


def _scalar(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _print_job(job: Any) -> None:
    progress = ", ".join(f"{k} {p.done}/{p.total}" for k, p in job.progress.items()) or "-"
    print(f"{job.id}  {job.status:<9}  {job.checkpoint}  tasks: {', '.join(t['name'] for t in job.tasks)}"
          f"  progress: {progress}" + (f"\n  error: {job.error}" if job.error else ""))


def example_checkpoint(root: Path) -> Path:
    """A checkpoint for the example requests: the first one in the root, or on a fresh
    install a tiny random-weight model written there (scores near zero; it shows the
    flow end to end until you add your own)."""
    found = sorted(p for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []
    if found:
        return found[0]
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


def _install_demos(settings: Any) -> list[Any]:
    """Copy and register the committed demo checkpoints before the API starts."""
    from service.demo import install_demo_checkpoints
    from service.store import Store

    store = Store(settings.database)
    try:
        store.create_all()
        return install_demo_checkpoints(store, settings.roots[0])
    finally:
        store.close()


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app

    settings = get_settings()
    settings = settings.model_copy(update={"host": args.host or settings.host, "port": args.port or settings.port})
    settings.prepare()
    url = f"http://{settings.host}:{settings.port}"
    auth = " -H \"Authorization: Bearer $LCTX_API_TOKEN\"" if settings.token else ""
    demos = _install_demos(settings) if settings.demo_checkpoints else []
    demo = example_checkpoint(settings.roots[0])
    print(f"lctx API on {url}  (docs {url}/docs; database {settings.database}; results {settings.results};"
          f" checkpoint roots {', '.join(map(str, settings.roots))}). Ready when {url}/readyz answers 200.")
    if demos:
        names = [d.name for d in demos if not d.action.startswith("skipped")]
        print(f"registered demo checkpoints: {', '.join(names)} (trained passkey models, 256-token context);"
              " compare them at 1x, 2x and 4x their training length:\n"
              f"  .venv/bin/lctx submit {names[0]} --task passkey:lengths=256,512,1024:trials=20 --wait"
              if names else "demo checkpoints: none registered (see the warnings above)")
    print("try:\n"
          f"  curl -s{auth} -X POST {url}/v1/checkpoints -H 'Content-Type: application/json' "
          f"-d '{{\"name\": \"{demo.name}\", \"path\": \"{demo}\"}}'\n"
          f"  curl -s{auth} -X POST {url}/v1/jobs -H 'Content-Type: application/json' "
          f"-d '{{\"checkpoint\": \"{demo.name}\", \"tasks\": [{{\"name\": \"passkey\", \"lengths\": [256, 512], "
          "\"trials\": 5}]}'\n"
          f"  curl -s {url}/v1/jobs/JOB_ID", flush=True)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=args.log_level)
    return 0


def _client(args: argparse.Namespace) -> Client:
    return Client(base_url=args.url, token=args.token)


def _submit(args: argparse.Namespace) -> int:
    if args.file:
        body = json.loads(Path(args.file).read_text())
    else:
        if not args.task:
            raise ValueError("give at least one --task (e.g. --task passkey:lengths=256,512:trials=10) or --file")
        body = {"checkpoint": args.checkpoint, "tasks": [parse_task(t) for t in args.task],
                "rope": args.rope, "backend": args.backend, "priority": args.priority}
    with _client(args) as c:
        job = c.submit(**body)
        print(job.id if args.quiet else f"submitted job {job.id}")
        while args.wait and job.status not in FINAL:
            time.sleep(1.0)
            job = c.job(job.id)
        if args.wait:
            _print_job(job)
            return 0 if job.status == "succeeded" else 1
    return 0


def _status(args: argparse.Namespace) -> int:
    with _client(args) as c:
        if args.job:
            job = c.job(args.job)
            print(job.model_dump_json(indent=2)) if args.json else _print_job(job)
            return 0
        jobs = c.jobs(status=args.status, checkpoint=args.checkpoint, task=args.filter_task, limit=args.limit)
        if args.json:
            print(jobs.model_dump_json(indent=2))
        for job in [] if args.json else jobs.items:
            _print_job(job)
    return 0


def _results(args: argparse.Namespace) -> int:
    with _client(args) as c:
        if args.samples:
            for line in c.samples(args.job):
                print(line)
        else:
            print(json.dumps(c.results(args.job), indent=2))
    return 0


def _checkpoints_add(args: argparse.Namespace) -> int:
    with _client(args) as c:
        ck = c.add_checkpoint(args.name, args.path)
        print(f"{ck.name}  {ck.path}  {ck.variant}  {ck.parameters:,} parameters  fingerprint {ck.fingerprint[:16]}")
    return 0


def _checkpoints_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        for ck in c.checkpoints():
            print(f"{ck.name}  {ck.path}  {ck.variant}  {ck.parameters:,} parameters  fingerprint {ck.fingerprint[:16]}")
    return 0


def _guard(func: Any) -> Any:
    """API errors are a message and exit status 1, not a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except ApiError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1

    return run


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="API base URL (default LCTX_BASE_URL or http://LCTX_HOST:LCTX_PORT)")
    p.add_argument("--token", help="bearer token (default LCTX_API_TOKEN)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start the API (SQLite, results and checkpoints under ./var by default)")
    p.add_argument("--host", help="bind address (default LCTX_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default LCTX_PORT or 8000)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=_serve)

    p = sub.add_parser("submit", help="submit an evaluation job to the API")
    p.add_argument("checkpoint", nargs="?", help="registered checkpoint name or path inside the checkpoint roots")
    p.add_argument("--task", action="append",
                   help="task and options, repeatable: passkey:lengths=256,512:trials=10, longbench:datasets=qasper")
    p.add_argument("--file", help="JSON body of POST /v1/jobs instead of the options")
    p.add_argument("--rope", help="RoPE override, e.g. yarn:4")
    p.add_argument("--backend", default="auto", choices=[b.value for b in Backend])
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--wait", action="store_true", help="poll until the job ends; exit 0 only if it succeeded")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the job id")
    _client_args(p)
    p.set_defaults(func=_guard(_submit))

    p = sub.add_parser("status", help="one job, or the list of jobs")
    p.add_argument("job", nargs="?")
    p.add_argument("--status", choices=["queued", "running", "succeeded", "failed", "cancelled"])
    p.add_argument("--checkpoint")
    p.add_argument("--task", dest="filter_task")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true")
    _client_args(p)
    p.set_defaults(func=_guard(_status))

    p = sub.add_parser("results", help="results JSON of a job (or its samples)")
    p.add_argument("job")
    p.add_argument("--samples", action="store_true", help="per-sample records, one JSON per line")
    _client_args(p)
    p.set_defaults(func=_guard(_results))

    p = sub.add_parser("checkpoints", help="register and list checkpoints")
    csub = p.add_subparsers(dest="checkpoints_command", required=True, metavar="ACTION")
    a = csub.add_parser("add", help="register a checkpoint directory under a name")
    a.add_argument("name")
    a.add_argument("path")
    _client_args(a)
    a.set_defaults(func=_guard(_checkpoints_add))
    ls = csub.add_parser("list", help="registered checkpoints")
    _client_args(ls)
    ls.set_defaults(func=_guard(_checkpoints_list))
