"""The one module of helpers the tests share (a test file never imports another test
file): tiny real checkpoints (our format, a variant's model), reading typed results,
settings in a temp dir, a PostgreSQL 15 on loopback, a real uvicorn server in a thread,
`transformers serve` on loopback (a real OpenAI-compatible server), stand-ins answering as vLLM
and SGLang do (their documented shapes, numbers by transformers),
lm-eval task YAMLs, and results.json entries in the layouts written before the typed
result contract."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path

import httpx
import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from checkpoints.config import AttentionConfig, ModelConfig
from checkpoints.loading import LoadedModel, load_model, save_model
from checkpoints.model import Decoder
from checkpoints.tokenizer import ByteTokenizer
from evaluators.results import TaskResult
from service.core.layout import job_results, task_path
from service.core.settings import Settings
from service.standings import record_results

PG_BIN = Path("/usr/local/bin")

# RoPE cases: a head size, an original context L0 and long/short factors of LongRoPE.
HEAD_DIM = 32
L0 = 64
LONG = [1.0 + 0.5 * i for i in range(HEAD_DIM // 2)]
SHORT = [1.0 + 0.05 * i for i in range(HEAD_DIM // 2)]

# Every rope type transformers implements, as a v5 `rope_parameters` dict.
HF_CASES = {
    "default": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0},
    "yarn_mscale": {"rope_type": "yarn", "factor": 8.0, "mscale": 0.707, "mscale_all_dim": 1.0,
                    "original_max_position_embeddings": L0},
    "yarn_untruncated": {"rope_type": "yarn", "factor": 4.0, "truncate": False, "beta_fast": 16.0,
                         "original_max_position_embeddings": L0},
    "yarn_attention_factor": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.5,
                              "original_max_position_embeddings": L0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": L0},
    "longrope": {"rope_type": "longrope", "long_factor": LONG, "short_factor": SHORT,
                 "original_max_position_embeddings": L0},
}


def tiny_checkpoint(path: Path, seed: int = 0, **config: object) -> Path:
    """A tiny random decoder saved in our own format (config, safetensors, byte tokenizer);
    `config` overrides ModelConfig fields."""
    torch.manual_seed(seed)
    fields = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
                  vocab_size=259)
    fields.update(config)
    return save_model(Decoder(ModelConfig(**fields)), path, ByteTokenizer())


# Tests that kill a worker mid-unit decode one sample at a time: its records then come a whole
# sample apart (decoded together, a unit's records land within milliseconds, and the kill
# could come after the last, finding the unit finished).
KILL_MID_UNIT_BATCH = 1


def new_postgres_database(server_url: str, prefix: str) -> str:
    """The URL of a new, empty database `<prefix>_<random>` on the PostgreSQL server at `server_url`
    (the session's `postgres_url`), for a test that needs a database of its own."""
    import uuid

    from sqlalchemy import create_engine, make_url, text

    server = make_url(server_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return server.set(database=name).render_as_string(hide_password=False)


def old_home(settings: Settings, jobs: list[dict], revision: str = "0006") -> None:
    """A home as an lctx at schema `revision` (before 0007 stored leaderboard rows) left it: its
    database made by that revision's own migrations (Alembic up to `revision`, nothing newer), each
    job's row as that revision's store wrote it (its columns, by SQL) and its results.json. `jobs`:
    dicts of id, checkpoint, checkpoint_path, fingerprint, tasks, finished_at, results (the results
    document's task entries) and optionally rope, backend, schedule, status (default succeeded)."""
    from alembic import command
    from sqlalchemy import create_engine, text

    from service.store.db import _alembic

    config, _ = _alembic()
    engine = create_engine(settings.database)
    insert = text(
        "INSERT INTO jobs (id, checkpoint, checkpoint_path, fingerprint, request, task_names, priority, status, "
        "progress, attempts, owner, schedule, created_at, started_at, finished_at, duration_s) VALUES (:id, :checkpoint, "
        ":checkpoint_path, :fingerprint, :request, :task_names, 0, :status, :progress, 1, NULL, :schedule, :created, "
        ":started, :finished_at, 60.0)")
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
            rows = []
            for job in jobs:
                tasks = job["tasks"]
                rows.append({
                    "id": job["id"], "checkpoint": job["checkpoint"], "checkpoint_path": job["checkpoint_path"],
                    "fingerprint": job["fingerprint"], "status": job.get("status", "succeeded"),
                    "request": json.dumps({"tasks": tasks, "rope": job.get("rope"), "backend": job.get("backend", "auto"),
                                           "priority": 0}),
                    "task_names": "," + ",".join(t["name"] for t in tasks) + ",",
                    "progress": json.dumps({t["name"]: {"done": 20, "total": 20} for t in tasks}),
                    "schedule": job.get("schedule"), "finished_at": job["finished_at"],
                    "created": job["finished_at"] - timedelta(minutes=2),
                    "started": job["finished_at"] - timedelta(minutes=1)})
            for i in range(0, len(rows), 5000):
                conn.execute(insert, rows[i:i + 5000])
    finally:
        config.attributes.pop("connection", None)
        engine.dispose()
    for job in jobs:
        path = job_results(settings, job["id"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"job": job["id"], "results": job["results"]}))


def make_settings(tmp: Path, **overrides: object) -> Settings:
    fields = dict(home=tmp / "var", checkpoint_roots=[tmp / "models"], executor=False, scheduler=False,
                  poll_interval=0.1)
    unknown = set(overrides) - set(Settings.model_fields)
    assert not unknown, f"Settings has no field {sorted(unknown)}"  # it would ignore them silently
    fields.update(overrides)
    settings = Settings(**fields)
    settings.prepare()
    return settings


def store_results(settings: Settings, store: object, job_id: str, results: dict) -> None:
    """A succeeded job's results: its results.json written and its leaderboard rows stored, as
    its coordinator leaves them (`results`: the document's task entries by key)."""
    from checkpoints.jsonfiles import write_json_atomic

    path = job_results(settings, job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"job": job_id, "results": results})
    record_results(settings, store, job_id, results)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadServer:
    """uvicorn serving an app on a loopback port, in a thread of the test process."""

    def __init__(self, app: object) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_job(client: httpx.Client, job_id: str, timeout: float = 90.0) -> dict:
    def done() -> dict | None:
        job = client.get(f"/v1/jobs/{job_id}").json()
        return job if job["status"] in ("succeeded", "failed", "cancelled") else None

    return wait_for(done, timeout, 0.2, f"job {job_id} to end")


