"""`lctx eval`, `lctx score <benchmark>` and `lctx lm-eval`: the evaluators from the shell,
without the service. Tasks, their flags and their scorers come from the registry: this
module names no task (tests/cli/test_cli_names_no_task.py). What loads torch, httpx, tqdm or a task's
evaluator is imported inside the command that needs it: `lctx --help` loads none of them
(tests/cli/test_cli_startup.py); the light contracts are imported here."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from checkpoints.attention.backend import Backend
from checkpoints.engine_options import EngineOptions
from checkpoints.jsonfiles import write_json_atomic
from cli.endpoint_flags import add_endpoint_flags, endpoint_fields
from cli.judges import add_judge_flags, judge_from_flags
from cli.task_options import option_flags
from clients.endpoint.options import EndpointSpec
from evaluators.progress import JobProgress, tokens_text
from evaluators.progress import duration as duration_text
from evaluators.registry import (
    describe_tasks,
    make_evaluator,
    parse_task,
    scorers,
    task_options,
    task_result,
    unknown_task,
)
from evaluators.results import fmt_error


def parse_value(text: str) -> Any:
    """JSON when it parses (numbers, true, lists), the plain string otherwise."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def task_options_of(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """The task spec for one --task from the shared flags and --option k=v pairs."""
    accepted = task_options()[name].model_fields
    spec: dict[str, Any] = {"name": name}
    for option in option_flags():
        value = getattr(args, option, None)
        if value is None or value is False:
            continue
        if option not in accepted:
            continue  # meant for another --task (flags no task accepts are refused in _eval)
        spec[option] = value  # lists stay "a,b,c": the option model splits them
    for pair in args.option or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--option {pair!r}: write KEY=VALUE, e.g. --option dense_max=1024")
        spec[key.strip()] = parse_value(value)
    return spec


def summary_rows(key: str, entry: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(task, what, value) rows for the table printed at the end: the typed result's metrics
    and its series points."""
    result = task_result(entry)
    rows = [(key, f"{m.name} ({m.unit}, n={m.n})", fmt_error(m.value, m.error, unit=m.unit)) for m in result.metrics]
    for s in result.series:
        rows += [(key, f"{s.label()} @ {s.axis} {p.key} (n={p.n})", fmt_error(p.value, p.error, unit=s.unit))
                 for p in s.points]
    return rows


HEARTBEAT_S = 0.25  # `lctx eval` redraws its bars this often whatever the work reports
BAR_EVERY_S = 0.5  # and at most this often on reports (a burst of reports is one redraw)
BAR_FORMAT = "{desc}: {n_fmt}/{total_fmt} samples [{elapsed}]{postfix}"  # no tqdm rate: `?sample/s` says nothing


def eval_postfix(cell: dict[str, Any]) -> str:
    """What `lctx eval`'s bar adds to a task's samples: prompt tokens prefilled of the plan and
    their speed, and the ETA (from tokens while the prompts prefill: a long batch finishes its
    first sample only after minutes), or the totals reached once the task is done."""
    prefill = tokens_text(cell["done"], cell["total"], cell["tokens"], cell["planned_tokens"], cell["tokens_per_s"])
    if cell["total"] and cell["done"] >= cell["total"]:
        return prefill
    eta = "ETA: measuring" if not cell["eta_s"] else f"ETA {duration_text(max(cell['eta_s'], 1.0))}"
    return ", ".join(x for x in (prefill, eta) if x)


def print_table(rows: list[tuple[str, str, str]]) -> None:
    if not rows:
        return
    w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    print(f"{'task':<{w0}}  {'':<{w1}}  value ± standard error")
    for t, what, v in rows:
        print(f"{t:<{w0}}  {what:<{w1}}  {v}")


def claim_output(out: Path, checkpoint: Path) -> None:
    """An output folder resumes only the checkpoint it was started for: recorded samples of
    other weights must not be reused."""
    from checkpoints.fingerprint import inspect_checkpoint

    fingerprint = inspect_checkpoint(checkpoint).fingerprint
    marker = out / "checkpoint.json"
    if marker.is_file():
        before = json.loads(marker.read_text()).get("fingerprint")
        if before != fingerprint:
            raise ValueError(f"{out} holds samples of another checkpoint (fingerprint {str(before)[:12]}..., "
                             f"{checkpoint} is {fingerprint[:12]}...); give another --out or remove that folder")
        return
    marker.write_text(json.dumps({"path": str(checkpoint.resolve()), "fingerprint": fingerprint}) + "\n")


