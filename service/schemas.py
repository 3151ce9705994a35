"""Request and response models of the API, shared with the CLI client."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    computed_field,
    create_model,
    field_serializer,
    model_validator,
)

from checkpoints.attention.backend import Backend as AttentionBackend
from checkpoints.thinking import Thinking
from clients.endpoint.options import NO_NUL_PATTERN, EndpointOptions
from evaluators.options import TaskOptions, did_you_mean
from evaluators.registry import Task, registry
from evaluators.results import ErrorBar
from service.core.names import NAME_PATTERN
from service.core.status import JobStatus
from service.labels import job_rope_label, own_rope_label, rope_label

# Patterns of text that reaches the database (PostgreSQL refuses NUL characters in text).
JOB_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
TASK_PATTERN = r"^[A-Za-z0-9_.#/-]{1,64}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN,
                            description="letters, digits, '_', '.', '-'; at most 128 characters")]
Backend = Literal[tuple(b.value for b in AttentionBackend)]
Status = Literal[tuple(s.value for s in JobStatus)]  # the enum's strings, as the API has always listed them
Rope = Annotated[str | dict[str, Any] | None, Field(
    description="RoPE override: 'yarn:4', 'ntk:8', 'none', or a dict such as {'rope_type': 'yarn', 'factor': 4}")]


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    @field_serializer("*", when_used="json-unless-none")
    def _utc(self, value: Any) -> Any:
        """Stored timestamps are naive UTC; answer with the zone spelled out."""
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC).isoformat()
        return value


class ErrorOut(BaseModel):
    detail: str | list[Any]
    code: str = "invalid"


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for the refusals an operation can answer with (all ErrorOut)."""
    what = {400: "the body is not JSON", 401: "missing or wrong bearer token",
            403: "a path outside the configured roots", 404: "no such resource (or a path that does not exist)",
            409: "the resource's state does not allow it (a name taken, a job not ended)",
            410: "pruned by the retention policy (a job's samples or plots; its results are kept)",
            413: "the body is larger than LCTX_MAX_BODY_MB", 415: "the body is not application/json",
            422: "invalid request: the message names the field and what is allowed",
            503: "the database or Ray is not ready; retry shortly"}
    return {s: {"model": ErrorOut, "description": what[s]} for s in statuses}


class _Task:
    """What every task model of the request adds to its evaluator's option model."""

    name: str

    def options(self) -> dict[str, Any]:
        """The task as the job records it: its name and every option, defaults filled in."""
        assert isinstance(self, TaskOptions)
        return self.as_spec()


def _task_model(name: str, task: Task) -> type[TaskOptions]:
    """The request model of one task: the evaluator's option model plus `name`."""
    model = create_model(f"{name.title().replace('_', '')}Task", __base__=(task.options, _Task),
                         __doc__=f"{name}: {task.summary}. Unknown options are refused.",
                         name=(Literal[name], Field(examples=[name])))
    return model


TASK_MODELS: dict[str, type[TaskOptions]] = {name: _task_model(name, task) for name, task in registry().items()}


def _task_name(value: Any) -> str | None:
    return value.get("name") if isinstance(value, dict) else getattr(value, "name", None)


# One evaluation task, told apart by `name`: OpenAPI lists each task's options, and a bad
# option is a 422 whose `loc` names the task and the field (body.tasks.0.passkey.lengths.0).
TaskSpec = Annotated[
    Union[tuple(Annotated[m, Tag(n)] for n, m in TASK_MODELS.items())],  # noqa: UP007 - built from a tuple
    Discriminator(_task_name, custom_error_type="unknown_task",
                  custom_error_message=f"unknown task; available: {', '.join(sorted(TASK_MODELS))}"),
]


class _Strict(BaseModel):
    """A request body: a misspelt field (`rop` for `rope`) is refused, never ignored."""

    model_config = ConfigDict(extra="forbid")


