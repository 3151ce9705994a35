"""`lctx submit | status | cancel | resume | results | leaderboard | compare | regressions | pull | checkpoints add|list | schedules list|run | endpoints`: talk to the API (base URL and
token from settings: LCTX_BASE_URL, LCTX_API_TOKEN). These import the HTTP client and
the API's pydantic models only: no torch, no Ray, no database."""

from __future__ import annotations

import argparse
import json
import sys
import time
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from checkpoints.attention.backend import Backend
from cli.endpoint_flags import PROBE, add_endpoint_flags, endpoint_fields
from cli.evaluate import print_table, summary_rows
from evaluators.progress import duration, tokens_text
from service.core.status import FINAL, JobStatus

if TYPE_CHECKING:
    from service.client import ServiceClient


# How a task and its options are spelled on the command line (`parse_task` reads it, `task_flag` writes it).
TASK_EXAMPLE = "TASK:lengths=256,512:trials=10"
# `submit --wait` asks for the job's status after WAIT_FIRST_POLL_S, doubling the wait up to WAIT_POLL_S.
WAIT_FIRST_POLL_S, WAIT_POLL_S = 0.1, 1.0


def parse_task(text: str) -> dict[str, Any]:
    """`NAME:lengths=256,512:trials=10` -> {"name": "NAME", "lengths": [256, 512], "trials": 10}.
    Options the task's option model declares as lists are lists even with one value; the
    server validates the rest (an unknown task or option is its 422)."""
    from cli.task_options import option_kind  # here: `lctx --help` imports no task
    from evaluators.registry import task_options

    name, *options = text.split(":")
    if not name:
        raise ValueError(f"--task {text!r}: give a task name first, e.g. {TASK_EXAMPLE}")
    task: dict[str, Any] = {"name": name}
    model = task_options().get(name)
    for option in options:
        key, sep, raw = option.partition("=")
        if not sep or not key:
            raise ValueError(f"--task {text!r}: option {option!r} must look like key=value")
        values = [_scalar(v) for v in raw.split(",")]
        listed = model is not None and key in model.model_fields and option_kind(model, key) == "list"
        task[key] = values if listed or len(values) > 1 else values[0]
    return task


def task_flag(task: dict[str, Any]) -> str:
    """A task spec as `--task` spells it (what `parse_task` reads back)."""
    spelled = [",".join(map(str, v)) if isinstance(v, list) else str(v) for v in task.values()]
    return ":".join([spelled[0], *(f"{k}={v}" for k, v in list(zip(task, spelled, strict=True))[1:])])


JSON_HELP = "print the API's JSON answer instead of a table"
TABLE_WIDTH = 120  # columns `lctx leaderboard` fits by default (`--wide`: every column)


def suite_flags() -> list[str]:
    """The fields of a schedule's suite besides its tasks (service.schemas.Suite): the same flags as
    `lctx submit`'s."""
    from service.schemas import Suite  # pydantic only; imported when the parser is built

    return [name for name in Suite.model_fields if name != "tasks"]


def job_flags() -> dict[str, tuple[Callable[[str], Any], list[Any] | None, str]]:
    """`lctx submit`'s flags for the request's fields besides the checkpoint and tasks:
    name -> (parser, choices, help), read from `JobCreate` (a field added there gets a flag)."""
    from service.schemas import JobCreate  # pydantic only; imported when the parser is built

    out: dict[str, tuple[Callable[[str], Any], list[Any] | None, str]] = {}
    for name, field in JobCreate.model_fields.items():
        if name in ("checkpoint", "tasks"):
            continue
        literal = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is Literal else None
        kind: Callable[[str], Any] = int if field.annotation is int else str if literal else _scalar
        default = "" if field.default is None else f" (default {field.default})"
        out[name] = (kind, list(literal) if literal else None, f"{field.description or name}{default}")
    return out