class Postgres:
    """A throw-away PostgreSQL cluster on a loopback port in a temp dir. Postgres refuses
    to run as root, so as root it runs as the `postgres` (or `nobody`) user."""

    def __init__(self) -> None:
        # Directly under /tmp: pytest's own temp dirs are private to root.
        self.dir = Path(tempfile.mkdtemp(prefix="lctx-pg-"))
        self.port = free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = "postgres" if _user_exists("postgres") else "nobody"
            self.prefix = ["runuser", "-u", user, "--"]
            shutil.chown(self.dir, user)
        self.url = f"postgresql+psycopg://lctx@127.0.0.1:{self.port}/postgres"

    def run(self, *args: str) -> None:
        subprocess.run([*self.prefix, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> Postgres:
        self.run(str(PG_BIN / "initdb"), "-D", str(self.dir / "data"), "-U", "lctx", "-A", "trust", "--no-sync")
        return self.start_again()

    def start_again(self) -> Postgres:
        """Start the server on its data (after a stop: a restart on the same port)."""
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -F"
        self.run(str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-o", opts, "-l",
                 str(self.dir / "log"), "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        try:
            subprocess.run([*self.prefix, str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate",
                            "-w", "stop"], capture_output=True, timeout=120)  # fails when already stopped
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def ruler_draw_threads(monkeypatch) -> list[str]:
    """The threads that draw RULER streams from now on (`generate_cached` observed, then run as
    before): what a draw-ahead test reads to see one draw, on `lctx-draw`."""
    import evaluators.ruler.evaluator as ruler_evaluator

    threads: list[str] = []
    generate = ruler_evaluator.generate_cached

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return generate(*args, **kwargs)

    monkeypatch.setattr(ruler_evaluator, "generate_cached", spy)
    return threads


def tiny_model(path: Path, seed: int = 0, **config: object) -> LoadedModel:
    """`tiny_checkpoint`, loaded."""
    return load_model(tiny_checkpoint(path, seed, **config))


# A small chat template (roles as tags) for tiny checkpoints that must render chat messages.
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def chat_checkpoint(path: Path, seed: int = 0, **config: object) -> Path:
    """`tiny_checkpoint` with a chat template beside it (chat_template.jinja, as transformers keeps one)."""
    tiny_checkpoint(path, seed, **config)
    (path / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return path


AA_LCR_COLUMNS = ["", "document_category", "document_set_id", "question_id", "question", "answer",
                  "data_source_filenames", "data_source_urls", "input_tokens"]


def aa_lcr_files(data: Path, long_set_chars: int = 2000) -> Path:
    """Crafted AA-LCR files in the card's layout (never the real data): <data>/aa_lcr/AA-LCR_Dataset.csv
    with the card's columns (an unnamed index first) and the documents in lcr/<category>/<set>/. Question
    7 names its two documents b.txt;a.txt, the reverse of their names' order; question 9's one document
    is `long_set_chars` characters (beyond a small model's context). Returns <data>/aa_lcr."""
    import csv

    root = data / "aa_lcr"
    legal, academia = root / "lcr" / "Legal" / "legal_lease", root / "lcr" / "Academia" / "ac_long"
    legal.mkdir(parents=True, exist_ok=True)
    academia.mkdir(parents=True, exist_ok=True)
    (legal / "a.txt").write_text("Lease A: the tenant is Ada.")
    (legal / "b.txt").write_text("Lease B: the monthly fee is 7 euros.")
    (academia / "paper.txt").write_text(("The study measured nothing. " * 200)[:long_set_chars])
    with (root / "AA-LCR_Dataset.csv").open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(AA_LCR_COLUMNS)
        writer.writerow([0, "Legal", "legal_lease", 7, "Who pays the monthly fee, and how much?", "Ada; 7 euros",
                         "b.txt;a.txt", "https://example.org/b;https://example.org/a", 78])  # cl100k: the card's order
        writer.writerow([1, "Academia", "ac_long", 9, "What did the study measure?", "Nothing", "paper.txt",
                         "https://example.org/p", ""])
    return root


def typed(entry: dict) -> TaskResult:
    """The typed result of a task entry (run_task's return value)."""
    return TaskResult.model_validate(entry["result"])


def points(entry: dict, name: str, axis: str, **at: object) -> dict:
    """{key: Point} of the series `name` along `axis` (fixed at `at`)."""
    result = typed(entry)
    found = [s for s in result.series if s.name == name and s.axis == axis and s.at == at]
    assert len(found) == 1, (name, axis, at, [(s.name, s.axis, s.at) for s in result.series])
    return {p.key: p for p in found[0].points}


def softmax_family_variants() -> tuple[str, ...]:
    """The registered variants built on the softmax family's layer (one kernel, tweaks)."""
    from checkpoints.attention.registry import available_variants, variant_class
    from checkpoints.attention.softmax.layer import SoftmaxFamilyLayer

    return tuple(v for v in available_variants() if issubclass(variant_class(v), SoftmaxFamilyLayer))


def other_family_variants() -> tuple[str, ...]:
    """The registered variants of the other families (softpick, pointwise, entmax): every one
    whose class does not extend another registered variant's class (an extension, such as
    scalable_softpick, is tested with its base's tests)."""
    from checkpoints.attention.registry import available_variants, variant_class

    classes = {v: variant_class(v) for v in available_variants()}
    softmax = set(softmax_family_variants())
    return tuple(v for v, cls in classes.items() if v not in softmax
                 and not any(other is not cls and issubclass(cls, other) for other in classes.values()))


def tiny_own(path, **overrides) -> Decoder:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=48,
                      vocab_size=259, **overrides)
    model = Decoder(cfg)
    save_model(model, path, ByteTokenizer())
    return model


def variant_model(variant: str, params: dict | None = None, seed: int = 0, position: str = "rope", **config) -> Decoder:
    """A tiny random model of `variant` (GQA, 2 layers); `config` overrides ModelConfig fields."""
    torch.manual_seed(seed)
    fields = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128, vocab_size=259)
    config = ModelConfig(**{**fields, **config},
                         attention=AttentionConfig(variant=variant, params=params or {}, position=position))
    model = Decoder(config).eval()
    with torch.no_grad():  # move parameters that start constant away from their initial value
        for name, p in model.named_parameters():
            if ".attn." in name and p.ndim <= 1 and "proj" not in name:
                p.add_(torch.rand_like(p) * 0.3)
    return model


ROWS = [{"question": "Is the sky blue?", "choices": ["yes", "no"], "label": 0},
        {"question": "Is grass red?", "choices": ["yes", "no"], "label": 1},
        {"question": "Two plus two?", "choices": ["four", "five"], "label": 0}]


def write_tasks(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "toy.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    common = f"""dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
"""
    (folder / "toy_mc.yaml").write_text(f"""task: lctx_toy_mc
{common}output_type: multiple_choice
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
metadata:
  version: 1.0
""")
    (folder / "toy_gen.yaml").write_text(f"""task: lctx_toy_gen
{common}output_type: generate_until
doc_to_target: "{{{{choices[label]}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 5
  do_sample: false
metric_list:
  - metric: exact_match
metadata:
  version: 1.0
""")
    (folder / "toy_ppl.yaml").write_text(f"""task: lctx_toy_ppl
{common}output_type: loglikelihood_rolling
doc_to_target: "{{{{question}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
metadata:
  version: 1.0
""")
    return folder


# results.json entries of each task as written before the typed result contract
OLD_RESULTS = {
    "passkey": {"task": "passkey", "evaluator_version": "1", "seed": 0, "samples": 4, "accuracy": 0.75,
                "by_length": {"256": {"accuracy": 1.0, "n": 2, "mean_prompt_tokens": 250.0, "min_prompt_tokens": 249,
                                      "max_prompt_tokens": 251},
                              "512": {"accuracy": 0.5, "n": 2, "mean_prompt_tokens": 500.0, "min_prompt_tokens": 499,
                                      "max_prompt_tokens": 501, "over_target": 1}},
                "by_depth_decile": {"0": {"accuracy": 1.0, "n": 1}, "5": {"accuracy": 2 / 3, "n": 3}}},
    "needle": {"task": "needle", "evaluator_version": "1", "accuracy": 0.5,
               "grid": {"300": {"0": {"accuracy": 1.0, "n": 1}, "50": {"accuracy": 0.0, "n": 1}},
                        "400": {"0": {"accuracy": 1.0, "n": 1}, "50": {"accuracy": 0.0, "n": 1}}},
               "by_length": {"300": {"accuracy": 0.5, "n": 2}, "400": {"accuracy": 0.5, "n": 2}}},
    "longbench": {"task": "longbench", "evaluator_version": "3", "average": 30.0,
                  "datasets": {"qasper": {"score": 20.0, "metric": "qa_f1_score", "category": "Single-Document QA",
                                          "n": 3, "truncated": 1},
                               "lcc": {"score": 40.0, "metric": "code_sim_score", "category": "Code Completion",
                                       "n": 2, "truncated": 0,
                                       "buckets": {"0-4k": 40.0, "4-8k": None, "8k+": None}}},
                  "categories": {"Code Completion": 40.0, "Single-Document QA": 20.0}},
    "scrolls": {"task": "scrolls", "evaluator_version": "1", "split": "validation", "score": 50.0,
                "tasks": {"quality": {"exact_match": 50.0, "score": 50.0, "n": 2, "metric": "exact_match",
                                      "truncated": 0}}},
    "perplexity": {"task": "perplexity", "evaluator_version": "1", "stride": None,
                   "by_length": {"40": {"perplexity": 9.0, "windows": 2, "tokens": 78},
                                 "80": {"perplexity": 7.5, "windows": 1, "tokens": 79}}},
    "diagnostics": {"task": "diagnostics", "evaluator_version": "1",
                    "by_length": {"48": {"path": ["dense"], "sink_rate@0.2": 0.5, "sink_rate@0.3": 0.25,
                                         "sparsity": 0.0, "dispersion": 0.9,
                                         "massive_activations": {"max": 3.0, "min": -2.0, "kurtosis": 4.0}}},
                    "summary": {"sink_rate@0.3": 0.25, "kurtosis": 4.0}},
}


class TransformersServer:
    """`transformers serve` of one checkpoint folder on loopback, started as a user starts it
    (`transformers serve /path/to/checkpoint`): the server answers to the folder's path (and
    names it `<path>@main` in its answers) while its /v1/models lists only the hub cache,
    here empty; offline, so nothing is downloaded."""

    def __init__(self, checkpoint: Path, home: Path) -> None:
        self.name, self.port, self.home = str(Path(checkpoint).resolve()), free_port(), home
        self.url = f"http://127.0.0.1:{self.port}/v1"
        (home / "hub").mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 240.0) -> None:
        import httpx

        env = {**os.environ, "HF_HUB_CACHE": str(self.home / "hub"), "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1",
               "OMP_NUM_THREADS": "1"}  # one thread: on a shared CPU a second one mostly waits at barriers
        cli = Path(sys.executable).with_name("transformers")
        self.process = subprocess.Popen(
            [str(cli), "serve", self.name, "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
             "--dtype", "float32", "--log-level", "warning"],
            env=env, stdout=(self.home / "server.log").open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"transformers serve exited: {(self.home / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/models", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"transformers serve did not answer in {timeout}s")

    def requests_received(self) -> int:
        """Generation requests the server has logged (every run of it, one log)."""
        return (self.home / "server.log").read_text(errors="replace").count("[Request received]")

    def stop(self) -> None:
        """Kill the server (SIGKILL to its process group: a crash, not a shutdown)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        self.process = None


# A two-node Ray cluster on loopback in a process of its own (the test process is already the
# driver of the session's Ray): Ray's own multi-node utility, real GCS and raylet processes.
TWO_NODE_SCRIPT = """
import json, os, sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                        "node_ip_address": "127.0.0.1"})
# the worker node as a machine of its own: its own empty home, no lctx settings (no database)
for name in [n for n in os.environ if n.startswith("LCTX_")]:
    del os.environ[name]
os.environ["LCTX_HOME"] = sys.argv[1]
worker = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
print(json.dumps({"address": cluster.address,
                  "worker_raylet": worker.all_processes["raylet"][0].process.pid,
                  "worker_processes": [p.process.pid for ps in worker.all_processes.values() for p in ps]}),
      flush=True)
sys.stdin.read()  # until the test closes our stdin
cluster.shutdown()
"""


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class TwoNodeRay:
    """A head node and a worker node of one CPU each, the worker node's processes with their
    own empty LCTX_HOME (`worker_home`) and no other lctx setting; `kill_worker_node` SIGKILLs
    the worker node's raylet, agents and the workers it started, by pid."""

    def __init__(self, cwd: Path) -> None:
        self.worker_home = Path(tempfile.mkdtemp(prefix="lctx-worker-node-"))
        # its own RAY_TMPDIR (short: Unix socket paths): Ray notes the newest cluster there, and a
        # later `ray.init()` on this machine must not find this one
        self.tmpdir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
        env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1", RAY_TMPDIR=self.tmpdir)
        self.proc = subprocess.Popen([sys.executable, "-c", TWO_NODE_SCRIPT, str(self.worker_home)], cwd=cwd,
                                     env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the two-node Ray cluster did not start (exit {self.proc.wait(30)})")
        info = json.loads(line)
        self.address, self.worker_raylet = info["address"], info["worker_raylet"]
        self.worker_processes = info["worker_processes"]

    def worker_node_pids(self) -> list[int]:
        return sorted(set(self.worker_processes) | set(descendants(self.worker_raylet)))

    def kill_worker_node(self) -> list[int]:
        pids = self.worker_node_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        shutil.rmtree(self.worker_home, ignore_errors=True)


def recorded(results: Path, job_id: str, key: str = "passkey") -> int:
    """Samples of a job's task already on disk, in samples.jsonl or a running unit's file (read
    directly: progress in the store is throttled)."""
    from evaluators.samplelog import sample_files

    total = 0
    for f in sample_files(task_path(results, job_id, key)):
        try:
            total += f.read_bytes().count(b"\n")
        except FileNotFoundError:  # folded into samples.jsonl meanwhile
            pass
    return total


def ready(url: str) -> bool:
    """The server at `url` answers /readyz with 200 (False while it starts or is gone)."""
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# --- stand-ins for vLLM's and SGLang's servers ------------------------------------------------
# No GPU here, so neither server can run: these answer on loopback in each server's documented
# request and response shapes (vLLM: /v1/completions with `prompt_logprobs`, /tokenize,
# /detokenize, /version; SGLang: /generate with `return_logprob` and `logprob_start_len`,
# /tokenize, /detokenize, /get_server_info), with every number computed by transformers on the
# real model. Written from the documented formats; no code of either project.

STANDIN_NAME = "standin/SmolLM2-135M-Instruct"


class StandIn:
    """The model behind a stand-in: transformers' model and tokenizer of a checkpoint folder."""

    def __init__(self, checkpoint: Path, context: int = 8192) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
        self.context = context
        self.lock = threading.Lock()  # one forward at a time (uvicorn runs sync routes in threads)

    @torch.no_grad()
    def logprobs(self, ids: list[int]) -> torch.Tensor:
        """(len(ids), V) log-probabilities: row t is the distribution of the token after ids[:t + 1]."""
        with self.lock:
            logits = self.model(torch.tensor([ids])).logits[0]
        return torch.log_softmax(logits.float(), dim=-1)

    @torch.no_grad()
    def generate(self, ids: list[int], max_tokens: int, stop_at_eos: bool = True) -> list[int]:
        with self.lock:
            out = self.model.generate(torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False,
                                      eos_token_id=self.tokenizer.eos_token_id if stop_at_eos else None,
                                      pad_token_id=self.tokenizer.eos_token_id)
        return out[0, len(ids):].tolist()

    def ids_of(self, prompt: str | list[int]) -> list[int]:
        return list(prompt) if isinstance(prompt, list) else self.tokenizer(prompt)["input_ids"]


def standin_app(flavour: str, model: StandIn, name: str = STANDIN_NAME, calls: list[str] | None = None):
    """A FastAPI app answering as `flavour` ("vllm" or "sglang") does; `calls` hears every path asked."""
    app = FastAPI()
    calls = calls if calls is not None else []

    def unknown(requested: object) -> JSONResponse | None:
        if requested in (None, name):
            return None
        return JSONResponse({"object": "error", "message": f"The model `{requested}` does not exist.",
                             "type": "NotFoundError", "param": None, "code": 404}, status_code=404)

    @app.middleware("http")
    async def record(request: Request, call_next):
        calls.append(request.url.path)
        return await call_next(request)

    @app.get("/v1/models")
    def models() -> dict:
        card = {"id": name, "object": "model", "created": 0, "owned_by": flavour, "root": name}
        if flavour == "vllm":
            card["max_model_len"] = model.context  # vLLM's model card says it; SGLang's /tokenize does
        return {"object": "list", "data": [card]}

    if flavour == "vllm":
        @app.get("/version")
        def version() -> dict:
            return {"version": "stand-in"}
    else:
        @app.get("/get_server_info")
        def server_info() -> dict:
            return {"version": "stand-in", "context_length": model.context}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        if (refused := unknown(body.get("model"))) is not None:
            return refused
        ids = model.ids_of(body["prompt"])
        new = model.generate(ids, int(body.get("max_tokens") or 16), not body.get("ignore_eos"))
        text = model.tokenizer.decode(new, skip_special_tokens=True)
        choice: dict = {"index": 0, "text": text, "logprobs": None,
                        "finish_reason": "length" if len(new) >= int(body.get("max_tokens") or 16) else "stop",
                        "stop_reason": None}
        if flavour == "vllm" and body.get("prompt_logprobs") is not None:
            # One entry per prompt token, the first null; each maps token id -> {logprob, rank,
            # decoded_token} for the prompt's token and the `prompt_logprobs` most likely ones.
            lp = model.logprobs(ids)
            entries: list = [None]
            for t in range(1, len(ids)):
                row = lp[t - 1]
                picked = {ids[t]} | set(row.topk(int(body["prompt_logprobs"])).indices.tolist())
                entries.append({str(i): {"logprob": row[i].item(), "rank": int((row > row[i]).sum()) + 1,
                                         "decoded_token": model.tokenizer.decode([i])} for i in picked})
            choice["prompt_logprobs"] = entries
        return {"id": "cmpl-standin", "object": "text_completion", "created": 0, "model": name, "choices": [choice],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(new),
                          "total_tokens": len(ids) + len(new)}}

    if flavour == "sglang":
        @app.post("/generate")
        async def generate(request: Request) -> dict:
            body = await request.json()
            ids = list(body["input_ids"]) if body.get("input_ids") is not None else model.ids_of(body["text"])
            params = body.get("sampling_params") or {}
            new = model.generate(ids, int(params.get("max_new_tokens", 128)))
            meta: dict = {"id": "standin", "prompt_tokens": len(ids), "completion_tokens": len(new),
                          "finish_reason": {"type": "length", "length": len(new)}}
            if body.get("return_logprob"):
                # [logprob, token id, text or null] per prompt token from logprob_start_len (the
                # first null: no token before it); the top ones per position in input_top_logprobs.
                start, top_n = int(body.get("logprob_start_len", -1)), int(body.get("top_logprobs_num", 0))
                lp = model.logprobs(ids)
                first = max(start, 0)
                meta["input_token_logprobs"] = [[None if t == 0 else lp[t - 1, ids[t]].item(), ids[t], None]
                                                for t in range(first, len(ids))]
                if top_n:
                    meta["input_top_logprobs"] = [
                        None if t == 0 else [[v.item(), i.item(), None] for v, i in zip(*lp[t - 1].topk(top_n), strict=True)]
                        for t in range(first, len(ids))]
                meta["output_token_logprobs"] = []
            return {"text": model.tokenizer.decode(new, skip_special_tokens=True), "meta_info": meta}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await request.json()
        if (refused := unknown(body.get("model"))) is not None:
            return refused
        ids = model.tokenizer(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))["input_ids"]
        answer = {"count": len(ids), "max_model_len": model.context, "tokens": ids}
        return {**answer, "token_strs": None} if flavour == "vllm" else answer

    @app.post("/detokenize")
    async def detokenize(request: Request):
        body = await request.json()
        if (refused := unknown(body.get("model"))) is not None:
            return refused
        skip = body.get("skip_special_tokens", True) if flavour == "sglang" else False  # vLLM's takes no such field
        text = model.tokenizer.decode(body["tokens"], skip_special_tokens=skip)
        return {"prompt": text} if flavour == "vllm" else {"text": text}

    return app


class AssetUrls(HTMLParser):
    """The URLs a page loads (script and img src, link href): the offline checks look for
    any that leave the server."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and ((tag in ("script", "img") and name == "src") or (tag == "link" and name == "href")):
                self.urls.append(value)


def reasoning_standin_app(checkpoint: Path, name: str = "standin/thinker", field: str | None = "reasoning_content",
                          bodies: list[dict] | None = None) -> FastAPI:
    """A chat-completions server with a reasoning parser, as vLLM and SGLang answer when started
    with `--reasoning-parser`: the checkpoint's template rendered with the request's
    `chat_template_kwargs`, greedy tokens, the think block returned apart from the answer in
    `field` (`reasoning_content`: SGLang and vLLM before 2026; `reasoning`: vLLM since) and
    `content` null when the tokens ran out inside it; `field` None: a server started without a
    reasoning parser (the block stays in `content`). `bodies` hears every chat request.
    Written from the documented response shape; the model runs on lctx's one-sequence oracle."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from checkpoints.generate import greedy_generate

    loaded = load_model(checkpoint)
    template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
        loaded.tokenizer.chat_template)
    app = FastAPI()
    seen = bodies if bodies is not None else []

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "standin",
                                            "max_model_len": loaded.config.max_position_embeddings}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        body = await request.json()
        seen.append(body)
        prompt = template.render(messages=body["messages"], add_generation_prompt=True,
                                 **(body.get("chat_template_kwargs") or {}))
        ids = loaded.tokenizer.encode(prompt)
        out = greedy_generate(loaded.model, loaded.tokenizer, ids, int(body.get("max_tokens") or 16))
        text = loaded.tokenizer.decode(out.token_ids, skip_special_tokens=False)
        reasoning, content = None, text
        if field is not None and text.lstrip().startswith("<think>"):
            inner = text.lstrip()[len("<think>"):]
            reasoning, _, content = inner.partition("</think>") if "</think>" in inner else (inner, "", None)
            reasoning, content = reasoning.strip(), content.lstrip() if content is not None else None
        message = {"role": "assistant", "content": content, **({field: reasoning} if field else {})}
        return {"id": "chat-standin", "object": "chat.completion", "model": name,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "length" if out.stop_reason == "length" else "stop"}],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out.token_ids)}}

    return app


