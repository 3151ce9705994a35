"""The API's edges over real HTTP (issue #36): a write without the token is refused before
its body is read, bodies are capped (413) and must be JSON (415), a 405 names the methods,
no answer names a server path or tells which files exist outside the roots, an unknown
leaderboard task is 404, and registering whatever listens on a port quotes none of it."""

from __future__ import annotations

import os
import socket
import threading
import time

import httpx
import pytest
from fastapi.routing import APIRoute

from service.api import checkpoints, endpoints, health, jobs, leaderboard, results, schedules
from service.api.deps import require_write
from service.app import create_app
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint

pytestmark = pytest.mark.integration  # a server on loopback

TOKEN = "edge-token-5b1e77c0"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("edges")
    (tmp / "models").mkdir()
    settings = make_settings(tmp, api_token=TOKEN, max_body_mb=0.01)  # 10 KiB
    with ThreadServer(create_app(settings)) as srv:
        yield srv, tmp


def raw(port: int, head: str, body: bytes = b"", wait: float = 10.0) -> tuple[int, str]:
    """Send `head` (and `body`) on a fresh socket, then read what the server answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.decode(errors="replace")


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def test_writes_are_refused_before_their_body_is_read(server) -> None:
    srv, _ = server
    # 64 MiB announced, none of it sent: the answer comes at once, so nothing was waited for or read.
    start = time.monotonic()
    head = ("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {64 << 20}\r\n\r\n")
    status, text = raw(srv.port, head)
    assert status == 401 and "LCTX_API_TOKEN" in text and time.monotonic() - start < 5
    status, text = raw(srv.port, head.replace("Host: x", f"Host: x\r\nAuthorization: Bearer {TOKEN}"))
    assert status == 413 and "LCTX_MAX_BODY_MB" in text and '"code":"too_large"' in text
    # A body without a Content-Length is counted as it streams.
    chunk = b"[" + b"0," * 2000 + b"0]"
    chunked = ("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n")
    body = b"".join(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for _ in range(4)) + b"0\r\n\r\n"
    status, text = raw(srv.port, chunked, body)
    assert status == 413 and "LCTX_MAX_BODY_MB" in text, text


def test_bodies_must_be_json_and_405_lists_the_methods(server) -> None:
    srv, _ = server
    with httpx.Client(base_url=srv.url, headers=AUTH) as c:
        r = c.post("/v1/jobs", content=b'{"checkpoint": "x", "tasks": []}', headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and "application/json" in r.json()["detail"], r.text
        r = c.post("/v1/jobs", content=b"{}")  # no Content-Type at all
        assert r.status_code == 415, r.text
        assert c.post("/v1/jobs/0123456789abcdef/cancel").status_code == 404  # a write with no body needs no type
        for method, path, allowed in (("POST", "/", "GET"), ("DELETE", "/v1/jobs", "GET, POST"),
                                      ("OPTIONS", "/v1/checkpoints/pull", "POST"), ("PUT", "/ui/app.js", "GET, HEAD"),
                                      ("POST", "/healthz", "GET")):
            r = c.request(method, path)
            assert r.status_code == 405 and r.headers["allow"] == allowed, (method, path, r.headers)
        r = c.get("/v1/leaderboard", params={"task": "nosuch"})
        assert r.status_code == 404 and "passkey" in r.json()["detail"], r.text
        assert c.get("/v1/leaderboard", params={"task": "passkey"}).status_code == 200


def test_no_answer_names_a_server_path_or_which_files_exist(server) -> None:
    srv, tmp = server
    with httpx.Client(base_url=srv.url, headers=AUTH) as c:
        answers = {}
        for path in ("/proc/self/cwd", f"/proc/{os.getpid()}/cwd", "/root", "/no/such/folder", "/etc/passwd"):
            r = c.post("/v1/checkpoints", json={"name": "x", "path": path})
            answers[path] = r
            assert r.status_code == 403, (path, r.text)
            detail = r.json()["detail"]
            assert detail == f"checkpoint path {path!r} is outside the allowed roots: LCTX_CHECKPOINT_ROOTS", detail
            assert os.getcwd() not in r.text and str(tmp) not in r.text
        r = c.post("/v1/endpoints", json={"name": "e", "base_url": "http://127.0.0.1:9/v1", "served_model": "m",
                                          "tokenizer": "/proc/self/cwd", "context_length": 64})
        assert r.status_code == 403 and os.getcwd() not in r.text, r.text


class Banner:
    """A TCP service on loopback that is not HTTP: it greets with a banner, as sshd does."""

    def __init__(self, greeting: bytes) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.greeting = greeting
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(self.greeting)
                time.sleep(0.2)


def test_whatever_listens_on_a_port_is_not_quoted(server) -> None:
    srv, tmp = server
    tiny_checkpoint(tmp / "models" / "tok")
    banner = Banner(b"SSH-2.0-OpenSSH_9.2p1 private-banner\r\n")
    plain = Banner(b"HTTP/1.1 404 Not Found\r\nContent-Length: 20\r\n\r\nprivate-page-content")
    with httpx.Client(base_url=srv.url, headers=AUTH, timeout=30) as c:
        for port in (banner.port, plain.port):
            r = c.post("/v1/endpoints", json={"name": "e", "base_url": f"http://127.0.0.1:{port}/v1",
                                              "served_model": "m", "tokenizer": "tok", "context_length": 64})
            assert r.status_code == 422 and "not an OpenAI-compatible server" in r.text, r.text
            assert "private" not in r.text and "OpenSSH" not in r.text, r.text
    banner.sock.close()
    plain.sock.close()


def test_registering_answers_alike_whatever_is_not_an_openai_server(server, caplog) -> None:
    """A closed port, a port that speaks something else (a Ray port, sshd) and HTTP servers
    answering 404 or 401: the same status and the same bytes for each (no port-scan oracle for a
    token holder); what each was is in the service's log."""
    srv, tmp = server
    tiny_checkpoint(tmp / "models" / "tok2")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    garbage = Banner(b"\x00\x01ray-gcs\xff\xfe" * 8)
    missing = Banner(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
    locked = Banner(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Length: 0\r\n\r\n")
    ports = [closed.getsockname()[1], garbage.port, missing.port, locked.port]
    answers = []
    with caplog.at_level("WARNING", logger="lctx.api"), httpx.Client(base_url=srv.url, headers=AUTH, timeout=30) as c:
        for port in ports:
            r = c.post("/v1/endpoints", json={"name": "e", "base_url": f"http://127.0.0.1:{port}/v1",
                                              "served_model": "m", "tokenizer": "tok2", "context_length": 64})
            answers.append((r.status_code, r.content))
    assert answers[0][0] == 422 and b"not an OpenAI-compatible server" in answers[0][1], answers[0]
    assert all(a == answers[0] for a in answers), answers
    logged = caplog.text
    assert "ConnectError" in logged and "answered HTTP 404" in logged and "answered HTTP 401" in logged, logged
    for sock in (closed, garbage.sock, missing.sock, locked.sock):
        sock.close()


def test_every_write_route_checks_the_token() -> None:
    """The guard refuses a write without the token before its body is read; that is right
    only while every non-GET route of the API needs the token."""
    for module in (checkpoints, endpoints, health, jobs, leaderboard, results, schedules):
        for route in module.router.routes:
            if isinstance(route, APIRoute) and set(route.methods) - {"GET", "HEAD"}:
                calls = {d.call for d in route.dependant.dependencies}
                assert require_write in calls, route.path