class Suite(_Strict):
    """What a job runs: shared by jobs and schedules."""

    tasks: Annotated[list[TaskSpec], Field(min_length=1, max_length=64)]
    rope: Rope = None
    backend: Backend = Field("auto", description="attention backend: auto (Triton on GPU, the chunked PyTorch "
                             "path on CPU), reference, torch or triton")
    priority: Annotated[int, Field(ge=-1000, le=1000)] = Field(0, description="queued jobs with a higher priority "
                                                               "run first (-1000..1000)")
    thinking: Thinking | None = Field(None, description="a reasoning model's thinking (on, off, default, low, medium, "
                                      "high) for every task that generates answers and sets none of its own")

    @model_validator(mode="after")
    def _thinking_for_every_task(self) -> Suite:
        """The job's thinking setting reaches each task that did not set its own (the tasks
        keep it: a task is what the hash, the records and the leaderboard read)."""
        if self.thinking is not None:
            for task in self.tasks:
                if "thinking" in type(task).model_fields and "thinking" not in task.model_fields_set:
                    task.thinking = self.thinking
        return self

    @field_serializer("tasks")
    def _as_given(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """Tasks as they were asked for (defaults belong to the evaluator's version), so a
        stored suite and its hash do not change when a default does."""
        return [t.model_dump(mode="json", exclude_unset=True, exclude_none=True) for t in tasks]


class JobCreate(Suite):
    checkpoint: Annotated[str | None, Field(min_length=1, max_length=4096, pattern=NO_NUL_PATTERN,
                                            description="registered checkpoint name, or a path inside the "
                                                        "checkpoint roots")] = None
    endpoint: Annotated[Name | None, Field(description="a registered endpoint (a served model) in place of a "
                                                       "checkpoint")] = None

    @model_validator(mode="after")
    def _one_model(self) -> JobCreate:
        if (self.checkpoint is None) == (self.endpoint is None):
            raise ValueError("give either checkpoint (a registered name or a path) or endpoint (a registered "
                             "endpoint's name), not both and not neither")
        return self

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "checkpoint": "demo-tda",
        "tasks": [{"name": "passkey", "lengths": [256, 512, 1024], "trials": 100},
                  {"name": "longbench", "datasets": ["qasper", "hotpotqa"]}],
        "rope": "yarn:4", "backend": "auto"}]})


class TaskProgress(BaseModel):
    """One task of a job: samples done of its planned total (known from submission), prompt
    tokens prefilled in this run (a batch prefills before its first sample finishes), the
    measured prefill speed and the estimated seconds left."""

    done: int = 0
    total: int = 0
    tokens: int = Field(0, description="prompt tokens prefilled by the current run of the job")
    planned_tokens: int | None = Field(None, description="prompt tokens the task's samples read, when its options "
                                       "say (passkey, needle, RULER)")
    tokens_per_s: float | None = Field(None, description="prefill speed measured in the current run")
    generated: int = Field(0, description="tokens generated by the current run of the job (the ETA weighs them "
                           "apart from prompt tokens: a batch decodes after its prompts are read)")
    eta_s: float | None = Field(None, description="seconds left for this task: the prompt and generated tokens "
                                "its plan has left at the time each kind took so far in this run, else its samples "
                                "left at the time per sample (None: not measured yet)")


class TaskPlan(BaseModel):
    task: str = Field(description="tasks[i] (name)")
    samples: int | None = Field(description="samples its options plan (None: its data decides)")
    prompt_tokens: int | None = Field(description="prompt tokens to prefill, a judge's prompts included (estimated "
                                      "from the data files where the options leave them to it; None: not known)")
    generated_tokens: int | None = Field(description="most tokens its samples generate: answers, think blocks "
                                         "where thinking can be on, and a judge's verdicts and think blocks")
    seconds: float | None = Field(description="estimated seconds on this service's hardware")
    resolvable: float | None = Field(None, description="the smallest difference between two such runs its samples "
                                     "per length resolve at 95%, in its headline's unit (the interval's half-width)")
    resolution: str = Field("", description="how `resolvable` was reckoned: the variance an earlier job of the "
                                            "checkpoint showed, or p(1-p) at p = 0.5")


class JobPlan(BaseModel):
    """A job's cost before it runs: its tasks planned into samples and tokens, and the time they
    take on this service's hardware (`basis` says from what: measured speed or a stated rule)."""

    tasks: list[TaskPlan]
    samples: int
    prompt_tokens: int
    generated_tokens: int
    seconds: float | None = Field(description="estimated seconds of the tasks whose tokens are known")
    basis: str = Field(description="how the seconds were estimated")
    warnings: list[str] = Field(description="a job estimated over 10 minutes, tasks whose cost is unknown")
    queued: bool = Field(False, description="false for a dry run (`?dry_run=true`): nothing was queued")