def passkey_run(settings: Settings, store: object, scores: dict[int, list[float]], checkpoint: str = "tiny",
                checkpoint_path: str = "/m/tiny", fingerprint: str = "fp", schedule: str | None = None,
                config: str = "cfg") -> str:
    """A succeeded passkey job whose trials scored `scores` (length -> per-trial 0/1): its
    samples.jsonl in its task folder and its results entry made by the real evaluator's
    aggregate with its error bars attached (evaluators.uncertainty), as a run leaves them.
    Trial ids are `passkey/len=<n>/trial=<t>`: two such jobs ran the same samples."""
    from evaluators import uncertainty
    from evaluators.registry import make_evaluator
    from service.core.status import SUCCEEDED

    spec = {"name": "passkey", "lengths": sorted(scores), "trials": max(len(v) for v in scores.values())}
    evaluator = make_evaluator(spec)
    job = store.add_job(fingerprint=fingerprint, checkpoint=checkpoint,  # type: ignore[attr-defined]
                        checkpoint_path=checkpoint_path, tasks=[spec], rope=None, backend="auto", priority=0,
                        **({"schedule": schedule} if schedule else {}))
    assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)  # type: ignore[attr-defined]
    records = [{"task": "passkey", "id": f"passkey/len={n}/trial={t}", "config": config, "length": n, "trial": t,
                "depth_decile": t % 10, "over_target": False, "prompt_tokens": n, "score": s}
               for n, trials in scores.items() for t, s in enumerate(trials)]
    folder = task_path(settings.results, job.id, "passkey")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = uncertainty.attach(evaluator.aggregate(records), records, evaluator.error_rule(), evaluator.estimate)
    entry = {"task": "passkey", "evaluator_version": evaluator.version, "config": config,
             "options": evaluator.options.as_dict(), "errors": evaluator.error_rule().as_dict(),
             "result": result.model_dump(mode="json")}
    store_results(settings, store, job.id, {"passkey": entry})
    return job.id
