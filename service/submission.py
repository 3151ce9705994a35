"""From a job or schedule request to a validated, queued job row. Shared by the API
and the scheduler so both refuse the same things with the same messages."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from checkpoints.config import ModelConfig, apply_rope_override
from checkpoints.config_reader import load_config
from checkpoints.errors import CheckpointError, OutsideCheckpoint
from checkpoints.fingerprint import CheckpointInfo, inspect_checkpoint
from checkpoints.loading import load_dtype
from checkpoints.rope import parse_rope_override
from checkpoints.tokenizer import (
    CHAT_TEMPLATE_FILE,
    TOKENIZER_CONFIG_FILE,
    added_token_texts,
    marks_thinking,
    read_chat_template,
)
from clients.endpoint.engine import served_identity
from clients.endpoint.options import EndpointSpec
from clients.endpoint.probe import unanswered
from evaluators.data import file_option_problem
from evaluators.errors import EvaluatorError
from evaluators.judges import check_pin, pinned_ref, split_ref
from evaluators.options import JUDGE_HOWTO, TaskOptions
from evaluators.registry import parse_task, task_options
from service.core.errors import Forbidden, InvalidRequest, Missing
from service.core.paths import client_text, confine, confine_checkpoint_files
from service.core.settings import Settings
from service.cost import Cost, check_cost, checkpoint_facts, endpoint_facts, plan_job
from service.resolution import with_resolution
from service.schemas import JobCreate, Suite
from service.store import CheckpointRow, EndpointRow, JobRow, Store

log = logging.getLogger("lctx.submission")


def checkpoint_info(path: Path, roots: list[Path]) -> CheckpointInfo:
    """Validate and fingerprint a checkpoint folder whose every file lies inside `roots`; the
    runtime's refusal becomes a 422 with its message (config unreadable, weights missing or
    pickled, not safetensors), a file that escapes the roots a 403."""
    try:
        confine_checkpoint_files(path, roots)
        return inspect_checkpoint(path)
    except OutsideCheckpoint as e:
        raise Forbidden(str(e)) from e
    except CheckpointError as e:
        raise InvalidRequest(str(e)) from e


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_model_memory(parameters: int, config_dtype: str, settings: Settings, name: str,
                       cluster_gpus: int | None = None) -> None:
    """The weights fit the memory this service allows a model (LCTX_MAX_MODEL_MEMORY_MB,
    default the machine's) at the dtype a worker loads them in: the loader's own rule
    (checkpoints.loading.load_dtype) from LCTX_DEVICE and whether the cluster has a GPU."""
    gpu = None if cluster_gpus is None else cluster_gpus > 0
    per = DTYPE_BYTES[load_dtype(settings.device, gpu, config_dtype)]
    need, limit = parameters * per, settings.model_memory_limit()
    if need > limit:
        raise InvalidRequest(f"checkpoint {name}: its {parameters:,} parameters take {_size(need)} at "
                             f"{per * 8}-bit, more than the {_size(limit)} this service allows a model "
                             "(LCTX_MAX_MODEL_MEMORY_MB, default this machine's memory); evaluate it on a larger "
                             "machine or through a served endpoint")


@dataclass(frozen=True)
class ResolvedCheckpoint:
    name: str
    path: Path
    fingerprint: str
    parameters: int = 0
    dtype: str = "float32"  # its config's


def resolve_checkpoint(store: Store, settings: Settings, ref: str,
                       cluster_gpus: int | None = None) -> ResolvedCheckpoint:
    """A registered name, or a path inside the checkpoint roots (validated and fingerprinted)."""
    row = store.find_checkpoint(ref)
    if row is not None:
        dtype = _dtype_of(Path(row.path), row.name)
        check_model_memory(row.parameters or 0, dtype, settings, row.name, cluster_gpus)
        return ResolvedCheckpoint(row.name, Path(row.path), row.fingerprint, row.parameters or 0, dtype)
    if "/" not in ref and not ref.startswith("."):
        names = ", ".join(c.name for c in store.list_checkpoints()[:20]) or "none yet"
        raise InvalidRequest(f"checkpoint {ref!r} is neither a registered name (registered: {names}) nor a path; "
                             "register it with POST /v1/checkpoints or give its directory")
    path = confine(ref, settings.roots, "checkpoint path")
    info = checkpoint_info(path, settings.roots)
    check_model_memory(info.parameters, info.dtype, settings, path.name, cluster_gpus)
    known = store.checkpoint_by_path(str(path))
    return ResolvedCheckpoint(known.name if known else str(path), path, info.fingerprint, info.parameters, info.dtype)


def _dtype_of(path: Path, name: str) -> str:
    """The registered checkpoint's stored dtype, its config read (and its sizes checked) again:
    a config.json edited since registration is refused now, not when a worker builds it."""
    try:
        return load_config(path).torch_dtype
    except CheckpointError as e:
        raise InvalidRequest(f"checkpoint {name}: {e}; fix its config.json or register it again") from e


def validate_suite(suite: Suite, settings: Settings, cluster_gpus: int | None = None,
                   checkpoint: Path | None = None) -> list[dict[str, Any]]:
    """What a suite must pass to be queued, one function for a job, a schedule and each job a
    schedule makes: its tasks (`validate_tasks`), the RoPE override and the chat template
    against the checkpoint. A schedule's suite (`checkpoint` None: none found yet) has what
    does not depend on the checkpoint checked now and the rest when each job is made."""
    tasks = validate_tasks(suite, settings, cluster_gpus)
    check_rope(suite.rope, load_config(checkpoint) if suite.rope is not None and checkpoint is not None else None)
    if checkpoint is not None:
        check_chat_templates(suite, checkpoint)
        check_thinking(suite, checkpoint)
        check_thinking_context(suite, checkpoint)
    return tasks


def check_thinking_context(suite: Suite, checkpoint: Path) -> None:
    """A sample that fits the checkpoint's context until its thinking budget is added is
    refused: the run would record it beyond the context and score it 0 for the budget alone
    (issue #60). Lengths beyond the context asked for as such still run (a context-extension
    measurement), as they always did."""
    thinks = None
    for i, spec in enumerate(suite.tasks):
        need = spec.context_needed()
        if need is None or spec.thinking_setting() in (None, "off"):
            continue
        thinks = marks_thinking(checkpoint) if thinks is None else thinks
        if not spec.thinking_tokens(thinks):
            continue
        config = load_config(checkpoint)
        context = (apply_rope_override(suite.rope, config) if suite.rope is not None else config).effective_context
        if need <= context and (why := _over_context(i, spec, need, context, thinks,
                                                     f"checkpoint {checkpoint.name}'s context")):
            raise InvalidRequest(why)


def check_thinking(suite: Suite, checkpoint: Path) -> None:
    """A task switching thinking on or off (or to a reasoning effort) on a checkpoint whose
    chat template has no such switch is refused now, naming the checkpoint and what its
    template offers (an always-thinking template takes `on`)."""
    from evaluators.chat import thinking_refusal

    for i, spec in enumerate(suite.tasks):
        setting = spec.thinking_setting()
        if setting in (None, "default"):
            continue
        if (why := spec.thinking_without_template()) is not None:
            raise InvalidRequest(f"tasks[{i}] ({why})")
        template, _ = read_chat_template(checkpoint)
        refusal = thinking_refusal(template, added_token_texts(checkpoint), setting,
                                   f"tasks[{i}] ({spec.name}) on checkpoint {checkpoint.name}")
        if refusal:
            raise InvalidRequest(refusal)


def check_chat_templates(suite: Suite, checkpoint: Path) -> None:
    """A task asking for the chat template (its `chat_template` option) on a checkpoint that
    has none is refused now, naming the task, the option and the files looked for."""
    wanting = [(i, spec) for i, spec in enumerate(suite.tasks) if spec.chat_template_wanted()]
    if not wanting or read_chat_template(checkpoint)[0] is not None:
        return
    i, spec = wanting[0]
    raise InvalidRequest(f"tasks[{i}] ({spec.name}).chat_template: true, but checkpoint {checkpoint.name} has no chat "
                         f"template (looked for {checkpoint / CHAT_TEMPLATE_FILE} and the 'chat_template' field of "
                         f"{checkpoint / TOKENIZER_CONFIG_FILE}); set chat_template to false or add the template")


# A model to check RoPE overrides of a schedule against before any checkpoint is found
# (the numbers and names; each checkpoint found is checked again when its job is made).
_PROBE = dict(hidden_size=64, num_layers=1, num_heads=1, intermediate_size=64, vocab_size=2)


def check_rope(rope: str | dict[str, Any] | None, config: ModelConfig | None = None) -> None:
    """The RoPE override is a known method with finite parameters within their bounds (its
    `rope_theta` too); with the checkpoint's config, the config it makes is one the worker
    can build (LongRoPE's factor lists as long as the model's rotary pairs)."""
    if rope is None:
        return
    try:
        if config is None:
            parse_rope_override(rope, ModelConfig(**_PROBE))
        else:
            apply_rope_override(rope, config)
    except (CheckpointError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise InvalidRequest(f"rope {rope!r}: {e}") from e


def validate_tasks(suite: Suite, settings: Settings, cluster_gpus: int | None = None) -> list[dict[str, Any]]:
    """Each task with every option (the request schema, built from the evaluators' option
    models, has checked them), within the service's bounds, its data present, file
    options confined; the backend one the cluster can run."""
    check_backend(suite.backend, settings, cluster_gpus)
    tasks, planned = [], 0
    for i, spec in enumerate(suite.tasks):
        where = f"tasks[{i}] ({spec.name})"
        check_bounds(spec, settings, where)
        planned += spec.planned_samples() or 0
        check_data(spec, settings, where)
        tasks.append(spec.options())  # defaults filled in: the job records every option
        confine_files(tasks[-1], settings, f"tasks[{i}]")
        twin = next((j for j, t in enumerate(tasks[:-1]) if t == tasks[-1]), None)
        if twin is not None:
            raise InvalidRequest(f"{where} repeats tasks[{twin}] with the same options: it would run the same "
                                 "samples twice; drop the copy (a task may repeat only with different options)")
    if planned > settings.max_samples_per_job:
        raise InvalidRequest(f"the job plans {planned} samples; this service runs at most {settings.max_samples_per_job} "
                             "per job (LCTX_MAX_SAMPLES_PER_JOB): ask for fewer lengths or trials, or split it into jobs")
    return tasks


def check_bounds(spec: TaskOptions, settings: Settings, where: str) -> None:
    """Every option that counts tokens at most LCTX_MAX_LENGTH: a 10M-token prompt on a
    small model would hold a worker for days, not fail."""
    for name, largest in spec.token_counts().items():
        if largest > settings.max_length:
            raise InvalidRequest(f"{where}.{name}: {largest} tokens is more than this service's limit of "
                                 f"{settings.max_length} (LCTX_MAX_LENGTH); ask for at most {settings.max_length}")


SERVICE_DATA_DIR = ("(the service's data directory: start it with `lctx serve --data-dir DIR` or LCTX_DATA_DIR=DIR; "
                    "a client cannot set it)")


def check_data(spec: TaskOptions, settings: Settings, where: str) -> None:
    """A data-backed task's files are in the data directory and hold something, or the job
    is refused now with the paths looked for and where to get them (not failed after its
    other tasks ran). With LCTX_HUB_DATA, tasks the Hugging Face hub serves (LongBench,
    SCROLLS) may go on without their files (not with empty ones)."""
    problems = spec.data_problems(settings.data_dir.absolute() if settings.data_dir else None, hub=settings.hub_data,
                                  max_text_bytes=settings.max_text_file_bytes)
    if problems:
        # The evaluators name `lctx eval`'s flag and the variable; a client of this service sets neither:
        # the service's data directory is its own setting.
        text = "; ".join(problems).replace("(--data-dir or LCTX_DATA_DIR)", SERVICE_DATA_DIR).replace(
            "--data-dir or LCTX_DATA_DIR", SERVICE_DATA_DIR.strip("()"))
        raise InvalidRequest(f"{where}: {text}")


def check_backend(backend: str, settings: Settings, cluster_gpus: int | None) -> None:
    """`triton` needs a CUDA GPU (or Triton's CPU interpreter, TRITON_INTERPRET=1, which
    tests use): refused on a cluster known to have none, or with LCTX_DEVICE=cpu."""
    if backend != "triton" or os.environ.get("TRITON_INTERPRET") == "1":
        return
    if settings.device == "cpu" or cluster_gpus == 0:
        why = "LCTX_DEVICE=cpu" if settings.device == "cpu" else "the Ray cluster has no GPU"
        raise InvalidRequest(f"backend 'triton' needs a CUDA GPU and {why}; use 'auto' (Triton on GPU, the "
                             "chunked PyTorch path on CPU) or 'torch'")


def confine_files(task: dict[str, Any], settings: Settings, where: str) -> None:
    """Options the task's option model marks as files must lie inside the data dir or the
    checkpoint roots, like checkpoint paths; relative ones are taken relative to the data
    dir. The option is replaced by the resolved path, so the worker reads exactly the file
    that was checked, once `file_option_problem` has read it far enough to know it can serve
    the task (text, not empty)."""
    roots = ([settings.data_dir.absolute()] if settings.data_dir else []) + settings.roots
    options = task_options()[task["name"]]
    for key in options.file_options():
        if isinstance(task.get(key), str):
            given = task[key]
            path = confine(given, roots, f"{where}.{key}")
            task[key] = str(path)
            if not path.exists():
                relative = "the data directory (LCTX_DATA_DIR)" if settings.data_dir else \
                    "the first checkpoint root (no data directory is configured)"
                raise InvalidRequest(f"{where}.{key}: {given} does not exist (a relative path is taken relative "
                                     f"to {relative}); put the file there or fix the path")
            problem = file_option_problem(path, given, key in options.folder_options(), settings.max_text_file_bytes)
            if problem:
                raise InvalidRequest(f"{where}.{key}: {problem}")


def job_fields(resolved: ResolvedCheckpoint, suite: Suite, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's row: its checkpoint and its request, every field of the suite as given
    (the request model is the one declaration) with the tasks as validated."""
    request = {**suite.model_dump(mode="json", include=set(Suite.model_fields)), "tasks": tasks}
    return dict(checkpoint=resolved.name, checkpoint_path=str(resolved.path), **request)


def endpoint_spec(row: EndpointRow, settings: Settings) -> EndpointSpec:
    """The registration as the endpoint client's spec (the API key stays a variable's name,
    checked again against today's allow-list: nothing sends a variable it no longer admits)."""
    settings.check_endpoint_key(row.api_key_env)
    return EndpointSpec(base_url=row.base_url, served_model=row.served_model, tokenizer=row.tokenizer,
                        context_length=row.context_length, api_style=row.api_style, concurrency=row.concurrency,
                        timeout_s=row.timeout_s, max_retries=row.max_retries, api_key_env=row.api_key_env)


def endpoint_fingerprint(row: EndpointRow) -> str:
    """What identifies a served model's results (the leaderboard's key): URL and model name."""
    return served_identity(row.base_url, row.served_model)


@dataclass(frozen=True)
class RegisteredJudge:
    """A judge's registration (evaluators/judges.py): an endpoint's or a checkpoint's row."""

    kind: Literal["endpoint", "checkpoint"]
    row: EndpointRow | CheckpointRow


def registered_judge(store: Store, ref: str, where: str) -> RegisteredJudge:
    """The registration a judge option names (`name` or `name@identity`); InvalidRequest
    listing what is registered otherwise."""
    name, _ = split_ref(ref)
    try:
        return RegisteredJudge("endpoint", store.get_endpoint(name))
    except Missing:
        pass
    row = store.find_checkpoint(name)
    if row is not None:
        return RegisteredJudge("checkpoint", row)
    endpoints = ", ".join(e.name for e in store.list_endpoints()[:20]) or "none"
    checkpoints = ", ".join(c.name for c in store.list_checkpoints()[:20]) or "none"
    raise InvalidRequest(f"{where}.judge: {name!r} is neither a registered endpoint (registered: {endpoints}) nor a "
                         f"registered checkpoint (registered: {checkpoints}); {JUDGE_HOWTO}")


def check_judges(store: Store, settings: Settings, tasks: list[dict[str, Any]]) -> None:
    """Every task that needs a judge names one that answers now: a registered endpoint in chat
    style whose /v1/models answers, or a registered checkpoint whose files lie in the roots and
    which has a chat template. Its `judge` option becomes `name@identity` in place (the spec
    the job records: the configuration hash and the leaderboard row hold which model judged).
    InvalidRequest saying what is wrong and what to do (docs/protocols/judges.md)."""
    for i, task in enumerate(tasks):
        options = parse_task(task)
        where = f"tasks[{i}] ({options.task})"
        named = dict(options.graders())  # models besides the judge (HELMET's citation NLI): checked alike
        if options.needs_judge:
            problems = options.judge_problems()  # type: ignore[attr-defined]
            ref = options.judge_ref()
            if problems or ref is None:
                raise InvalidRequest(f"{where}: " + "; ".join(problems))
            named = {"judge": ref, **named}
        for field, ref in named.items():
            task[field] = _pinned_judge(store, settings, ref, f"{where}.{field}", where, unanswered)


def _pinned_judge(store: Store, settings: Settings, ref: str, at: str, where: str, unanswered: Any) -> str:
    """`name@identity` of the registered judge `ref` names, checked to answer chat messages now."""
    found = registered_judge(store, ref, where)
    row: Any = found.row
    if found.kind == "endpoint":
        if row.api_style != "chat":
            raise InvalidRequest(f"{at}: endpoint {row.name!r} is registered in {row.api_style} style; a "
                                 "judge is asked chat messages: register its server's chat API (api_style chat)")
        identity = endpoint_fingerprint(row)
        why = unanswered(endpoint_spec(row, settings))
        if why is not None:  # the detail is logged; the answer names no port or server error
            log.warning("judge endpoint %s (%s) does not answer: %s", row.name, row.base_url, why)
            raise InvalidRequest(f"{at}: endpoint {row.name!r} does not answer as an OpenAI-compatible "
                                 "server now; start its server (or register the judge again) and submit again")
    else:
        path = Path(row.path)
        identity = checkpoint_info(path, settings.roots).fingerprint
        if read_chat_template(path)[0] is None:
            raise InvalidRequest(f"{at}: checkpoint {row.name!r} has no chat template (chat_template.jinja, "
                                 "or tokenizer_config.json's 'chat_template'); a judge is asked chat messages: add "
                                 "the template or name another judge")
    try:
        check_pin(ref, identity)
    except EvaluatorError as e:
        raise InvalidRequest(f"{at}: {e}") from None
    return pinned_ref(row.name, identity)


def submit_to_endpoint(store: Store, settings: Settings, request: JobCreate,
                       dry_run: bool = False) -> tuple[JobRow | None, Cost]:
    """A job on a registered endpoint: what needs the weights (a RoPE override, an attention
    backend, diagnostics) and what the server cannot score (log-likelihood tasks where it
    returns no prompt logprobs) refused now, with the reason."""
    from evaluators.served import endpoint_refusals

    row = store.get_endpoint(request.endpoint)
    settings.check_endpoint_key(row.api_key_env)  # registered before the allow-list, or the list changed since
    tasks = validate_tasks(request, settings)
    check_judges(store, settings, tasks)
    problems = endpoint_refusals(tasks, row.capabilities, {"rope": request.rope, "backend": request.backend},
                                 row.api_style)
    problems += context_refusals(request, row.context_length, bool(row.tokenizer) and marks_thinking(row.tokenizer))
    if problems:
        raise InvalidRequest(f"cannot run on endpoint {row.name!r}: " + "; ".join(problems))
    cost = plan_job(list(request.tasks), settings, endpoint_fingerprint(row), model=endpoint_facts(row.tokenizer))
    check_cost(cost, settings)
    cost = with_resolution(cost, store, settings, endpoint_fingerprint(row), list(request.tasks))
    if dry_run:
        return None, cost
    suite = {**request.model_dump(mode="json", include=set(Suite.model_fields)), "tasks": tasks}
    return store.add_job(fingerprint=endpoint_fingerprint(row), checkpoint=row.name, checkpoint_path=row.base_url,
                         endpoint=row.name, **suite), cost


def context_refusals(suite: Suite, context: int, model_thinks: bool = False) -> list[str]:
    """One message per task whose longest sample (prompt and generated tokens, where its
    options fix them, and its thinking budget wherever thinking can be on) does not fit a served
    model's context: the server's limit is hard, and the run would record every such sample
    beyond the context and score it 0 (a job that "succeeds" at accuracy 0, issue #60)."""
    problems = []
    for i, spec in enumerate(suite.tasks):
        need = spec.context_needed()
        if need is not None and (why := _over_context(i, spec, need, context, model_thinks, "the served context")):
            problems.append(why)
    return problems


def _over_context(i: int, spec: TaskOptions, need: int, context: int, thinks: bool, what: str) -> str | None:
    """Why task i's longest sample (`need` tokens of prompt and answer) and its thinking budget
    do not fit `context` (None: they fit); the message names both budgets."""
    thinking = spec.thinking_tokens(thinks)
    if need + thinking <= context:
        return None
    if not thinking:
        return (f"tasks[{i}] ({spec.name}): its longest sample takes {need} tokens (its longest length, with the "
                f"tokens it generates where the length leaves them out), more than {what} of {context} tokens; ask "
                f"for lengths that fit in {context} tokens")
    answer = spec.max_new_tokens_option()
    budgets = f"max_new_tokens {answer} with " if answer is not None else ""
    setting = spec.thinking_setting()
    return (f"tasks[{i}] ({spec.name}): its longest sample takes {need + thinking} tokens: {need} of prompt and answer "
            f"({budgets}its longest length) plus its thinking_budget of {thinking} (thinking {setting}"
            f"{' on a model that thinks' if setting == 'default' else ''}), more than {what} of {context} tokens; "
            f"lower thinking_budget to at most {max(0, context - need)}, ask for shorter lengths or a smaller "
            "max_new_tokens, or set thinking off")


def submit(store: Store, settings: Settings, request: JobCreate, cluster_gpus: int | None = None,
           dry_run: bool = False, await_cluster: Callable[[], int | None] | None = None,
           ) -> tuple[JobRow | None, Cost]:
    """Validate, plan (`service/cost.py`: refused over LCTX_MAX_JOB_SECONDS) and queue; the row
    is committed when this returns. With `dry_run`, the plan alone, nothing queued (row None).
    `cluster_gpus`: what the executor's Ray reports (None: not known here). Where it is not known
    yet, `await_cluster` is asked once every check that does not depend on the cluster has
    passed (a bad request is refused before any wait); still unknown, the job is queued and
    checked against the resources when it is claimed (`check_resources`)."""
    if request.endpoint is not None:
        return submit_to_endpoint(store, settings, request, dry_run)
    resolved = resolve_checkpoint(store, settings, request.checkpoint, cluster_gpus)
    tasks = validate_suite(request, settings, cluster_gpus, resolved.path)
    check_judges(store, settings, tasks)
    if cluster_gpus is None and await_cluster is not None:
        cluster_gpus = await_cluster()
        if cluster_gpus is not None:
            check_resources(request.backend, resolved, settings, cluster_gpus)
    cost = plan_job(list(request.tasks), settings, resolved.fingerprint, cluster_gpus, checkpoint_facts(resolved.path))
    check_cost(cost, settings)
    cost = with_resolution(cost, store, settings, resolved.fingerprint, list(request.tasks))
    if dry_run:
        return None, cost
    return store.add_job(fingerprint=resolved.fingerprint, **job_fields(resolved, request, tasks)), cost


def check_resources(backend: str, checkpoint: ResolvedCheckpoint | None, settings: Settings, cluster_gpus: int) -> None:
    """What a job needs of the cluster, against what it has: the backend (`triton` needs a
    GPU) and the weights' memory at the dtype they load in there. At submission once the
    dispatcher has reported, and again when the executor claims the job (a job queued while
    the cluster was starting fails then, with the reason)."""
    check_backend(backend, settings, cluster_gpus)
    if checkpoint is not None:
        check_model_memory(checkpoint.parameters, checkpoint.dtype, settings, checkpoint.name, cluster_gpus)


def claimed_job_refusal(store: Store, settings: Settings, job: JobRow, cluster_gpus: int) -> None:
    """`check_resources` of a queued job (the executor's, when it claims it): InvalidRequest with
    the reason it cannot run on this cluster."""
    checkpoint = None
    if not job.endpoint:
        path = Path(job.checkpoint_path)
        row = store.checkpoint_by_path(str(path))
        parameters = row.parameters if row is not None and row.parameters else \
            checkpoint_info(path, settings.roots).parameters
        checkpoint = ResolvedCheckpoint(job.checkpoint, path, job.fingerprint, parameters, _dtype_of(path, job.checkpoint))
    check_resources(job.backend, checkpoint, settings, cluster_gpus)


def data_warnings(tasks: list[dict[str, Any]], settings: Settings) -> list[str]:
    """What is wrong with a job's data that does not stop it (files from before a benchmark's
    fix: `TaskOptions.data_warnings`, cheap checks of the files the tasks will read), one line
    per finding naming the task, server paths made client paths. The job is accepted and its
    submission answered with these; the run's results say what it found (`data.warnings`)."""
    data_dir = settings.data_dir.absolute() if settings.data_dir else None
    out = []
    for i, task in enumerate(tasks):
        model = task_options().get(task.get("name", ""))
        if model is None:
            continue
        options = model.model_validate({k: v for k, v in task.items() if k != "name"})
        out += [client_text(f"tasks[{i}] ({task['name']}): {w}", settings) for w in options.data_warnings(data_dir)]
    return out


def suite_hash(suite: Suite) -> str:
    """Stable identity of a suite: the same tasks and options hash the same."""
    canonical = json.dumps(suite.model_dump(mode="json", exclude_none=True, exclude={"priority"}), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