def served_model(args: argparse.Namespace, specs: list[dict[str, Any]], out: Path) -> tuple[Any, Any, dict[str, Any]]:
    """The endpoint of `--endpoint` as a model evaluators run on: what cannot apply to a
    served model refused before any request, then the URL checked, the server probed, what
    it cannot score refused, the output folder claimed for this endpoint and model."""
    from clients.endpoint.client import allowed_endpoint_hosts
    from clients.endpoint.engine import open_served
    from clients.endpoint.tokenizer import context_of
    from evaluators.served import endpoint_refusals

    if args.checkpoint:
        raise ValueError("give --checkpoint or --endpoint, not both")
    if not args.served_model:
        raise ValueError("--endpoint needs --served-model NAME (the name the server answers to, e.g. as it lists "
                         "it at /v1/models)")
    settings = {"rope": args.rope, "backend": args.backend, "dtype": args.dtype, "device": args.device,
                "memory_mb": args.memory_mb}
    problems = endpoint_refusals(specs, None, settings, args.api_style)  # nothing sent yet
    if problems:
        raise ValueError("cannot run on the endpoint:\n  " + "\n  ".join(problems))
    context = args.context_length or (context_of(args.tokenizer) if args.tokenizer else None)
    spec = EndpointSpec(base_url=args.endpoint, **{**endpoint_fields(args), "context_length": context})
    opened = open_served(spec, allowed_endpoint_hosts())
    served = opened.source
    problems = endpoint_refusals(specs, served.capabilities.to_dict(), {}, args.api_style)
    if problems:
        raise ValueError("cannot run on the endpoint:\n  " + "\n  ".join(problems))
    out.mkdir(parents=True, exist_ok=True)
    claim_endpoint_output(out, served.spec.base_url, served.spec.served_model)
    return served, opened.engine, {"endpoint": {"url": served.spec.base_url,
                                                "served_model": served.spec.served_model}}


def claim_endpoint_output(out: Path, url: str, model: str) -> None:
    """An output folder resumes only the endpoint and model it was started for."""
    marker = out / "checkpoint.json"
    claim = {"endpoint": url, "served_model": model}
    if marker.is_file():
        before = json.loads(marker.read_text())
        if {k: before.get(k) for k in claim} != claim:
            raise ValueError(f"{out} holds samples of another model ({before}); give another --out or remove it")
        return
    marker.write_text(json.dumps(claim) + "\n")