def _scalar(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _print_job(job: Any) -> None:
    progress = progress_line(job).split(": ", 1)[1]
    print(f"{job.id}  {job.status:<9}  {job.checkpoint}  rope: {job.rope_label}  "
          f"tasks: {', '.join(t['name'] for t in job.tasks)}"
          f"  progress: {progress}" + (f"\n  error: {job.error}" if job.error else ""))


def duration_text(seconds: float) -> str:
    return duration(seconds)


def progress_line(job: Any) -> str:
    """A job's progress on one line: per task samples, tokens prefilled, speed; the job's ETA."""
    parts, eta, known = [], 0.0, True
    for key, p in job.progress.items():
        prefill = tokens_text(p.done, p.total, p.tokens, p.planned_tokens, p.tokens_per_s)
        parts.append(f"{key} {p.done}/{p.total}" + (f", {prefill}" if prefill else ""))
        if p.done < p.total:
            if p.eta_s is None:
                known = False
            else:
                eta += p.eta_s
    known = known and (eta > 0 or all(p.done >= p.total for p in job.progress.values()))
    left = "" if job.status != JobStatus.RUNNING else (f"; ETA {duration_text(max(eta, 1.0))}" if known
                                                        else "; ETA: measuring")
    return f"{job.status}: " + ("; ".join(parts) or "-") + left


def plan_lines(plan: Any) -> list[str]:
    """A job's plan as `lctx submit` prints it: per task samples and tokens, the estimate and its
    basis, the warnings."""
    def count(value: int | None) -> str:
        return "?" if value is None else f"{value:,}"

    lines = [f"  {t.task}: {count(t.samples)} samples, {count(t.prompt_tokens)} tokens to prefill, "
             f"{count(t.generated_tokens)} to generate"
             + (f", about {duration_text(t.seconds)}" if t.seconds is not None else "")
             + (f"\n    {t.resolution}" if getattr(t, "resolution", "") else "") for t in plan.tasks]
    estimate = f"about {duration_text(plan.seconds)}" if plan.seconds is not None else "not known"
    head = "plan (dry run, nothing queued)" if not plan.queued else "plan"
    return [f"{head}: {plan.samples:,} samples, {plan.prompt_tokens:,} tokens to prefill, "
            f"{plan.generated_tokens:,} to generate; {estimate} ({plan.basis})", *lines,
            *(f"warning: {w}" for w in plan.warnings)]


def _client(args: argparse.Namespace) -> ServiceClient:
    from service.client import ServiceClient  # httpx and the API models: only for the command that talks

    return ServiceClient(base_url=args.url, token=args.token)


def _submit(args: argparse.Namespace) -> int:
    if args.file:
        body = json.loads(Path(args.file).read_text())
    else:
        if not args.task:
            raise ValueError(f"give at least one --task (e.g. --task {TASK_EXAMPLE}) or --file")
        body = {"checkpoint": args.checkpoint, "tasks": [parse_task(t) for t in args.task],
                **{name: getattr(args, name) for name in job_flags() if getattr(args, name) is not None}}
    with _client(args) as c:
        if args.dry_run:
            for line in plan_lines(c.plan(**body)):
                print(line)
            return 0
        job = c.submit(**body)
        print(job.id if args.quiet else f"submitted job {job.id}", flush=True)
        for warning in job.warnings:  # accepted, but its data is not what the benchmark's reports ran on
            print(f"warning: {warning}", file=sys.stderr, flush=True)
        if job.plan is not None and not args.quiet:  # on stderr: stdout keeps the job id and the scores
            print("\n".join(plan_lines(job.plan)), file=sys.stderr, flush=True)
        shown, delay = "", WAIT_FIRST_POLL_S
        while args.wait and job.status not in FINAL:
            time.sleep(delay)
            delay = min(WAIT_POLL_S, delay * 2)  # a small job ends within a second: no whole second lost on it
            job = c.job(job.id)
            line = progress_line(job)
            if line != shown and not args.quiet:  # on stderr: stdout keeps the job id and the scores
                print(line, file=sys.stderr, flush=True)
                shown = line
        if args.wait:
            _print_job(job)
            if job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
                _print_scores(c.results(job.id))
            return 0 if job.status == JobStatus.SUCCEEDED else 1
    return 0


def _print_scores(results: dict[str, Any]) -> None:
    """The score table of a finished job (what finished, for a failed one)."""
    rows = []
    for key, entry in (results.get("results") or {}).items():
        if isinstance(entry, dict) and "result" in entry:
            rows += summary_rows(key + (" (partial)" if entry.get("partial") else ""), entry)
    if rows:
        print()
        print_table(rows)


def _table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    for line in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip())