class JobState(_Out):
    """What the service adds to a job's request: where it stands."""

    id: str
    checkpoint: str
    checkpoint_path: str
    fingerprint: str
    status: Status
    progress: dict[str, TaskProgress]
    error: str | None
    attempts: int
    schedule: str | None
    plan: JobPlan | None = Field(None, description="in the submission's answer: the job's samples, tokens and "
                                 "estimated time (`GET` answers leave it out)")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None
    endpoint: str | None = Field(None, description="the registered endpoint the job ran on (None: a checkpoint)")
    disk: dict[str, Any] | None = Field(None, description=(
        "in `GET /v1/jobs/{id}` of an ended job: the bytes its results take, as {total, samples, plots, results, "
        "tasks: {key: {samples, plots, results}}} (samples: per-sample records, what retention prunes)"))
    ran_elsewhere: bool = Field(False, description="the job was run outside this service (`lctx eval`) and its "
                                "results recorded here with `lctx upload`")
    warnings: list[str] = Field(default_factory=list, description="what is wrong with the job's data but does not "
                                "stop it (files from before a benchmark's fix), found at submission: answered by the "
                                "submission only (empty elsewhere); the results' data.warnings say what the run found")

    @computed_field(description="the RoPE setting as one label: 'checkpoint', 'none', 'yarn:4 beta_fast=16'; "
                                "\"server's\" for a job on a served model")
    def rope_label(self) -> str:
        return job_rope_label(getattr(self, "rope", None), self.endpoint)


def _suite_out() -> dict[str, Any]:
    """Every field of the request's suite, as a job answers it: declared once, in `Suite`
    (a field added there is stored with the job and answered here with no other edit).
    Tasks are answered as recorded: every option, defaults filled in."""
    out: dict[str, Any] = {}
    for name, field in Suite.model_fields.items():
        annotation = list[dict[str, Any]] if name == "tasks" else field.annotation
        out[name] = (annotation, Field(field.default if not field.is_required() else ...,
                                       description=field.description))
    return out


JobOut = create_model("JobOut", __base__=JobState, __doc__="A job: its request and where it stands.",
                      **_suite_out())


class JobList(BaseModel):
    items: list[JobOut]
    total: int
    limit: int
    offset: int
    by_status: dict[str, int] = Field(default_factory=dict, description="jobs per status among all the filters "
                                      "select, not only the page of items")


class CheckpointCreate(_Strict):
    name: Name
    path: Annotated[str, Field(min_length=1, max_length=4096, pattern=NO_NUL_PATTERN, examples=["/models/demo-tda"])]


class CheckpointPull(_Strict):
    """Bring a checkpoint into the first checkpoint root and register it: from the Hugging
    Face hub (`hub`, `revision`) or from a GGUF file on the server (`gguf`), never both."""

    name: Name
    hub: Annotated[str | None, Field(min_length=3, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$",
                                     description="hub repository id, owner/name",
                                     examples=["HuggingFaceTB/SmolLM2-135M-Instruct"])] = None
    revision: Annotated[str, Field(min_length=1, max_length=200, pattern=NO_NUL_PATTERN,
                                   description="branch, tag or commit of the hub repository")] = "main"
    gguf: Annotated[str | None, Field(min_length=1, max_length=4096, pattern=NO_NUL_PATTERN,
                                      description="a .gguf file inside the checkpoint roots or the data directory "
                                      "(relative: to the first checkpoint root), dequantised to float32")] = None
    path: Annotated[str | None, Field(min_length=1, max_length=4096, pattern=NO_NUL_PATTERN,
                                      description="folder to write, inside the checkpoint roots (default: <first "
                                      "root>/<name>)")] = None

    @model_validator(mode="after")
    def _one_source(self) -> CheckpointPull:
        if (self.hub is None) == (self.gguf is None):
            raise ValueError("give exactly one of hub (a repository id) or gguf (a file)")
        return self


class CheckpointOut(_Out):
    name: str
    path: str
    fingerprint: str
    variant: str
    parameters: int
    created_at: datetime
    family: str | None = Field(None, description="the config's format: 'lctx' or the Hugging Face model_type it "
                               "was read from (None: config.json is no longer readable)")
    rope: dict[str, Any] | None = Field(None, description="the checkpoint's own RoPE: rope_theta and its scaling")
    context_length: int | None = Field(None, description="max_position_embeddings of its config")
    chat_template: str | None = Field(None, description="the file its chat template is read from "
                                      "(chat_template.jinja or tokenizer_config.json); None: it has none")
    source: dict[str, Any] | None = Field(None, description="where `lctx pull` brought it from (lctx_source.json): "
                                          "hub repository, revision and commit, or GGUF file and sha256")

    @computed_field(description="its own RoPE as one label: 'yarn:4 (θ=10000)'")
    def rope_label(self) -> str | None:
        return own_rope_label(self.rope)