def option_help(option: str, tasks: list[str]) -> str:
    """A shared flag's help: each distinct description once, after the tasks it is theirs
    ("task_a, task_b: ...; task_c: ...")."""
    by_text: dict[str, list[str]] = {}
    for task in tasks:
        by_text.setdefault(task_options()[task].model_fields[option].description or option, []).append(task)
    return "; ".join(f"{', '.join(names)}: {text}" for text, names in by_text.items())


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse names the flag in its error)."""
    return _int_from(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _int_from(text, 0)


def _int_from(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


def _eval(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from checkpoints.opening import open_model
    from evaluators.data import local_file_problems
    from evaluators.suite import RESULTS_FILE, draw_ahead, run_suite, suite_document, task_keys

    options = task_options()
    for name in args.task:
        if name not in options:
            raise ValueError(unknown_task(name))
    for option, (_, tasks) in option_flags().items():
        if getattr(args, option, None) not in (None, False) and not set(tasks) & set(args.task):
            accepted = sorted({o for n in args.task for o in options[n].model_fields})
            raise ValueError(f"--{option.replace('_', '-')} applies to none of the tasks {', '.join(args.task)}; "
                             f"they accept {', '.join(accepted)}")
    parsed = [parse_task(task_options_of(args, name)) for name in args.task]  # validated once, typed
    data_dir = Path(args.data_dir) if args.data_dir else None
    problems = [f"{t.task}: {p}" for t in parsed for p in local_file_problems(t, data_dir)]
    if problems:  # refused before anything loads, as the service refuses such a job at submission
        raise ValueError("; ".join(problems))
    for t in parsed:  # run all the same, as the service accepts such a job with these warnings
        for warning in t.data_warnings(data_dir):
            print(f"warning: {t.task}: {warning}", file=sys.stderr, flush=True)
    if not args.checkpoint and not args.endpoint:
        raise ValueError("give --checkpoint DIR, or --endpoint URL with --served-model and --tokenizer")
    parsed, judges = task_judges(parsed, args)  # opened before the model loads; named with their identity
    specs = [t.as_spec() for t in parsed]  # as results.json records them
    out = Path(args.out) if args.out else Path("lctx-eval") / (
        Path(args.checkpoint).resolve().name if args.checkpoint else str(args.served_model).replace("/", "_"))
    seconds: dict[str, float] = {}  # loading and compiling, before the first sample
    evaluators: dict[str, Any] = {}  # made by draw_ahead for a checkpoint, here for an endpoint
    if args.endpoint:
        loaded, engine, source = served_model(args, specs, out)
        evaluators = {key: make_evaluator(t, data_dir) for key, t in zip(task_keys(parsed), parsed, strict=True)}
    else:
        out.mkdir(parents=True, exist_ok=True)
        claim_output(out, Path(args.checkpoint))
        drawing: list[Any] = []  # the tasks draw their samples with the tokenizer while the weights load and compile

        def draw(tokenizer: Any) -> None:
            drawing.extend(draw_ahead(parsed, tokenizer, data_dir))

        opened = open_model(args.checkpoint, engine_options(args), rope=args.rope, backend=args.backend,
                            dtype=args.dtype, device=args.device, with_tokenizer=draw)
        loaded, engine = opened.loaded, opened.engine
        seconds.update(opened.seconds)
        evaluators, drawn = drawing
        waiting = time.perf_counter()
        drawn.result()  # what could not be drawn raises here, as the first build would
        seconds["draw_wait_s"] = time.perf_counter() - waiting
        source = {"checkpoint": {"path": str(Path(args.checkpoint).resolve())}}
    attach_judges(evaluators, judges, out, refresh=getattr(args, "judge_refresh", False))
    started = datetime.now(UTC).isoformat()
    bars: dict[str, tqdm] = {}

    def show(state: dict[str, dict[str, Any]]) -> None:
        for key, cell in state.items():
            bar = bars.get(key)
            if bar is not None:
                bar.total, bar.n = cell["total"] or None, cell["done"]
                bar.set_postfix_str(eval_postfix(cell), refresh=True)

    # one estimate of speed and ETA for `lctx eval` and the service: prompt tokens while they prefill
    tracker = JobProgress(show, dict(zip(task_keys(parsed), parsed, strict=True)), every=BAR_EVERY_S)
    if not args.quiet:
        # the bars move at least once a second, a long prefill's ETA with them: a beat every quarter second
        # keeps the gap under a second on a loaded machine (1.1 s seen at load 16 with a beat every second,
        # 1.2 s at load 17 with one every half second)
        tracker.heartbeat(HEARTBEAT_S)

    def progress(key: str) -> Callable[[str, int, int], None]:
        bars[key] = tqdm(desc=key, disable=args.quiet, bar_format=BAR_FORMAT)
        tracker.set(key)  # the task's clock starts here, before its first prompt prefills
        return tracker.samples(key)

    def task_done(key: str, _folder: Path) -> None:
        tracker.flush(force=True)  # the totals reached are the bar's last line
        bars.pop(key).close()

    try:
        results = run_suite(loaded, parsed, out, engine, data_dir=data_dir, progress=progress,
                            on_prefill=tracker.prefilled, after_task=task_done, evaluators=evaluators,
                            on_generated=tracker.generated, on_reused=tracker.reused, on_foreseen=tracker.foreseen)
    finally:
        tracker.close(write=False)
        for bar in bars.values():
            bar.close()
    document = suite_document(loaded.describe_run(), specs, results, started, **source)
    document["seconds"] = {key: round(value, 4) for key, value in seconds.items()}  # each task's own: its entry
    # The run as a job would request it: `lctx upload` records it in the service under this setting.
    document["request"] = {"rope": getattr(args, "rope", None), "backend": getattr(args, "backend", "auto")}
    write_json_atomic(out / RESULTS_FILE, document)
    print_table([row for key, entry in results.items() for row in summary_rows(key, entry)])
    print("\n".join(f"{key}: {task_result(entry).summary}" for key, entry in results.items()))
    for key, entry in results.items():  # what the run found of its data (files from before a fix)
        for warning in (entry.get("data") or {}).get("warnings", []):
            print(f"warning: {key}: {warning}", flush=True)
    if args.endpoint:
        print(f"endpoint: {engine.sent} requests answered, {loaded.retries} retried (429, 5xx, dropped connections)")
    print(f"results: {out / RESULTS_FILE}")
    return 0


def task_judges(parsed: list[Any], args: argparse.Namespace) -> tuple[list[Any], dict[str, Any]]:
    """The tasks with their judges named as results record them (`name@identity`), and the
    judges by that name, opened once each: a task that needs a judge and names none is
    refused here, before the model loads, as the service refuses such a job."""
    judges: dict[str, Any] = {}
    out = []
    for t in parsed:
        if t.needs_judge:
            problems = t.judge_problems()
            if problems:
                raise ValueError("; ".join(problems))
            judge = next((j for j in judges.values() if t.judge_ref() in (j.name, j.ref)), None) or \
                judge_from_flags(t.judge_ref(), args, args.device)
            judges[judge.ref] = judge
            t = parse_task({**t.as_spec(), "judge": judge.ref})
        for option, ref in t.graders().items():  # models besides the judge (a citation NLI model, say)
            grader = next((j for j in judges.values() if ref in (j.name, j.ref)), None) or \
                judge_from_flags(ref, args, args.device)
            judges[grader.ref] = grader
            t = parse_task({**t.as_spec(), option: grader.ref})
        out.append(t)
    return out, judges


def attach_judges(evaluators: dict[str, Any], judges: dict[str, Any], out: Path, refresh: bool = False) -> None:
    """Each judged task's judge, its budgets and the run's cache of judgments (<out>/judgments:
    a rerun with the same --out asks the judge nothing twice; `refresh`: --judge-refresh asks
    again)."""
    from evaluators.judges import JUDGMENTS_DIR, Judging, JudgmentCache

    if not judges:
        return
    cache = JudgmentCache(out / JUDGMENTS_DIR, refresh=refresh)
    for evaluator in evaluators.values():
        if evaluator.options.needs_judge:
            evaluator.judging = Judging.of(judges[evaluator.options.judge_ref()], cache, evaluator.options)
        for option, ref in evaluator.options.graders().items():
            evaluator.attach_grader(option, Judging(judges[ref], cache, evaluator.options.judge_max_new_tokens,
                                                    evaluator.options.judge_thinking_budget))


def _score(args: argparse.Namespace) -> int:
    """`lctx score <command>`: the task folder's scorer (`evaluators.registry.Scorer`), with its
    judge opened here when it grades with one."""
    scorer = args.scorer
    judge = None
    if scorer.judge:
        judge = judge_from_flags(args.judge, args, args.device)
    scored = scorer.run(args, judge)
    print(json.dumps(scored.scores, indent=2, ensure_ascii=False))
    for note in scored.notes:
        print(note)
    return 0


def _lm_eval(args: argparse.Namespace) -> int:
    import lm_eval
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    import evaluators.lm_eval_adapter  # noqa: F401 - registers the "lctx" model

    model_args = {"checkpoint": args.checkpoint, "rope": args.rope, "backend": args.backend,
                  "device": args.device, "dtype": args.dtype, "max_length": args.max_length}
    model_args = {k: v for k, v in model_args.items() if v is not None}
    tracker = EvaluationTracker(output_path=args.output_path) if args.output_path else None
    results = lm_eval.simple_evaluate(
        model="lctx", model_args=model_args, tasks=[t for t in args.tasks.split(",") if t],
        num_fewshot=args.num_fewshot, limit=args.limit, log_samples=args.log_samples,
        evaluation_tracker=tracker, task_manager=TaskManager(include_path=args.include_path),
    )
    if results is None:
        return 1
    samples = results.pop("samples", None)
    if tracker is not None:
        tracker.save_results_aggregated(results=results, samples=samples if args.log_samples else None)
        if args.log_samples:
            for task_name in results["configs"]:
                tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    from lm_eval.utils import make_table

    print(make_table(results))
    return 0


def _model_flags(p: argparse.ArgumentParser, endpoint: bool = False) -> None:
    p.add_argument("--checkpoint", required=not endpoint, help="checkpoint directory (lctx or Hugging Face safetensors)")
    p.add_argument("--rope", help="RoPE override, e.g. yarn:4")
    p.add_argument("--backend", default="auto", help=f"attention backend: {', '.join(Backend)}")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", help="float32, bfloat16 or float16 (default: float32 on CPU)")
    add_engine_flags(p)


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """The engine's flags, made from its options (checkpoints/engine_options.py: their bounds,
    defaults and help declared once, as the service's LCTX_ENGINE_* settings read them)."""
    fields = EngineOptions.model_fields
    p.add_argument("--max-batch", type=positive_int, default=fields["max_batch"].default,
                   help=f"{fields['max_batch'].description} (default {fields['max_batch'].default})")
    p.add_argument("--memory-mb", type=positive_int, help=fields["memory_mb"].description)
    p.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false",
                   help=f"prefill every prompt from scratch (default: {fields['prefix_cache'].description})")
    p.add_argument("--draft-tokens", type=non_negative_int, help=fields["draft_tokens"].description)