def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def fitting_columns(board: dict[str, Any], width: int) -> list[str]:
    """The columns a `width`-character table has room for: the headline, then the other metrics and
    the per-length points, then the rest (a depth decile's points, say) while they fit, in the
    board's order. Each column takes its name's width or a value's (7), plus the two-space gap."""
    cols: list[str] = board["columns"]
    headline = board.get("headline")

    def rank(c: str) -> int:
        return 0 if c == headline else 1 if (".length=" in c or "." not in c) else 2

    def name_width(key: str) -> int:
        return max([len(key), *(len(str(r.get(key, ""))) for r in board["rows"])])

    used = name_width("checkpoint") + 2 + name_width("setting")
    chosen: set[str] = set()
    for c in sorted(cols, key=rank):  # stable: the board's order within a rank
        need = 2 + max(len(column_header(c, headline)), 7)
        if used + need > width and chosen:
            break
        chosen.add(c)
        used += need
    return [c for c in cols if c in chosen]


def column_header(column: str, headline: str | None) -> str:
    """A column's name in a table: the headline metric's points without its name (`length=512` for
    `accuracy.length=512` when accuracy is the headline), the rest as they are."""
    return column.removeprefix(f"{headline}.") if headline else column


def _leaderboard(args: argparse.Namespace) -> int:
    with _client(args) as c:
        board = c.leaderboard(args.task, checkpoint=args.checkpoint, rope=args.rope, backend=args.backend,
                              thinking=args.thinking, checkpoint_prefix=args.prefix, lineage=args.lineage,
                              per=args.per, sort=args.sort, limit=args.limit, offset=args.offset)
    if args.json:
        print(json.dumps(board, indent=2))
        return 0
    if not board["rows"]:
        print(f"no succeeded jobs with results for {args.task}")
        return 0
    cols = board["columns"]

    def cell(row: dict[str, Any], column: str) -> str:
        length = column.rpartition(".length=")[2]
        beyond = ".length=" in column and length.isdigit() and int(length) in row.get("beyond_context", [])
        return _number(row["values"][column]) + (" †" if beyond else "")

    shown_cols = cols if args.wide else fitting_columns(board, TABLE_WIDTH)
    _table(["checkpoint", "setting", *(column_header(c, board.get("headline")) for c in shown_cols)], [[r["checkpoint"], r["setting"], *(cell(r, k) for k in shown_cols)]
                                                    for r in board["rows"]])
    if len(shown_cols) < len(cols):
        print(f"{len(cols) - len(shown_cols)} more columns ({', '.join(c for c in cols if c not in shown_cols)[:80]}"
              "...): --wide shows them, --json gives every value")
    if any(r.get("beyond_context") for r in board["rows"]):
        print("† beyond the model's context (trained, or reached by its RoPE scaling): extrapolation")
    shown = board.get("offset", 0) + len(board["rows"])
    if board.get("total", 0) > shown:
        print(f"rows {board.get('offset', 0) + 1}-{shown} of {board['total']}: --offset {shown} for the next page")
    return 0