class EndpointCreate(EndpointOptions):
    """A served model: an OpenAI-compatible server's API root and the model name it lists;
    how lctx talks to it is `EndpointOptions` (declared once, with the CLI's flags)."""

    name: Name
    base_url: Annotated[str, Field(min_length=1, max_length=2048, pattern=NO_NUL_PATTERN,
                                   examples=["http://127.0.0.1:8001/v1"],
                                   description="API root ending in /v1; its host must be in LCTX_ENDPOINT_HOSTS")]


class EndpointOut(_Out):
    name: str
    base_url: str
    served_model: str
    api_style: str
    tokenizer: str | None
    context_length: int
    concurrency: int
    timeout_s: float
    max_retries: int
    api_key_env: str | None
    capabilities: dict[str, Any] = Field(description="what the server said at registration: models, token_prompts, "
                                         "prompt_logprobs, prompt_scoring, tokenizer_endpoints, listed, "
                                         "max_model_len, server_version")
    created_at: datetime


WebhookEvent = Literal["finished", "failed", "regression"]


class Webhook(_Strict):
    """Where lctx POSTs a small JSON (with a Slack-compatible `text`) when a job finishes or fails
    or a regression is found (service/notify.py): a URL on the hosts endpoints may be on
    (LCTX_ENDPOINT_HOSTS), an optional secret sent in a header from a variable on the endpoint
    keys' allow-list (never the service's own settings)."""

    url: Annotated[str, Field(min_length=1, max_length=2048, pattern=NO_NUL_PATTERN,
                              examples=["https://hooks.slack.com/services/T000/B000/XXXX"])]
    events: list[WebhookEvent] = Field(default_factory=lambda: ["finished", "failed", "regression"],
                                       min_length=1, max_length=3)
    secret_env: Annotated[str | None, Field(max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                            description="variable holding a secret sent with each POST")] = None
    secret_header: Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z0-9-]+$")] = "Authorization"


class Alerts(_Strict):
    """What a schedule watches its jobs for: regressions (each new checkpoint of a lineage against
    the previous one, and against `baseline` where pinned: a drop whose paired 95% interval
    excludes zero and which is at least `threshold`, in the column's unit) and who is told."""

    threshold: float = Field(0.0, ge=0, description="smallest drop that counts (e.g. 0.05 for 5 points of a "
                                                    "fraction); beyond its interval in any case")
    baseline: Annotated[str | None, Field(pattern=JOB_ID_PATTERN, description="a job every new checkpoint is "
                                                                               "compared with too")] = None
    webhooks: list[Webhook] = Field(default_factory=list, max_length=8)


class ScheduleCreate(_Strict):
    name: Name
    cron: Annotated[str, Field(min_length=1, max_length=128, examples=["0 2 * * *"])]
    watch: Annotated[list[Annotated[str, Field(min_length=1, max_length=4096, pattern=NO_NUL_PATTERN)]],
                     Field(min_length=1, max_length=32)]
    suite: Suite
    alerts: Alerts | None = Field(None, description="regressions and webhooks (default: regressions found and "
                                                    "listed at threshold 0, no webhook)")


class UploadCreate(_Strict):
    """A run made elsewhere (`lctx eval --out OUT`), recorded as a job of a registered checkpoint
    (`lctx upload OUT`): OUT/results.json and each task's samples.jsonl, as the run wrote them."""

    checkpoint: Name = Field(description="the registered checkpoint the run evaluated")
    fingerprint: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description=(
        "the fingerprint of the weights the run loaded (OUT/checkpoint.json): it must be the registered "
        "checkpoint's"))]
    results: dict[str, Any] = Field(description="OUT/results.json as `lctx eval` wrote it")
    samples: dict[str, Annotated[str, Field(max_length=1 << 30)]] = Field(
        description="each task key's samples.jsonl (OUT/<task>/samples.jsonl), as text")
    rope: Rope = Field(None, description="the RoPE override the run used, for a results.json that does not record "
                       "it (written before `lctx upload` existed); default: the one it records")


