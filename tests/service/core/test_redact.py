"""Secrets never printed: the database password is masked in the start-up banner, the logs
at debug level, error responses and /metrics of a real `lctx serve` on PostgreSQL."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from service.core.redact import install_log_redaction, redact
from tests.helpers import free_port, wait_for

SECRET = "SeCrEt-pw-42"


def test_redact_masks_url_passwords_only() -> None:
    assert redact(f"db postgresql+psycopg://lctx:{SECRET}@127.0.0.1:5432/x ok") == \
        "db postgresql+psycopg://lctx:***@127.0.0.1:5432/x ok"
    assert redact(f"'https://user:{SECRET}@host/v1'") == "'https://user:***@host/v1'"
    for plain in ("sqlite:////var/lctx.db", "http://127.0.0.1:8000/v1/jobs", "postgresql://lctx@h:5/db", "a:b@c"):
        assert redact(plain) == plain


def test_log_records_are_masked_whoever_logs_them(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction()
    url = f"postgresql://lctx:{SECRET}@127.0.0.1/db"
    with caplog.at_level(logging.INFO):
        logging.getLogger("sqlalchemy.engine").info("connecting to %s", url)
        try:
            raise ConnectionError(f"could not reach {url}")
        except ConnectionError:
            logging.getLogger("lctx.test").exception("start-up failed")
    assert SECRET not in caplog.text and "lctx:***@127.0.0.1" in caplog.text
    assert "ConnectionError: could not reach postgresql://lctx:***@" in caplog.text


@pytest.mark.postgres
def test_serve_on_postgres_never_prints_the_password(postgres_url: str, tmp_path: Path) -> None:
    url_with_password = postgres_url.replace("lctx@", f"lctx:{SECRET}@")  # trust auth: any password connects
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, LCTX_HOME=str(tmp_path / "var"), LCTX_DATABASE_URL=url_with_password,
               LCTX_EXECUTOR="false", LCTX_SCHEDULER="false", LCTX_DEMO_CHECKPOINTS="false")
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--log-level", "debug"],
                            cwd=tmp_path, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    bodies = []
    try:
        def ready() -> bool:
            try:
                return httpx.get(f"{base}/readyz", timeout=2).status_code == 200 or proc.poll() is not None
            except httpx.HTTPError:
                return False

        wait_for(ready, 90, 0.2, "service ready")
        assert proc.poll() is None, log.read_text()
        with httpx.Client(base_url=base, timeout=30) as c:
            for r in (c.get("/metrics"), c.get("/readyz"), c.get("/v1/jobs"), c.get("/v1/checkpoints/nope"),
                      c.post("/v1/jobs", json={"checkpoint": "nope", "tasks": [{"name": "passkey"}]}),
                      c.post("/v1/checkpoints", json={"name": "x", "path": "/etc"})):
                bodies.append(r.text)
    finally:
        proc.terminate()
        proc.wait(30)
    out = log.read_text()
    assert "database postgresql+psycopg://lctx:***@127.0.0.1" in out, out[:2000]
    for text in (out, *bodies):
        assert SECRET not in text