def _compare(args: argparse.Namespace) -> int:
    with _client(args) as c:
        comparison = c.compare(args.task, args.jobs)
    if args.json:
        print(json.dumps(comparison, indent=2))
        return 0
    cols = comparison["columns"]
    header = ["job", "checkpoint", "setting", *cols]
    rows, notes = [], []

    def value(r: dict[str, Any], k: str) -> str:
        error = (r.get("error_bars") or {}).get(k) or {}
        se = error.get("stderr")
        return _number(r["values"][k]) + (f" ± {se:.3f}" if isinstance(se, int | float) else "")

    def difference(r: dict[str, Any], k: str) -> str:
        d = (r.get("uncertainty") or {}).get(k)
        if not d or d.get("low") is None:
            return _number(r["difference"][k], signed=True)
        mark = " *" if d.get("excludes_zero") else ""
        return f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]{'' if d.get('paired') else ' u'}{mark}"

    for r in comparison["rows"]:
        rows.append([r["job"], r["checkpoint"], r["setting"], *(value(r, k) for k in cols)])
        if r["job"] != comparison["baseline"]:
            rows.append(["", "", "  difference", *(difference(r, k) for k in cols)])
            if r.get("pairing"):
                notes.append(f"{r['job']}: {r['pairing']}")
    _table(header, rows)
    print("values ± standard error; differences [95% interval]; * the interval excludes zero; "
          "u unpaired (the two errors combined)")
    for note in notes:
        print(note)
    return 0


def _regressions(args: argparse.Namespace) -> int:
    with _client(args) as c:
        rows = c.regressions(schedule=args.schedule, lineage=args.lineage, task=args.task, job=args.job,
                             limit=args.limit)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no regressions found")
        return 0
    _table(["found", "checkpoint", "job", "task", "column", "was", "now", "difference [95%]", "against"],
           [[r["created_at"][:16], r["checkpoint"], r["job_id"], r["task"], r["column"], _number(r["baseline_value"]),
             _number(r["value"]), f"{r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]",
             f"{r['against']} {r['baseline_job_id']}"] for r in rows])
    return 0


def _cancel_or_resume(args: argparse.Namespace) -> int:
    with _client(args) as c:
        job = c.cancel(args.job) if args.command == "cancel" else c.resume(args.job)
        print(job.model_dump_json(indent=2)) if args.json else _print_job(job)
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
        if not args.json and jobs.total > len(jobs.items):
            print(f"({len(jobs.items)} of {jobs.total} jobs shown, newest first; --limit N shows more)")
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


def _pull(args: argparse.Namespace) -> int:
    hub, gguf = (None, args.source) if args.source.endswith(".gguf") else (args.source, None)
    name = args.name or (Path(args.source).stem if gguf else args.source.rsplit("/", 1)[-1]).lower()
    print(f"pulling {args.source} into the server's checkpoint root as {name} ...", flush=True)
    with _client(args) as c:
        ck = c.pull(name, hub=hub, revision=args.revision, gguf=gguf, path=args.path)
    src = ck.source or {}
    origin = f"commit {src.get('commit')}" if src.get("kind") == "hub" else f"sha256 {src.get('sha256')}"
    print(f"{ck.name}  {ck.path}  {ck.family}  {ck.parameters:,} parameters  context {ck.context_length}  "
          f"chat template: {ck.chat_template or 'none'}  ({origin})")
    return 0


def _checkpoints_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        for ck in c.checkpoints():
            print(f"{ck.name}  {ck.path}  {ck.variant}  {ck.parameters:,} parameters  fingerprint {ck.fingerprint[:16]}")
    return 0


def _endpoint_line(e: Any) -> str:
    caps = e.capabilities
    return (f"{e.name}  {e.base_url}  {e.served_model}  {e.api_style}  context {e.context_length}  "
            f"logprobs {caps.get('prompt_scoring') or ('yes' if caps.get('prompt_logprobs') else 'no')}  "
            f"tokenizer {e.tokenizer or 'the server'}  version {caps.get('server_version') or '?'}")


def _endpoints_add(args: argparse.Namespace) -> int:
    with _client(args) as c:
        e = c.add_endpoint(name=args.name, base_url=args.base_url, **endpoint_fields(args))
        print(_endpoint_line(e))
    return 0


def _endpoints_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        for e in c.endpoints():
            print(_endpoint_line(e))
    return 0


