"""What the API refuses, over real HTTP: path traversal, symlink escapes, pickle
checkpoints, missing or wrong tokens, bad job requests. Every refusal is a 4xx with a
message a person can act on."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch

from service.app import create_app
from tests.helpers import ThreadServer, make_settings

pytestmark = pytest.mark.integration  # a server on loopback


@pytest.fixture
def api(tmp_path: Path, models: Path):
    with ThreadServer(create_app(make_settings(tmp_path))) as srv, httpx.Client(base_url=srv.url) as c:
        yield c


def test_register_and_read_back(api: httpx.Client, models: Path) -> None:
    r = api.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["path"] == "tiny" and len(body["fingerprint"]) == 64  # relative to the checkpoint root
    assert str(models) not in r.text  # clients never see the server's directories
    assert api.get("/v1/checkpoints/tiny").json()["fingerprint"] == body["fingerprint"]
    assert [c["name"] for c in api.get("/v1/checkpoints").json()] == ["tiny"]
    r = api.post("/v1/checkpoints", json={"name": "other", "path": "tiny2"})
    assert r.status_code == 422 and "not a directory" in r.json()["detail"]
    r = api.post("/v1/checkpoints", json={"name": "tiny", "path": str(models)})
    assert r.status_code in (409, 422)  # the name is taken (and the folder is no checkpoint)
    assert api.delete("/v1/checkpoints/tiny").status_code == 204
    assert api.get("/v1/checkpoints/tiny").status_code == 404


def test_traversal_symlink_and_outside_paths_refused(api: httpx.Client, models: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (models / "escape").symlink_to(outside)
    cases = {
        str(models / ".." / "outside"): 422,
        "../outside": 422,
        str(outside): 403,
        str(models / "escape"): 403,
        "/etc": 403,
    }
    for path, status in cases.items():
        r = api.post("/v1/checkpoints", json={"name": "x", "path": path})
        assert r.status_code == status, (path, r.text)
        assert "LCTX_CHECKPOINT_ROOTS" in r.json()["detail"], r.text  # names the allowed roots by their setting
        assert str(models) not in r.json()["detail"], r.text  # and never the server's directories
        r = api.post("/v1/jobs", json={"checkpoint": path, "tasks": [{"name": "passkey"}]})
        assert r.status_code == status, (path, r.text)


def test_file_options_of_tasks_are_confined(tmp_path: Path, models: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "hay.txt").write_text("Grass grows. Birds fly. ")
    (data / "out").symlink_to("/etc")
    with ThreadServer(create_app(make_settings(tmp_path, data_dir=data))) as srv, httpx.Client(base_url=srv.url) as c:
        c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")})

        def needle(haystack: str) -> httpx.Response:
            return c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [
                {"name": "needle", "lengths": [128], "depths": [50], "haystack_file": haystack}]})

        for bad, status in (("/etc/passwd", 403), ("../../etc/passwd", 422), ("out/passwd", 403)):
            r = needle(bad)
            assert r.status_code == status and "haystack_file" in r.json()["detail"], (bad, r.text)
            assert "LCTX_DATA_DIR" in r.json()["detail"] and str(data) not in r.json()["detail"]  # the roots, by name
        r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "perplexity", "text_file": "/etc/hosts"}]})
        assert r.status_code == 403 and "text_file" in r.json()["detail"]
        ok = needle("hay.txt")
        assert ok.status_code == 202, ok.text
        assert ok.json()["tasks"][0]["haystack_file"] == "hay.txt"  # shown relative to the data dir
        from service.store import Store

        store = Store(make_settings(tmp_path, data_dir=data).database)  # the worker reads the resolved path
        assert store.get_job(ok.json()["id"]).tasks[0]["haystack_file"] == str((data / "hay.txt").resolve())
        store.close()


def test_pickle_checkpoint_refused(api: httpx.Client, models: Path) -> None:
    (models / "tiny" / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(2)}, models / "tiny" / "pytorch_model.bin")
    r = api.post("/v1/checkpoints", json={"name": "pickled", "path": str(models / "tiny")})
    assert r.status_code == 422 and "pickle" in r.json()["detail"]


def test_bad_job_requests_are_422_with_a_reason(api: httpx.Client, models: Path) -> None:
    api.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")})
    cases = [
        ({"checkpoint": "nope", "tasks": [{"name": "passkey"}]}, "neither a registered name"),
        ({"checkpoint": "tiny", "tasks": [{"name": "no-such-task"}]}, "unknown task"),
        ({"checkpoint": "tiny", "tasks": [{"name": "passkey"}], "rope": "yarn"}, "needs a factor"),
        ({"checkpoint": "tiny", "tasks": [{"name": "passkey"}], "rope": "warp:4"}, "rope"),
        ({"checkpoint": "tiny", "tasks": []}, "at least 1"),
        ({"checkpoint": "tiny", "tasks": [{"name": "passkey", "lengths": [-5]}]}, "greater than 0"),
        ({"checkpoint": "tiny", "tasks": [{"name": "passkey"}], "backend": "cuda-magic"}, "auto"),
        ({"checkpoint": "tiny", "tasks": [{"name": "passkey", "search_block": 3}]}, "only to search=sequential"),
        ({"checkpoint": "tiny", "tasks": [{"name": "ruler", "search": "sequential", "search_lengths": "doubling"}]},
         "needs search_min and search_max"),
        ({"checkpoint": "tiny", "tasks": [{"name": "passkey", "search": "sequential", "trials": 4}]},
         "search_block (5) exceeds trials (4)"),
    ]
    for body, needle in cases:
        r = api.post("/v1/jobs", json=body)
        assert r.status_code == 422, (body, r.text)
        assert needle in r.text, (body, r.text)
    assert api.get("/v1/jobs").json()["total"] == 0


def test_odd_text_is_refused_not_crashed_on(api: httpx.Client, models: Path) -> None:
    odd = ["a" * 300, str(models / ("b" * 300)), "x\x00y", "\ud800", "tiny/\udcff", "   "]
    for text in odd:
        for url, body in (("/v1/checkpoints", {"name": "x", "path": text}),
                          ("/v1/jobs", {"checkpoint": text, "tasks": [{"name": "passkey"}]}),
                          ("/v1/schedules", {"name": "s", "cron": "0 2 * * *", "watch": [text],
                                             "suite": {"tasks": [{"name": "passkey"}]}})):
            r = api.post(url, content=json.dumps(body), headers={"Content-Type": "application/json"})
            assert 400 <= r.status_code < 500 and r.json()["detail"], (url, text, r.text)
    for url in ("/v1/jobs/a%00b", "/v1/checkpoints/%00", "/v1/jobs?checkpoint=%00", "/v1/leaderboard?task=%00",
                "/v1/jobs/" + "a" * 5000):
        r = api.get(url)
        assert 400 <= r.status_code < 500, (url, r.text)


def test_unknown_ids_are_404(api: httpx.Client) -> None:
    for url in ("/v1/jobs/nope", "/v1/jobs/nope/results", "/v1/jobs/nope/samples", "/v1/jobs/nope/plots/a.png",
                "/v1/schedules/nope", "/v1/checkpoints/nope"):
        r = api.get(url)
        assert r.status_code == 404 and r.json()["detail"], url
    assert api.post("/v1/jobs/nope/cancel").status_code == 404
    # a missing resource says where to find one over the API (the store names no route)
    hints = {"/v1/jobs/nope": "no job 'nope'; list jobs with GET /v1/jobs",
             "/v1/checkpoints/nope": "no checkpoint named 'nope'; register it with POST /v1/checkpoints",
             "/v1/schedules/nope": "no schedule named 'nope'; list schedules with GET /v1/schedules"}
    for url, detail in hints.items():
        assert api.get(url).json()["detail"] == detail
    assert api.post("/v1/jobs/nope/cancel").json()["detail"] == hints["/v1/jobs/nope"]


def test_token_protects_mutations_and_optionally_reads(tmp_path: Path, models: Path) -> None:
    settings = make_settings(tmp_path, api_token="s3cret")
    body = {"name": "tiny", "path": str(models / "tiny")}
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        r = c.post("/v1/checkpoints", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "Authorization: Bearer" in r.json()["detail"]
        assert c.post("/v1/checkpoints", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/v1/checkpoints", json=body, headers={"Authorization": "Basic s3cret"}).status_code == 401
        assert c.post("/v1/jobs/x/cancel").status_code == 401
        assert c.delete("/v1/schedules/x").status_code == 401
        assert c.post("/v1/checkpoints", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 201
        assert c.get("/v1/checkpoints").status_code == 200  # reads public by default
    settings = make_settings(tmp_path, api_token="s3cret", protect_reads=True)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.get("/v1/checkpoints").status_code == 401
        assert c.get("/metrics").status_code == 401
        assert c.get("/v1/checkpoints", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200


def test_health_ready_metrics(api: httpx.Client) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").json()["status"] == "ready"
    text = api.get("/metrics").text
    assert 'lctx_jobs{status="queued"} 0.0' in text and "lctx_queue_depth 0.0" in text
    assert "lctx_samples_scored_total" in text and "lctx_job_duration_seconds" in text
    assert api.get("/openapi.json").json()["info"]["title"] == "lctx"


def test_schedules_over_http(api: httpx.Client, models: Path) -> None:
    (models / "runs").mkdir()
    body = {"name": "nightly", "cron": "0 2 * * *", "watch": [str(models / "runs")],
            "suite": {"tasks": [{"name": "passkey", "lengths": [256], "trials": 5}], "rope": "yarn:2"}}
    r = api.post("/v1/schedules", json=body)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["next_run_at"].endswith("02:00:00+00:00") and created["last_run_at"] is None
    assert api.post("/v1/schedules", json=body).status_code == 409
    assert [s["name"] for s in api.get("/v1/schedules").json()] == ["nightly"]
    assert api.get("/v1/schedules/nightly").json()["watch"] == ["runs"]
    bad = api.post("/v1/schedules", json={**body, "name": "x", "cron": "61 * * * *"})
    assert bad.status_code == 422 and "cron" in bad.json()["detail"]
    missing = api.post("/v1/schedules", json={**body, "name": "y", "watch": [str(models / "nope")]})
    assert missing.status_code == 422 and "does not exist" in missing.json()["detail"]
    assert api.delete("/v1/schedules/nightly").status_code == 204
    assert api.get("/v1/schedules").json() == []


def test_leaderboard_without_results_is_empty(api: httpx.Client) -> None:
    assert api.get("/v1/leaderboard", params={"task": "passkey"}).json() == {
        "task": "passkey", "columns": [], "headline": None, "column_info": [], "rows": [], "total": 0, "total_exact": True,
        "limit": 100, "offset": 0}
    assert api.get("/v1/leaderboard").status_code == 422  # task is required


@pytest.mark.postgres
def test_api_on_postgresql(tmp_path: Path, models: Path, postgres_url: str) -> None:
    from service.store import Base, Store

    store = Store(postgres_url)
    with store.write_engine.begin() as conn:  # the server is shared with the store tests
        Base.metadata.drop_all(conn)
    store.close()
    settings = make_settings(tmp_path, database_url=postgres_url)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
        ids = [c.post("/v1/jobs", json={"checkpoint": "tiny", "priority": p,
                                        "tasks": [{"name": "passkey", "lengths": [128], "trials": 1}]}).json()["id"]
               for p in (0, 1)]
        listed = c.get("/v1/jobs", params={"task": "passkey", "checkpoint": "tiny"}).json()
        assert listed["total"] == 2 and {j["id"] for j in listed["items"]} == set(ids)
        assert c.get(f"/v1/jobs/{ids[0]}").json()["tasks"][0]["trials"] == 1
        assert c.post(f"/v1/jobs/{ids[0]}/cancel").json()["status"] == "cancelled"
        assert c.get("/v1/jobs/a%00b").status_code == 422  # NUL never reaches PostgreSQL
        assert 'lctx_jobs{status="cancelled"} 1.0' in c.get("/metrics").text


def test_misspelt_options_fields_and_tasks_get_a_did_you_mean(api: httpx.Client) -> None:
    """A typo is answered with the name it was likely meant as, not only "Extra inputs are not permitted"."""
    cases = [({"checkpoint": "x", "tasks": [{"name": "passkey", "trails": 5}]}, "did you mean 'trials'?"),
             ({"checkpoint": "x", "tasks": [{"name": "paskey"}]}, "did you mean 'passkey'?"),
             ({"checkpont": "x", "tasks": [{"name": "passkey"}]}, "did you mean 'checkpoint'?")]
    for body, hint in cases:
        r = api.post("/v1/jobs", json=body, params={"dry_run": "true"})
        assert r.status_code == 422 and hint in r.json()["detail"][0]["msg"], r.text
    r = api.post("/v1/jobs", json={"checkpoint": "x", "tasks": [{"name": "passkey", "zzzz": 1}]})
    assert r.status_code == 422 and "did you mean" not in r.text  # nothing close: no guess


def test_the_cli_and_lctx_eval_suggest_too() -> None:
    from evaluators.errors import EvaluatorError
    from evaluators.registry import parse_task, unknown_task

    assert "did you mean 'needle'?" in unknown_task("neddle")
    with pytest.raises(EvaluatorError, match="did you mean 'trials'"):
        parse_task({"name": "passkey", "trails": 5})


def test_a_missing_data_directory_names_the_services_setting(api: httpx.Client, models: Path) -> None:
    """A client cannot pass --data-dir: the refusal names how the service gets one."""
    assert api.post("/v1/checkpoints", json={"name": "tiny", "path": "tiny"}).status_code == 201
    r = api.post("/v1/jobs", params={"dry_run": "true"}, json={"checkpoint": "tiny", "tasks": [{"name": "mrcr_v2"}]})
    assert r.status_code == 422 and "lctx serve --data-dir" in r.text and "(--data-dir or" not in r.text, r.text
