"""Hardening over real HTTP: every file read for a checkpoint stays inside the allowed
roots (symlinked weights and config, shard names in the index), binary files given as
text are refused at submission, RoPE factors are ASCII numbers, and a job does not run
the same task twice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from tests.helpers import ThreadServer, make_settings

pytestmark = pytest.mark.integration  # a server on loopback


@pytest.fixture
def api(tmp_path: Path, models: Path):
    data = tmp_path / "data"
    data.mkdir()
    with ThreadServer(create_app(make_settings(tmp_path, data_dir=data))) as srv, httpx.Client(base_url=srv.url) as c:
        yield c


def _refused_403(api: httpx.Client, path: Path, file: str) -> None:
    r = api.post("/v1/checkpoints", json={"name": "x", "path": str(path)})
    assert r.status_code == 403, r.text
    assert f"checkpoint file {file}" in r.json()["detail"], r.text
    r = api.post("/v1/jobs", json={"checkpoint": str(path), "tasks": [{"name": "passkey"}]})
    assert r.status_code == 403 and f"checkpoint file {file}" in r.json()["detail"], r.text


def test_checkpoint_files_that_escape_the_roots_are_refused(api: httpx.Client, models: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    shutil.copytree(models / "tiny", outside)

    weights = models / "linked-weights"
    shutil.copytree(models / "tiny", weights)
    (weights / "model.safetensors").unlink()
    (weights / "model.safetensors").symlink_to(outside / "model.safetensors")
    _refused_403(api, weights, "model.safetensors")

    config = models / "linked-config"
    shutil.copytree(models / "tiny", config)
    (config / "config.json").unlink()
    (config / "config.json").symlink_to(outside / "config.json")
    _refused_403(api, config, "config.json")

    sharded = models / "sharded"
    shutil.copytree(models / "tiny", sharded)
    (sharded / "model.safetensors").unlink()
    names = json.loads((outside / "model.safetensors").read_bytes()[8:8 + int.from_bytes(
        (outside / "model.safetensors").read_bytes()[:8], "little")])
    index = {"weight_map": {k: str(outside / "model.safetensors") for k in names if k != "__metadata__"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    r = api.post("/v1/checkpoints", json={"name": "x", "path": str(sharded)})
    assert r.status_code == 403 and "outside the checkpoint folder" in r.text and "model.safetensors" in r.text
    index["weight_map"] = {k: "../../outside/model.safetensors" for k in index["weight_map"]}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    r = api.post("/v1/checkpoints", json={"name": "x", "path": str(sharded)})
    assert r.status_code == 403 and "without '..'" in r.text

    # A link that stays inside the roots is fine: files shared between checkpoints of one root.
    inside = models / "linked-inside"
    shutil.copytree(models / "tiny", inside)
    (inside / "model.safetensors").unlink()
    (inside / "model.safetensors").symlink_to(models / "tiny" / "model.safetensors")
    assert api.post("/v1/checkpoints", json={"name": "inside", "path": str(inside)}).status_code == 201
    assert api.get("/v1/checkpoints").json()[0]["name"] == "inside"  # nothing else registered
    assert str(tmp_path) not in r.text


def test_binary_text_files_are_refused_at_submission(api: httpx.Client, models: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copy(models / "tiny" / "model.safetensors", data / "weights.txt")
    (data / "latin1.txt").write_bytes("caf\xe9 au lait. ".encode("latin-1") * 20)
    (data / "table.jsonl").write_text("not json\n")
    (data / "fine.txt").write_text("Grass grows. Birds fly. " * 20)
    assert api.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
    cases = [
        ({"name": "diagnostics", "inputs": "text", "text_file": "weights.txt", "lengths": [32]}, "NUL bytes"),
        ({"name": "perplexity", "text_file": "latin1.txt", "lengths": [32], "max_tokens": 64}, "not UTF-8"),
        ({"name": "needle", "haystack_file": "weights.txt", "lengths": [128], "depths": [50]}, "NUL bytes"),
        ({"name": "perplexity", "text_file": "table.jsonl", "lengths": [32], "max_tokens": 64}, "not a JSON object"),
    ]
    for task, why in cases:
        r = api.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [task]})
        assert r.status_code == 422 and why in r.json()["detail"], (task, r.text)
        assert "UTF-8 text file" in r.json()["detail"]
    ok = api.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [
        {"name": "needle", "haystack_file": "fine.txt", "lengths": [128], "depths": [50]}]})
    assert ok.status_code == 202, ok.text
    assert api.get("/v1/jobs").json()["total"] == 1


def test_rope_digits_and_duplicate_tasks_are_refused(api: httpx.Client, models: Path) -> None:
    assert api.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
    for rope in ("yarn:\u0664", "yarn:1_0", "ntk:inf", "yarn:\uff14"):  # Arabic-Indic and full-width fours
        r = api.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "passkey"}], "rope": rope})
        assert r.status_code == 422 and "ASCII digits" in r.json()["detail"], (rope, r.text)
    task = {"name": "passkey", "lengths": [64], "trials": 2}
    r = api.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [task, dict(task)]})
    assert r.status_code == 422 and "tasks[1] (passkey) repeats tasks[0]" in r.json()["detail"], r.text
    r = api.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [task, {**task, "lengths": [128]}]})
    assert r.status_code == 202, r.text  # the same task with other options is a different task
    assert api.get("/v1/jobs").json()["total"] == 1


def test_registrations_are_bounded(api: httpx.Client, models: Path, tmp_path: Path) -> None:
    """Sizes a worker could not build, shapes the bytes cannot hold, configs the weights do not
    match: 422 naming the field and the figure, at registration (never a 500 or a worker that
    grows without bound)."""
    def variant(name: str, **config: object) -> Path:
        path = models / name
        shutil.copytree(models / "tiny", path)
        cfg = json.loads((path / "config.json").read_text())
        cfg.update(config)
        (path / "config.json").write_text(json.dumps(cfg))
        return path

    huge = variant("huge-shape")
    header = json.dumps({"w": {"dtype": "F32", "shape": [10**12, 10**12], "data_offsets": [0, 4]}}).encode()
    (huge / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    cases = [
        (huge, "shape [1000000000000, 1000000000000] (F32) needs"),
        (variant("deep", num_layers=10**8), "num_layers must be an integer from 1 to 1,024, got 100000000"),
        (variant("wide", hidden_size=10**9), "hidden_size must be an integer from 1 to 65,536"),
        (variant("big-vocab", vocab_size=10**9), "vocab_size must be an integer from 1 to 4,194,304"),
        (variant("more-layers", num_layers=6), "config.json describes at least"),
    ]
    for path, why in cases:
        r = api.post("/v1/checkpoints", json={"name": path.name, "path": str(path)})
        assert r.status_code == 422 and why in r.json()["detail"], (path.name, r.text)
        r = api.post("/v1/jobs", json={"checkpoint": str(path), "tasks": [{"name": "passkey"}]})
        assert r.status_code == 422 and why in r.json()["detail"], (path.name, r.text)
    assert api.get("/v1/checkpoints").json() == []
    # A config edited after registration is refused at submission, not when a worker builds the model.
    assert api.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
    cfg = json.loads((models / "tiny" / "config.json").read_text())
    (models / "tiny" / "config.json").write_text(json.dumps({**cfg, "num_layers": 10**8}))
    r = api.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "passkey"}]})
    assert r.status_code == 422 and "tiny/config.json: num_layers must be an integer from 1 to 1,024" in r.text, r.text


def test_models_larger_than_the_memory_setting_are_refused(tmp_path: Path) -> None:
    """LCTX_MAX_MODEL_MEMORY_MB bounds the weights at the dtype jobs load them in: refused at
    registration, and at submission for a checkpoint registered under a larger limit."""
    import torch

    from checkpoints.config import ModelConfig
    from checkpoints.loading import save_model
    from checkpoints.model import Decoder
    from checkpoints.tokenizer import ByteTokenizer

    torch.manual_seed(0)
    path = tmp_path / "models" / "medium"  # 2.2 M parameters: 8.5 MiB in float32
    save_model(Decoder(ModelConfig(hidden_size=256, num_layers=2, num_heads=4, intermediate_size=1024,
                                   vocab_size=259)), path, ByteTokenizer())
    with ThreadServer(create_app(make_settings(tmp_path))) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "medium", "path": str(path)}).status_code == 201
    with ThreadServer(create_app(make_settings(tmp_path, max_model_memory_mb=4))) as srv, \
            httpx.Client(base_url=srv.url) as c:
        for r in (c.post("/v1/jobs", json={"checkpoint": "medium", "tasks": [{"name": "passkey"}]}),
                  c.post("/v1/checkpoints", json={"name": "again", "path": str(path)})):
            assert r.status_code == 422, r.text
            assert "its 2,231,040 parameters take 8.5 MiB at 32-bit, more than the 4.0 MiB" in r.json()["detail"]
            assert "LCTX_MAX_MODEL_MEMORY_MB" in r.json()["detail"]