def _endpoints_probe(args: argparse.Namespace) -> int:
    """What the server at URL can do, asked from here (no lctx service needed) before a job is submitted."""
    from clients.endpoint.client import allowed_endpoint_hosts
    from clients.endpoint.probe import probe_server, registered_context

    spec, caps = probe_server(args.base_url, allowed_endpoint_hosts(), args.served_model, args.tokenizer,
                              args.api_style, args.api_key_env)
    listed = "listed" if caps.listed else "not listed; answered a one-token request"
    scoring = f"yes ({caps.prompt_scoring})" if caps.prompt_scoring else "no"
    print(f"server: {caps.server or 'unknown'} {caps.server_version or ''}".rstrip())
    print(f"models: {', '.join(caps.models) or 'none listed'}")
    print(f"served model: {spec.served_model} ({listed})")
    if args.tokenizer or caps.tokenizer_endpoints or args.api_style == "chat":
        print(f"token prompts: {'yes' if caps.token_prompts else 'no'}")
        print(f"prompt logprobs: {scoring}")
    else:
        print("token prompts, prompt logprobs: not asked (no tokenizer to make token ids with: give --tokenizer)")
    print(f"tokenizer endpoints: {'yes (/tokenize, /detokenize)' if caps.tokenizer_endpoints else 'no'}")
    context, source = registered_context(None, args.tokenizer, caps)
    print(f"context: {f'{context} tokens ({source}): what endpoints add will record' if context else 'not said: give --context to endpoints add'}")
    return 0


def _schedules_run(args: argparse.Namespace) -> int:
    with _client(args) as c:
        run = c.run_schedule(args.name)
    if args.json:
        print(run.model_dump_json(indent=2))
        return 0
    from service.cost import duration  # one way to say a duration

    print(f"schedule {run.schedule}: {run.submitted} job(s) submitted, "
          f"{len(run.checkpoints) - run.submitted} checkpoint(s) skipped")
    for row in run.checkpoints:
        name = row.checkpoint or row.folder
        estimate = f", estimated {duration(row.seconds)} ({row.basis})" if row.seconds is not None else \
            ", no estimate (its data decides its work)"
        print(f"  {name}: submitted job {row.job}{estimate}" if row.job else f"  {name}: skipped, {row.skipped}")
    if run.submitted:
        print(f"  cost of this run: about {duration(run.seconds or 0)} of work on this service's hardware, each time "
              "the schedule fires (a night, for a nightly cron)")
    if run.note:
        print(f"  {run.note}")
    return 0


def _upload(args: argparse.Namespace) -> int:
    """OUT's results.json, each task's samples and the fingerprint the run recorded, sent as
    they are: the service checks them (the weights are the checkpoint's, the tasks its own)."""
    from evaluators.suite import RESULTS_FILE, task_folder, task_keys

    out = Path(args.out)
    results, marker = out / RESULTS_FILE, out / "checkpoint.json"
    if not results.is_file():
        raise ValueError(f"{results} does not exist: upload the folder a finished `lctx eval --out OUT` wrote")
    if not marker.is_file():
        raise ValueError(f"{marker} does not exist: it says which weights the run loaded; upload a folder `lctx "
                         "eval --checkpoint` wrote (a run on a served model has no weights to register)")
    document = json.loads(results.read_text(encoding="utf-8"))
    keys = task_keys(document.get("tasks") or [])
    samples = {}
    for key in keys:
        path = task_folder(out, key) / "samples.jsonl"
        if not path.is_file():
            raise ValueError(f"{path} does not exist: the run's samples of {key} are needed")
        samples[key] = path.read_text(encoding="utf-8")
    body = {"checkpoint": args.checkpoint, "fingerprint": json.loads(marker.read_text())["fingerprint"],
            "results": document, "samples": samples, **({"rope": args.rope} if args.rope else {})}
    with _client(args) as c:
        job = c.upload(body)
    print(f"recorded job {job.id} ({job.checkpoint}, {', '.join(keys)}; ran elsewhere): the leaderboard and the "
          "dashboard show it")
    return 0


