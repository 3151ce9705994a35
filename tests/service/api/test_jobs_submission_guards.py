"""What the API refuses at submission because it could only fail later (or "succeed" on
garbage): one test per kind of request, each asserting the status and that the message
names the field and what is allowed. Over real HTTP, no executor needed."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint

pytestmark = pytest.mark.integration  # a server on loopback

PASSKEY = {"name": "passkey", "lengths": [64], "trials": 1}


@pytest.fixture
def api(tmp_path: Path):
    tiny_checkpoint(tmp_path / "models" / "tiny")
    settings = make_settings(tmp_path, max_length=4096, max_samples_per_job=1000)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": "tiny"}).status_code == 201
        yield c


def refused(c: httpx.Client, body: dict, *needles: str, url: str = "/v1/jobs", status: int = 422) -> None:
    r = c.post(url, json=body)
    assert r.status_code == status, (body, r.text)
    for needle in needles:
        assert needle in r.text, (needle, r.text)


def job(**fields: object) -> dict:
    return {"checkpoint": "tiny", "tasks": [PASSKEY], **fields}


@pytest.mark.parametrize(("rope", "needles"), [
    ("yarn:nan", ("rope", "factor", "finite")),
    ("yarn:inf", ("rope", "factor", "finite")),
    ("yarn:1e308", ("rope", "factor", "<= 4096")),
    ({"factor": 4}, ("rope", "rope_type")),
    ({"rope_type": "yarn", "factor": 4, "beta_fast": -1, "beta_slow": 1e300}, ("beta_fast", "> 0")),
    ({"rope_type": "yarn", "factor": 4, "beta_fast": 1, "beta_slow": 32}, ("beta_fast", "greater than beta_slow")),
    ({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1}, ("high_freq_factor",)),
    ({"rope_type": "linear", "factor": True}, ("factor", "must be a number")),
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 0}, ("original_max_position_embeddings",)),
])
def test_rope_parameters_are_finite_named_and_bounded(api: httpx.Client, rope: object, needles: tuple[str, ...]) -> None:
    refused(api, job(rope=rope), *needles)


def test_lengths_are_positive_ints_within_the_service_limit(api: httpx.Client) -> None:
    refused(api, job(tasks=[{**PASSKEY, "lengths": [True]}]), "lengths", "valid integer")
    refused(api, job(tasks=[{**PASSKEY, "lengths": [0]}]), "lengths", "greater than 0")
    refused(api, job(tasks=[{**PASSKEY, "lengths": [10_000_000]}]), "lengths", "LCTX_MAX_LENGTH", "4096")
    refused(api, job(tasks=[{**PASSKEY, "lengths": list(range(1, 100_001))}]), "lengths", "at most 1000")
    refused(api, job(tasks=[{"name": "longbench", "max_length": 8192}]), "max_length", "LCTX_MAX_LENGTH")


def test_generation_lengths_are_bounded(api: httpx.Client) -> None:
    refused(api, job(tasks=[{**PASSKEY, "max_new_tokens": 1_000_000_000}]), "max_new_tokens", "65536")
    refused(api, job(tasks=[{**PASSKEY, "max_new_tokens": 5000}]), "max_new_tokens", "LCTX_MAX_LENGTH")


def test_samples_per_job_are_bounded(api: httpx.Client) -> None:
    refused(api, job(tasks=[{**PASSKEY, "lengths": [64, 128], "trials": 300}, {**PASSKEY, "trials": 401}]),
            "1001 samples", "LCTX_MAX_SAMPLES_PER_JOB")
    assert api.post("/v1/jobs", json=job(tasks=[{**PASSKEY, "trials": 1000}])).status_code == 202  # at the limit


def test_unknown_fields_are_refused_everywhere(api: httpx.Client, tmp_path: Path) -> None:
    refused(api, job(rop="yarn:4"), "rop", "extra_forbidden")
    refused(api, job(tasks=[{**PASSKEY, "trails": 5}]), "trails")
    refused(api, {"name": "t2", "path": "tiny", "fingerprint": "x"}, "fingerprint", url="/v1/checkpoints")
    (tmp_path / "models" / "runs").mkdir()
    schedule = {"name": "s", "cron": "0 2 * * *", "watch": ["runs"], "suite": {"tasks": [PASSKEY]}}
    refused(api, {**schedule, "when": "nightly"}, "when", url="/v1/schedules")
    refused(api, {**schedule, "suite": {"tasks": [PASSKEY], "checkpoint": "tiny"}}, "checkpoint", url="/v1/schedules")


def test_six_field_cron_is_refused(api: httpx.Client, tmp_path: Path) -> None:
    (tmp_path / "models" / "runs").mkdir()
    body = {"name": "s", "cron": "* * * * * *", "watch": ["runs"], "suite": {"tasks": [PASSKEY]}}
    refused(api, body, "cron", "6 fields", "five", url="/v1/schedules")
    refused(api, {**body, "suite": {"tasks": [PASSKEY], "rope": "yarn:nan"}, "cron": "0 2 * * *"}, "rope", "finite",
            url="/v1/schedules")


def test_triton_is_refused_where_the_cluster_cannot_run_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.core.errors import InvalidRequest
    from service.submission import check_backend

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the interpreter runs kernels on CPU (tests use it)
    tiny_checkpoint(tmp_path / "models" / "tiny")
    with ThreadServer(create_app(make_settings(tmp_path, device="cpu"))) as srv, \
            httpx.Client(base_url=srv.url) as c:
        refused(c, {"checkpoint": "./tiny", "tasks": [PASSKEY], "backend": "triton"}, "triton", "CUDA GPU", "auto")
        assert c.post("/v1/jobs", json={"checkpoint": "./tiny", "tasks": [PASSKEY], "backend": "torch"}
                      ).status_code == 202
    with pytest.raises(InvalidRequest, match="the Ray cluster has no GPU"):
        check_backend("triton", make_settings(tmp_path), cluster_gpus=0)
    check_backend("triton", make_settings(tmp_path), cluster_gpus=1)
    check_backend("triton", make_settings(tmp_path), cluster_gpus=None)  # unknown here (an API-only replica)


def test_data_backed_tasks_need_their_files(tmp_path: Path) -> None:
    tiny_checkpoint(tmp_path / "models" / "tiny")
    body = {"checkpoint": "./tiny", "tasks": [PASSKEY, {"name": "longbench", "datasets": ["qasper", "hotpotqa"]}]}
    with ThreadServer(create_app(make_settings(tmp_path))) as srv, httpx.Client(base_url=srv.url) as c:
        refused(c, body, "tasks[1] (longbench)", "LCTX_DATA_DIR", "huggingface.co/datasets/THUDM/LongBench")
        refused(c, {**body, "tasks": [{"name": "scrolls", "tasks": ["quality"]}]}, "scrolls", "scrolls-benchmark.com")
    data = tmp_path / "data"
    data.mkdir()
    (data / "qasper.jsonl").write_text(json.dumps({"input": "q", "context": "c", "answers": ["a"], "length": 3}) + "\n")
    with ThreadServer(create_app(make_settings(tmp_path, data_dir=data))) as srv, httpx.Client(base_url=srv.url) as c:
        r = c.post("/v1/jobs", json=body)
        assert r.status_code == 422 and "missing data files: hotpotqa.jsonl" in r.text and "qasper.jsonl" not in r.text
        assert str(data) not in r.text  # named relative to the data directory
        assert c.post("/v1/jobs", json={**body, "tasks": [{"name": "longbench", "datasets": ["qasper"]}]}
                      ).status_code == 202
    with ThreadServer(create_app(make_settings(tmp_path, hub_data=True))) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/jobs", json=body).status_code == 202  # the hub is allowed: the worker downloads


def test_registration_needs_complete_weights_and_a_tokenizer(api: httpx.Client, tmp_path: Path) -> None:
    models = tmp_path / "models"
    cut = tiny_checkpoint(models / "cut", seed=1)
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    refused(api, {"name": "cut", "path": "cut"}, "truncated", "model.safetensors", url="/v1/checkpoints")
    bare = tiny_checkpoint(models / "bare", seed=2)
    for f in bare.glob("*tokenizer*"):
        f.unlink()
    refused(api, {"name": "bare", "path": "bare"}, "no tokenizer", "tokenizer.json", url="/v1/checkpoints")
    assert [c["name"] for c in api.get("/v1/checkpoints").json()] == ["tiny"]
