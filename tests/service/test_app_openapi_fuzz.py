"""Property-based requests generated from the OpenAPI schema (schemathesis + hypothesis)
against a real server: whatever is sent, the answer is never a 5xx, and every refusal
comes with a JSON `detail` that says what was wrong. Then schemathesis' own runner with
every check (status codes, content types, bodies and headers conform to the schema,
auth is enforced where declared and declared where enforced, 405s list the right
methods, ...), without a token and with one: no failures."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from service.app import create_app
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint

pytestmark = pytest.mark.integration  # a server on loopback

EXAMPLES = 25


@pytest.fixture(scope="module")
def operations(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("fuzz")
    tiny_checkpoint(tmp / "models" / "tiny")
    with ThreadServer(create_app(make_settings(tmp))) as srv:
        schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json")
        yield [result.ok() for result in schema.get_all_operations()]


def test_no_request_produces_a_server_error(operations) -> None:
    assert len(operations) >= 15
    seen: dict[str, set[int]] = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                  database=None)
        def check(case: schemathesis.Case) -> None:
            response = case.call(timeout=30)
            seen.setdefault(case.operation.label, set()).add(response.status_code)
            assert response.status_code < 500, (case.method, case.formatted_path, case.body, response.text)
            if response.status_code >= 400:
                assert response.json()["detail"], response.text

        check()
    assert any(4 <= s // 100 for codes in seen.values() for s in codes)  # the fuzzer did reach refusals


def test_paths_are_documented(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    paths = set(app.openapi()["paths"])
    for p in ("/v1/checkpoints", "/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel",
              "/v1/jobs/{job_id}/results", "/v1/jobs/{job_id}/samples", "/v1/jobs/{job_id}/plots/{name}.png",
              "/v1/leaderboard", "/v1/schedules", "/healthz", "/readyz", "/metrics"):
        assert p in paths, p


ST = Path(sys.executable).parent / "st"
ST_CONFIG = Path(__file__).parent / "data" / "schemathesis.toml"


@pytest.mark.timeout(300)
def test_schemathesis_all_checks_pass(tmp_path: Path) -> None:
    """One run without a token and one with, at the same time: each is one process (most of
    its time is the coverage phase's thousands of cases), so the two share the machine's cores."""
    with contextlib.ExitStack() as stack:
        runs = {}
        for token in (None, "s3cret"):
            home = tmp_path / str(token)
            tiny_checkpoint(home / "models" / "tiny")
            srv = stack.enter_context(ThreadServer(create_app(make_settings(home, api_token=token))))
            auth = ["-H", f"Authorization: Bearer {token}"] if token else []
            runs[token] = subprocess.Popen([str(ST), "--config-file", str(ST_CONFIG), "run", f"{srv.url}/openapi.json",
                                            "--checks", "all", "-n", "10", "--generation-deterministic", *auth],
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            stack.callback(runs[token].kill)  # a failed or timed-out check leaves no run behind
        for token, run in runs.items():
            stdout, stderr = run.communicate(timeout=280)
            assert run.returncode == 0 and " passed" in stdout, f"token={token}\n{stdout[-6000:]}{stderr[-2000:]}"


def test_openapi_declares_auth_only_where_a_token_is_checked(tmp_path: Path) -> None:
    def secured(schema: dict) -> set[str]:
        return {f"{m.upper()} {p}" for p, ops in schema["paths"].items() for m, op in ops.items() if "security" in op}

    open_schema = create_app(make_settings(tmp_path)).openapi()
    assert secured(open_schema) == set() and "securitySchemes" not in open_schema.get("components", {})
    assert all("401" not in op["responses"] for ops in open_schema["paths"].values() for op in ops.values())
    writes = secured(create_app(make_settings(tmp_path, api_token="t")).openapi())
    assert writes and all(not w.startswith("GET ") for w in writes) and "POST /v1/jobs" in writes
    reads = secured(create_app(make_settings(tmp_path, api_token="t", protect_reads=True)).openapi())
    assert "GET /v1/jobs" in reads and "GET /metrics" in reads and "GET /healthz" not in reads
    jobs = open_schema["paths"]["/v1/jobs/{job_id}"]["get"]["responses"]
    assert {"404", "422"} <= set(jobs) and jobs["404"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ErrorOut")