def _schedules_add(args: argparse.Namespace) -> int:
    if args.file:
        body = json.loads(Path(args.file).read_text())
    else:
        if not args.task:
            raise ValueError(f"give at least one --task (e.g. --task {TASK_EXAMPLE}) or --file")
        if not args.watch:
            raise ValueError("give at least one --watch folder (inside the server's checkpoint roots) or --file")
        suite = {"tasks": [parse_task(t) for t in args.task],
                 **{name: getattr(args, name) for name in suite_flags() if getattr(args, name) is not None}}
        body = {"name": args.name, "cron": args.cron, "watch": args.watch, "suite": suite}
    with _client(args) as c:
        row = c.add_schedule(body)
    if args.json:
        print(row.model_dump_json(indent=2))
        return 0
    print(f"schedule {row.name}: cron {row.cron}, next run {row.next_run_at.isoformat(timespec='minutes')}, "
          f"watching {', '.join(row.watch)}")
    if row.plan is not None:
        print("each checkpoint's job:")
        for line in plan_lines(row.plan):
            print(f"  {line}")
    return 0


def _schedules_remove(args: argparse.Namespace) -> int:
    with _client(args) as c:
        c.delete_schedule(args.name)
    print(f"schedule {args.name} removed (the jobs it submitted stay)")
    return 0


