"""Shared pieces of the service tests: a tiny real checkpoint, settings in a temp dir,
a PostgreSQL 15 on loopback, and a real uvicorn server in a thread."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import torch
import uvicorn

from checkpoints.config import ModelConfig
from checkpoints.loading import save_model
from checkpoints.model import Decoder
from checkpoints.tokenizer import ByteTokenizer
from service.settings import Settings

PG_BIN = Path("/usr/local/bin")


def tiny_checkpoint(path: Path, seed: int = 0) -> Path:
    """A tiny random decoder saved in our own format (config, safetensors, byte tokenizer)."""
    torch.manual_seed(seed)
    model = Decoder(ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                                intermediate_size=128, vocab_size=259))
    return save_model(model, path, ByteTokenizer())


def make_settings(tmp: Path, **overrides: object) -> Settings:
    fields = dict(home=tmp / "var", checkpoint_roots=[tmp / "models"], executor=False, scheduler=False,
                  poll_interval=0.1)
    fields.update(overrides)
    settings = Settings(**fields)
    settings.prepare()
    return settings


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
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -F"
        self.run(str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-o", opts, "-l",
                 str(self.dir / "log"), "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        try:
            self.run(str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False