def engine_options(args: argparse.Namespace) -> EngineOptions:
    """The engine flags as the engine's options; ValueError naming a flag out of bounds."""
    try:
        return EngineOptions(memory_mb=args.memory_mb, max_batch=args.max_batch, prefix_cache=args.prefix_cache,
                             draft_tokens=args.draft_tokens)
    except ValidationError as e:
        raise ValueError("; ".join(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}"
                                   for err in e.errors())) from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="run evaluators on a checkpoint and write results JSON",
                       description="Run one or more evaluators; rerunning with the same --out resumes.")
    _model_flags(p, endpoint=True)
    e = p.add_argument_group("a served model (in place of --checkpoint)")
    e.add_argument("--endpoint", help="OpenAI-compatible API root, e.g. http://127.0.0.1:8001/v1 (allowed hosts: "
                   "LCTX_ENDPOINT_HOSTS, default loopback)")
    add_endpoint_flags(e, help_of={"served_model": "the model name as the server lists it at /v1/models",
                                   "api_key_env": "NAME of the environment variable holding the API key (never "
                                                  "the key)"})
    p.add_argument("--task", action="append", required=True,
                   help=f"repeatable; one of {describe_tasks()}".replace("%", "%%"))
    for option, (kind, tasks) in option_flags().items():  # from the tasks' option models
        text = option_help(option, tasks) + (" (comma-separated)" if kind == "list" else "")
        flag = f"--{option.replace('_', '-')}"
        if kind == "bool":
            p.add_argument(flag, dest=option, action="store_true", help=text)
        else:
            p.add_argument(flag, dest=option, type=int if kind == "int" else str, help=text.replace("%", "%%"))
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="any other task option (JSON value)")
    judged = ", ".join(name for name, options in task_options().items() if options.needs_judge)
    add_judge_flags(p.add_argument_group(f"a served judge (--judge URL; a task that needs a judge: {judged})"))
    layouts = "; ".join(f"{name}: {options.data_layout}" for name, options in task_options().items()
                        if options.data_layout)
    p.add_argument("--data-dir", help=f"local dataset files ({layouts})".replace("%", "%%"))
    p.add_argument("--out", help="output folder (default lctx-eval/<checkpoint name>)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_eval)

    s = sub.add_parser("score", help="score existing predictions with the official rules")
    ssub = s.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for scorer in scorers():  # each declared by its task folder (score.py)
        sp = ssub.add_parser(scorer.command, aliases=list(scorer.aliases), help=scorer.help)
        scorer.arguments(sp)
        if scorer.judge:
            sp.add_argument("--judge", required=True, help="the judge: a checkpoint folder (lctx's engine) or an "
                            "OpenAI-compatible API root (http://HOST:PORT/v1, chat style) with --judge-served-model")
            sp.add_argument("--device", default="cpu", help="where a checkpoint judge runs: cpu or cuda")
            add_judge_flags(sp.add_argument_group("a served judge (--judge URL)"))
        sp.set_defaults(func=_score, scorer=scorer)

    m = sub.add_parser("lm-eval", help="run lm-evaluation-harness tasks on a lctx checkpoint")
    _model_flags(m)
    m.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    m.add_argument("--limit", type=float, help="examples per task (or a fraction)")
    m.add_argument("--num-fewshot", type=int, help="demonstrations per prompt (default: the task's)")
    m.add_argument("--max-length", type=int, help="context budget (default: the model's context)")
    m.add_argument("--output-path", help="write lm-eval's usual results layout here")
    m.add_argument("--log-samples", action="store_true", help="also save per-sample outputs")
    m.add_argument("--include-path", help="folder of extra task YAMLs")
    m.set_defaults(func=_lm_eval)