def _schedules_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        rows = c.schedules()
    _table(["name", "cron", "next run", "watch", "tasks"],
           [[r.name, r.cron, r.next_run_at.isoformat(timespec="minutes"), ", ".join(r.watch),
             ", ".join(t["name"] for t in r.suite.get("tasks", []))] for r in rows])
    return 0


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="API base URL (default LCTX_BASE_URL or http://LCTX_HOST:LCTX_PORT)")
    p.add_argument("--token", help="bearer token (default LCTX_API_TOKEN)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("submit", help="submit an evaluation job to the API")
    p.add_argument("checkpoint", nargs="?", help="registered checkpoint name or path inside the checkpoint roots")
    p.add_argument("--task", action="append",
                   help=f"task and options, repeatable: {TASK_EXAMPLE} (the tasks and their options: `lctx eval "
                        "--help`)")
    p.add_argument("--file", help="JSON body of POST /v1/jobs instead of the options")
    for name, (kind, choices, text) in job_flags().items():  # from the request model (JobCreate)
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, choices=choices,
                       help=text.replace("%", "%%"))
    p.add_argument("--wait", action="store_true", help="poll until the job ends; exit 0 only if it succeeded")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the job id")
    p.add_argument("--dry-run", action="store_true", help="print the job's plan (samples, tokens, estimated time "
                   "on the service's hardware) and what it would be refused for, without queuing it")
    _client_args(p)
    p.set_defaults(func=_submit)

    p = sub.add_parser("status", help="one job, or the list of jobs")
    p.add_argument("job", nargs="?", help="a job id (default: list the newest jobs)")
    p.add_argument("--status", choices=[s.value for s in JobStatus], help="only jobs in this state")
    p.add_argument("--checkpoint", help="only jobs of this registered checkpoint")
    p.add_argument("--task", dest="filter_task", help="only jobs that run this task")
    p.add_argument("--limit", type=int, default=20, help="jobs to list (default 20)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    _client_args(p)
    p.set_defaults(func=_status)

    for name, text in (("cancel", "cancel a queued or running job (what it recorded is kept)"),
                       ("resume", "queue a failed or cancelled job again: it goes on from what it recorded")):
        p = sub.add_parser(name, help=text)
        p.add_argument("job", help="the job id")
        p.add_argument("--json", action="store_true", help=JSON_HELP)
        _client_args(p)
        p.set_defaults(func=_cancel_or_resume)

    p = sub.add_parser("results", help="results JSON of a job (or its samples)")
    p.add_argument("job", help="the job id")
    p.add_argument("--samples", action="store_true", help="per-sample records, one JSON per line")
    _client_args(p)
    p.set_defaults(func=_results)

    p = sub.add_parser("leaderboard", help="one task's results: a row per checkpoint and setting")
    p.add_argument("task", help="task (`lctx eval --help` lists them) or task/key (one part of a task's result, "
                   "e.g. a dataset)")
    p.add_argument("--checkpoint", help="only this registered checkpoint's rows")
    p.add_argument("--rope", help="only this RoPE setting, as shown (yarn:4, none, checkpoint)")
    p.add_argument("--backend", choices=[b.value for b in Backend], help="only rows run on this attention backend")
    p.add_argument("--thinking", help="only this thinking setting of a reasoning model (on, off, default, low, ...)")
    p.add_argument("--prefix", help="only checkpoints whose name starts so (one training run)")
    p.add_argument("--lineage", help="only checkpoints in this folder (a schedule's watch folder, as job paths show it)")
    p.add_argument("--per", choices=["fingerprint", "lineage"], default="fingerprint",
                   help="a row per checkpoint, or per lineage: each training run's newest checkpoint")
    p.add_argument("--sort", help="a column (default: the headline, best first), or checkpoint, finished_at")
    p.add_argument("--limit", type=int, default=100, help="rows to show (default 100)")
    p.add_argument("--offset", type=int, default=0, help="rows to skip (the next page)")
    p.add_argument("--wide", action="store_true", help=f"every column (default: the columns that fit "
                   f"{TABLE_WIDTH} characters, the headline and the lengths first)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    _client_args(p)
    p.set_defaults(func=_leaderboard)

    p = sub.add_parser("upload", help="record a finished `lctx eval --out OUT` run in the service as a job of a "
                       "registered checkpoint (marked as run elsewhere): the leaderboard and the dashboard show it")
    p.add_argument("out", help="the folder `lctx eval --out` wrote (results.json, checkpoint.json, a folder per task)")
    p.add_argument("--checkpoint", required=True, help="the registered checkpoint the run evaluated (its fingerprint "
                   "must be the run's)")
    p.add_argument("--rope", help="the RoPE override the run used, for a results.json written before lctx upload "
                   "existed (newer runs record it)")
    _client_args(p)
    p.set_defaults(func=_upload)

    p = sub.add_parser("compare", help="two or more jobs on one task, with differences from the first per column")
    p.add_argument("jobs", nargs="+", help="job ids; the first is the baseline")
    p.add_argument("--task", required=True, help="task (or task/key) to compare on")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    _client_args(p)
    p.set_defaults(func=_compare)

    p = sub.add_parser("regressions", help="drops nightly schedules found: a lineage's new checkpoint against the "
                       "previous one (or a pinned baseline), beyond the paired 95%% interval and the threshold")
    p.add_argument("--schedule", help="only the drops this schedule found")
    p.add_argument("--lineage", help="checkpoints in this folder (as job paths show it)")
    p.add_argument("--task", help="only this task (or one view of it: TASK/KEY, as the leaderboard names it)")
    p.add_argument("--job", help="the job that dropped")
    p.add_argument("--limit", type=int, default=50, help="drops to list, newest first (default 50)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    _client_args(p)
    p.set_defaults(func=_regressions)

    p = sub.add_parser("pull", help="bring a checkpoint from the Hugging Face hub or a GGUF file into the "
                       "server's checkpoint root and register it")
    p.add_argument("source", help="hub repository id (owner/name) or a .gguf file on the server (inside its "
                   "checkpoint roots or data directory)")
    p.add_argument("--revision", default="main", help="hub branch, tag or commit (default main)")
    p.add_argument("--name", help="registered name (default: the repository's or file's name, lower case)")
    p.add_argument("--path", help="folder to write inside the checkpoint roots (default: the name)")
    _client_args(p)
    p.set_defaults(func=_pull)

    p = sub.add_parser("checkpoints", help="register and list checkpoints")
    csub = p.add_subparsers(dest="checkpoints_command", required=True, metavar="ACTION")
    a = csub.add_parser("add", help="register a checkpoint directory under a name")
    a.add_argument("name", help="the name jobs and the leaderboard use (letters, digits, . _ -)")
    a.add_argument("path", help="the checkpoint folder on the server, inside its checkpoint roots (a path "
                   "relative to the first root, or absolute)")
    _client_args(a)
    a.set_defaults(func=_checkpoints_add)
    ls = csub.add_parser("list", help="registered checkpoints")
    _client_args(ls)
    ls.set_defaults(func=_checkpoints_list)

    p = sub.add_parser("schedules", help="nightly evaluations: add, list, run now, remove")
    ssub = p.add_subparsers(dest="schedules_command", required=True, metavar="ACTION")
    a = ssub.add_parser("add", help="a schedule: when its cron comes due, each new checkpoint (by fingerprint) in "
                        "its watch folders is evaluated with its suite; the answer says what each job costs")
    a.add_argument("name", help="the schedule's name (letters, digits, . _ -)")
    a.add_argument("--cron", default="0 2 * * *", help="when it runs, a cron expression in the server's time "
                   "zone (default '0 2 * * *': every night at 02:00)")
    a.add_argument("--watch", action="append", metavar="DIR", help="a folder of checkpoints on the server, inside "
                   "its checkpoint roots; repeatable")
    a.add_argument("--task", action="append", help=f"task and options, repeatable: {TASK_EXAMPLE}")
    for name in suite_flags():
        kind, choices, text = job_flags()[name]
        a.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, choices=choices,
                       help=text.replace("%", "%%"))
    a.add_argument("--file", help="JSON body of POST /v1/schedules instead of the flags")
    a.add_argument("--json", action="store_true", help=JSON_HELP)
    _client_args(a)
    a.set_defaults(func=_schedules_add)
    ls = ssub.add_parser("list", help="the schedules, their cron and next run")
    _client_args(ls)
    ls.set_defaults(func=_schedules_list)
    r = ssub.add_parser("run", help="tick a schedule now (its cron unchanged): each checkpoint its watch folders "
                        "hold, with the job submitted or why it was skipped")
    r.add_argument("name", help="the schedule's name (`lctx schedules list`)")
    r.add_argument("--json", action="store_true", help=JSON_HELP)
    _client_args(r)
    r.set_defaults(func=_schedules_run)
    rm = ssub.add_parser("remove", help="delete a schedule (the jobs it submitted stay)")
    rm.add_argument("name", help="the schedule's name (`lctx schedules list`)")
    _client_args(rm)
    rm.set_defaults(func=_schedules_remove)

    p = sub.add_parser("endpoints", help="register and list served models (OpenAI-compatible servers)")
    esub = p.add_subparsers(dest="endpoints_command", required=True, metavar="ACTION")
    a = esub.add_parser("add", help="register a served model: the server is probed, what it supports recorded")
    a.add_argument("name", help="the name jobs use in place of a checkpoint (letters, digits, . _ -)")
    a.add_argument("base_url", help="API root, e.g. http://127.0.0.1:8001/v1 (its host must be in the service's "
                   "LCTX_ENDPOINT_HOSTS; default loopback)")
    add_endpoint_flags(a, required=("served_model",), help_of={
        "tokenizer": "folder inside the checkpoint roots with the served model's tokenizer.json (default: the "
                     "server's /tokenize and /detokenize, where it has them: vLLM, SGLang)",
        "api_key_env": "NAME of the workers' environment variable holding the API key (LCTX_ENDPOINT_KEY_* or one "
                       "listed in LCTX_ENDPOINT_KEY_NAMES)"})
    _client_args(a)
    a.set_defaults(func=_endpoints_add)
    ls = esub.add_parser("list", help="registered endpoints")
    _client_args(ls)
    ls.set_defaults(func=_endpoints_list)
    pr = esub.add_parser("probe", help="ask a server what it can do (models, token prompts, prompt logprobs, "
                         "tokenizer endpoints, version), from here, before registering it or submitting a job")
    pr.add_argument("base_url", help="API root, e.g. http://127.0.0.1:8001/v1 (allowed hosts: LCTX_ENDPOINT_HOSTS, "
                    "default loopback)")
    add_endpoint_flags(pr, PROBE, help_of={"served_model": "the model to ask about (default: the first the "
                                                          "server lists)"})
    pr.set_defaults(func=_endpoints_probe)