class ScheduleOut(_Out):
    name: str
    cron: str
    watch: list[str]
    suite: dict[str, Any]
    plan: JobPlan | None = Field(None, description="in the creation's answer: what each job of the suite costs, "
                                 "at the speed measured over any checkpoint (or the rule)")
    next_run_at: datetime
    last_run_at: datetime | None
    created_at: datetime
    alerts: dict[str, Any] | None = Field(None, description="regression threshold, pinned baseline and webhooks "
                                                           "(each webhook's URL shown by its host only)")

    @computed_field(description="the suite's RoPE setting as one label")
    def rope_label(self) -> str:
        return rope_label(self.suite.get("rope"))


class ScheduleCheckpoint(BaseModel):
    """One checkpoint folder a schedule's run found: the job it submitted, or why it skipped it."""

    folder: str = Field(description="the checkpoint's folder, relative to its checkpoint root")
    checkpoint: str | None = Field(None, description="its registered name, where it got that far")
    job: str | None = Field(None, description="the job submitted for it (None: skipped)")
    skipped: str | None = Field(None, description="why no job was submitted: the same fingerprint already run with "
                                "this suite (by this schedule or another), or what a job of it would be refused for")
    seconds: float | None = Field(None, description="the submitted job's estimated seconds on this service's "
                                  "hardware (service/cost.py; None: skipped, or its data decides)")
    basis: str | None = Field(None, description="how the job's seconds were estimated")


class ScheduleRun(BaseModel):
    """What `POST /v1/schedules/{name}/run` did: each checkpoint folder its watch folders hold."""

    schedule: str
    checkpoints: list[ScheduleCheckpoint]
    submitted: int = Field(description="jobs submitted by this run")
    seconds: float | None = Field(None, description="the estimated seconds of the jobs this run submitted together: "
                                  "what the schedule costs each time it fires (a night, for a nightly cron)")
    note: str | None = Field(None, description="why nothing was found, when nothing was")


class LeaderboardRow(_Out):
    checkpoint: str
    fingerprint: str
    rope: str = Field(description="RoPE setting: 'checkpoint' (its own), 'none', 'yarn:4', ...")
    backend: str
    thinking: str | None = Field(None, description="a reasoning model's thinking setting (on, off, default, "
                                 "low/medium/high): an axis beside RoPE scaling; None for a task without one")
    options: dict[str, Any] = Field(description="the task options that change scores (not those that only "
                                    "select samples, such as lengths)")
    data_revision: str | None = Field(None, description="the data the results ran on: 12 hex digits of the sha256 "
                                      "of the files' hashes (and the hub revisions read without files); results "
                                      "on other data are another row. None: the task reads no file, or its "
                                      "results predate the record")
    setting: str = Field(description="rope, backend, thinking, the options that differ from their defaults and the "
                                     "data revision (`data=...`), as one label")
    job: str
    finished_at: datetime | None
    trained_context: int | None = Field(None, description="the context the checkpoint was trained for (L0)")
    beyond_context: list[int] = Field(default_factory=list, description="lengths run beyond the context the model "
                                      "reaches (trained, or as far as its RoPE scaling is meant to reach): scores "
                                      "there measure extrapolation")
    values: dict[str, float | None]
    errors: dict[str, float | None] = Field(default_factory=dict, description="each value's standard error (None: "
                                            "none applies, or stored before lctx kept errors); its interval and "
                                            "method are in the job's results")


class LeaderboardColumn(BaseModel):
    name: str
    higher_is_better: bool | None = Field(description="None: a measurement, not a score")
    unit: str
    kind: Literal["metric", "point"] = Field(description="a metric of the result, or a point of one of its series")
    series: str | None = Field(None, description="a point's series label (`accuracy`, `accuracy.depth=50`)")
    axis: str | None = Field(None, description="a point's axis (length, dataset, depth, ...)")
    key: str | None = Field(None, description="a point's key along its axis (`1024`, `qasper`)")


class Leaderboard(BaseModel):
    task: str
    columns: list[str]
    headline: str | None = Field(None, description="the column rows are sorted by, best first")
    column_info: list[LeaderboardColumn] = Field(default_factory=list, description="per column, in order")
    total: int = Field(0, description=(
        "rows that match the filters (the page holds `limit` at most). Exact for the whole view and for one of "
        "`lineage`, `schedule`, `rope`, `backend`, `thinking` alone (counts the service keeps); for other "
        "filters (a name, a prefix, a time range, several at once) counted up to 1,000: beyond, `total` is "
        "1,000 and `total_exact` false (at least that many match; page on while pages are full)"))
    total_exact: bool = Field(True, description="false: `total` is a lower bound (more rows match)")
    limit: int = Field(100, description="rows per page")
    offset: int = Field(0, description="rows skipped before this page")
    rows: list[LeaderboardRow]


