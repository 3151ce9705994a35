"""What the API accepts is what a worker can run (issue #36, items 4-6), over real HTTP on a
server whose dispatcher runs on the session's Ray: a CPU-only cluster, as the API learns
from it. Each request here was once accepted and then failed (or ran something else) when
the job ran: repeated lengths, LongRoPE factor lists of another model's size, a haystack
file that is not there, a served model's context exceeded, a schedule's suite checked less
than a job's, a RoPE base dropped in silence, weights counted at a dtype they do not load in."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
import torch

from checkpoints.config import ModelConfig
from checkpoints.loading import load_dtype, load_model, save_model
from checkpoints.model import Decoder
from checkpoints.tokenizer import ByteTokenizer
from service.app import create_app
from service.runner.worker import pick_device
from service.store import EndpointRow, Store
from tests.helpers import HF_CASES, ThreadServer, make_settings, ready, tiny_checkpoint, wait_for, wait_job

pytestmark = pytest.mark.integration  # a server on loopback and Ray

PASSKEY = {"name": "passkey", "lengths": [64], "trials": 1, "max_new_tokens": 2}
MEMORY_MB = 3  # the bf16 checkpoint's 1.1 M parameters: 2.1 MiB as stored, 4.3 MiB as a CPU worker loads them


@pytest.fixture(scope="module")
def service(ray_cluster: str, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("runnable")
    models = tmp / "models"
    tiny_checkpoint(models / "tiny")  # head_dim 16: LongRoPE takes 8 factors per list
    torch.manual_seed(0)
    config = ModelConfig(hidden_size=128, num_layers=4, num_heads=4, intermediate_size=512, vocab_size=259,
                         torch_dtype="bfloat16")
    save_model(Decoder(config).to(torch.bfloat16), models / "bf16", ByteTokenizer())
    (models / "runs").mkdir()
    data = tmp / "data"
    (data / "folder").mkdir(parents=True)
    (data / "hay.txt").write_text("Grass grows. Birds fly. " * 20)
    settings = make_settings(tmp, executor=True, ray_address=ray_cluster, replica_id="runnable-test", data_dir=data,
                             job_workers=1, max_model_memory_mb=MEMORY_MB)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        store = Store(settings.database)  # a served model's row as registration writes it (no server to probe)
        store.add_endpoint(EndpointRow(name="served", base_url="http://127.0.0.1:9/v1", served_model="m",
                                       api_style="completions", tokenizer="tiny", context_length=256, concurrency=1,
                                       timeout_s=5.0, max_retries=0, api_key_env=None, capabilities={}))
        store.close()
        wait_for(lambda: ready(srv.url), 120, 0.2, "the dispatcher to report the cluster")
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": "tiny"}).status_code == 201
        yield c, models, data


def refused(c: httpx.Client, body: dict, *needles: str, url: str = "/v1/jobs") -> str:
    r = c.post(url, json=body)
    assert r.status_code == 422, (body, r.text)
    for needle in needles:
        assert needle in r.text, (needle, r.text)
    return r.json()["detail"] if isinstance(r.json()["detail"], str) else r.text


def accepted(c: httpx.Client, body: dict) -> dict:
    """A control that must be accepted; cancelled at once (the executor would run it)."""
    r = c.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    c.post(f"/v1/jobs/{r.json()['id']}/cancel")
    return r.json()


def schedule(suite: dict, name: str = "nightly") -> dict:
    return {"name": name, "cron": "0 2 * * *", "watch": ["runs"], "suite": suite}


def test_repeated_lengths_are_refused_in_every_task_and_schedule(service) -> None:
    c, _, _ = service
    refused(c, {"checkpoint": "tiny", "tasks": [{**PASSKEY, "lengths": [256, 256, 256]}]}, "lengths",
            "256 is repeated")
    refused(c, {"checkpoint": "tiny", "tasks": [{"name": "needle", "lengths": [64], "depths": [50, 50]}]}, "depths",
            "50 is repeated")
    refused(c, {"checkpoint": "tiny", "tasks": [{"name": "ruler", "lengths": "4096,4096"}]}, "4096 is repeated")
    refused(c, {"checkpoint": "tiny", "tasks": [{"name": "scrolls", "tasks": ["quality", "quality"]}]},
            "'quality' is repeated")
    refused(c, schedule({"tasks": [{**PASSKEY, "lengths": [128, 64, 128]}]}), "128 is repeated", url="/v1/schedules")
    assert c.get("/v1/schedules").json() == []


def test_longrope_factor_lists_must_fit_the_checkpoint(service) -> None:
    c, models, _ = service
    other = HF_CASES["longrope"]  # 16 factors per list: a model of head_dim 32
    refused(c, {"checkpoint": "tiny", "tasks": [PASSKEY], "rope": other}, "long_factor has 16 entries",
            "dim/2 = 8")
    fits = {**other, "long_factor": other["long_factor"][:8], "short_factor": other["short_factor"][:8]}
    accepted(c, {"checkpoint": "tiny", "tasks": [PASSKEY], "rope": fits})
    # A config carrying such lists is refused at registration, not when a worker builds it.
    wrong = models / "wrong-longrope"
    shutil.copytree(models / "tiny", wrong)
    cfg = json.loads((wrong / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_theta": 10000.0, **other}
    (wrong / "config.json").write_text(json.dumps(cfg))
    refused(c, {"name": "wrong-longrope", "path": "wrong-longrope"}, "long_factor has 16 entries",
            url="/v1/checkpoints")


def test_file_options_that_name_nothing_are_refused_as_given(service) -> None:
    c, _, data = service
    for given in ("nope.txt", "sub/nope.txt"):
        detail = refused(c, {"checkpoint": "tiny", "tasks": [{"name": "needle", "lengths": [64], "depths": [50],
                                                               "haystack_file": given}]},
                         f"tasks[0].haystack_file: {given} does not exist", "LCTX_DATA_DIR")
        assert str(data) not in detail  # the path as the client gave it, never the server's
    refused(c, {"checkpoint": "tiny", "tasks": [{"name": "needle", "lengths": [64], "depths": [50],
                                                 "haystack_file": "folder"}]}, "folder is a folder; give a file")
    refused(c, schedule({"tasks": [{"name": "needle", "lengths": [64], "depths": [50], "haystack_file": "nope.txt"}]}),
            "nope.txt does not exist", url="/v1/schedules")
    accepted(c, {"checkpoint": "tiny", "tasks": [{"name": "needle", "lengths": [64], "depths": [50],
                                                   "haystack_file": "hay.txt"}]})


def test_endpoint_jobs_fit_the_served_context(service) -> None:
    c, _, _ = service
    detail = refused(c, {"endpoint": "served", "tasks": [{**PASSKEY, "lengths": [128, 256], "max_new_tokens": 10}]},
                     "cannot run on endpoint 'served'", "tasks[0] (passkey)", "266 tokens", "context of 256 tokens")
    assert "128" not in detail  # the longest length is the one named
    refused(c, {"endpoint": "served", "tasks": [{"name": "needle", "lengths": [250], "depths": [50]}]},
            "tasks[0] (needle)", "260 tokens")
    accepted(c, {"endpoint": "served", "tasks": [{**PASSKEY, "lengths": [246], "max_new_tokens": 10}]})  # exactly 256


def test_schedules_pass_the_checks_jobs_pass(service, monkeypatch: pytest.MonkeyPatch) -> None:
    c, _, _ = service
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the interpreter would run Triton on this CPU
    job = refused(c, {"checkpoint": "tiny", "tasks": [PASSKEY], "backend": "triton"}, "the Ray cluster has no GPU")
    assert refused(c, schedule({"tasks": [PASSKEY], "backend": "triton"}), url="/v1/schedules") == job
    assert c.get("/v1/schedules").json() == []
    assert c.post("/v1/schedules", json=schedule({"tasks": [PASSKEY], "backend": "torch"})).status_code == 201


def test_a_rope_base_override_runs_and_is_recorded(service) -> None:
    c, _, _ = service
    for theta in (0, -1, True, "20000", 1e300 * 10):  # 1e300 * 10: Infinity in JSON
        body = json.dumps({"checkpoint": "tiny", "tasks": [PASSKEY], "rope": {"rope_type": "default",
                                                                              "rope_theta": theta}})
        r = c.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "rope_theta" in r.text, (theta, r.text)
    rope = {"rope_type": "default", "rope_theta": 20000}
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [PASSKEY], "rope": rope})
    assert r.status_code == 202, r.text
    assert r.json()["rope_label"] == "default rope_theta=20000"
    done = wait_job(c, r.json()["id"], timeout=240)
    assert done["status"] == "succeeded", done
    ran = c.get(f"/v1/jobs/{done['id']}/results").json()["model"]["rope"]
    assert ran["rope_theta"] == 20000.0 and ran["rope_type"] == "default"  # the base the model ran with
    row = c.get("/v1/leaderboard", params={"task": "passkey"}).json()["rows"][0]
    assert row["rope"] == "default rope_theta=20000" and row["job"] == done["id"]


def test_the_memory_check_counts_the_dtype_workers_load(service) -> None:
    c, models, _ = service
    for url, body in (("/v1/checkpoints", {"name": "bf16", "path": "bf16"}),
                      ("/v1/jobs", {"checkpoint": "./bf16", "tasks": [PASSKEY]})):
        refused(c, body, "1,116,032 parameters take 4.3 MiB at 32-bit", f"{MEMORY_MB}.0 MiB", url=url)
    # What a CPU worker of this cluster loads (LCTX_DEVICE=auto) is what was counted.
    assert not torch.cuda.is_available()
    assert load_model(models / "bf16", device=pick_device("auto")).model.dtype == torch.float32
    assert load_dtype("auto", False, "bfloat16") == "float32"
    assert load_dtype("auto", True, "bfloat16") == "bfloat16" == load_dtype("cuda", None, "bfloat16")
    assert load_dtype("cpu", True, "bfloat16") == "float32" == load_dtype("auto", True, "float64")