class JobStanding(BaseModel):
    task: str = Field(description="a task key of the job's results (`passkey`, `longbench`)")
    headline: str | None = Field(None, description="the column its leaderboard sorts by")
    columns: list[str] = Field(description="its stored columns: metrics, then series points")
    column_info: list[LeaderboardColumn] = Field(description="per column, in order")
    row: LeaderboardRow = Field(description="the row as the leaderboard and comparisons show it")


class JobStandings(BaseModel):
    job: str
    tasks: list[JobStanding] = Field(description="the job's stored rows, one per task key of its results (none "
                                     "unless it succeeded: rows are stored when a job succeeds)")


class SamplePrompt(BaseModel):
    task: str
    id: str
    prompt: str = Field(description="the prompt as the model read it, rebuilt from the sample's record")
    needle: str = Field(description="the text hidden in the prompt that the answer must retrieve")
    needle_start: int = Field(description="character offset of the needle in the prompt (-1: not found in it)")


class ColumnDifference(BaseModel):
    """A column's difference from the baseline with its uncertainty (service/pairing.py)."""

    difference: float
    stderr: float | None = Field(description="standard error of the difference (None: a value without one)")
    low: float | None = Field(description="95% interval of the difference")
    high: float | None
    paired: bool = Field(description="over the samples both jobs ran, matched by id; false: the two values' errors "
                                     "combined as independent")
    n: int | None = Field(description="samples paired (or the smaller run's)")
    method: str = Field(description="clt / clustered (paired), unpaired, none")
    clusters: int | None = None
    excludes_zero: bool | None = Field(description="the interval excludes zero: a difference beyond the noise")
    note: str = ""


class ComparisonRow(LeaderboardRow):
    difference: dict[str, float | None] = Field(description="value minus the baseline's (the first job), per column")
    error_bars: dict[str, ErrorBar | None] = Field(default_factory=dict, description="each value's standard error and "
                                               "95% interval, read from the job's results (None: results written "
                                               "before errors, or gone)")
    uncertainty: dict[str, ColumnDifference] = Field(default_factory=dict, description="each difference with its "
                                                     "interval (empty for the baseline)")
    pairing: str = Field("", description="how the differences were paired with the baseline, or why not")


class Comparison(BaseModel):
    task: str
    baseline: str = Field(description="the job the differences are taken against")
    columns: list[str]
    column_info: list[LeaderboardColumn]
    rows: list[ComparisonRow]


def validation_hint(error: dict[str, Any], path: str) -> str:
    """A 422's message with a did-you-mean for a misspelt option, field or task name: `trails` ->
    `trials`, `paskey` -> `passkey`, `checkpont` -> `checkpoint`."""
    message = str(error.get("msg", ""))
    loc = [str(p) for p in error.get("loc", ())]
    if error.get("type") == "unknown_task":
        name = error.get("input", {}).get("name") if isinstance(error.get("input"), dict) else None
        return message + (did_you_mean(str(name), TASK_MODELS) if name is not None else "")
    if error.get("type") != "extra_forbidden" or not loc:
        return message
    field = loc[-1]
    if len(loc) >= 4 and loc[-4] == "tasks" and loc[-2] in TASK_MODELS:  # body.tasks.0.<task>.<option>
        model: type[BaseModel] | None = TASK_MODELS[loc[-2]]
    else:
        body = {"/v1/jobs": JobCreate, "/v1/schedules": ScheduleCreate, "/v1/checkpoints": CheckpointCreate}
        model = next((m for prefix, m in body.items() if path.startswith(prefix)), None)
        if model is not None and loc[1:-1] == ["suite"]:
            model = Suite
        elif loc[1:-1]:  # somewhere deeper: no model to suggest from
            model = None
    if model is None:
        return message
    hint = did_you_mean(field, [f for f in model.model_fields if f != "name" or model not in TASK_MODELS.values()])
    return f"{message}: {field!r}{hint}"


class RegressionOut(_Out):
    """A drop of one column between a lineage's new checkpoint and the job it is compared with."""

    id: int
    job_id: str
    baseline_job_id: str
    against: str = Field(description="previous (the lineage's previous checkpoint) or pinned (the schedule's baseline)")
    schedule: str | None
    lineage: str | None
    checkpoint: str
    task: str
    column: str
    value: float
    baseline_value: float
    difference: float
    low: float = Field(description="95% interval of the paired difference")
    high: float
    paired: bool
    threshold: float
    created_at: datetime
