"""Demo checkpoints at start-up: `lctx serve` copies the committed demo models into the
first checkpoint root and registers them, so a newcomer can run a passkey job at once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from checkpoints.fingerprint import inspect_checkpoint
from service.demo import MARKER, REAL_MODEL, install_demo_checkpoints, real_model_dir
from service.store import Store
from tests.helpers import free_port, points, tiny_checkpoint, wait_for, wait_job
from training.train import demo_checkpoints

pytestmark = pytest.mark.integration  # `lctx serve` and Ray


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'lctx.db'}")
    s.create_all()
    yield s
    s.close()


def test_committed_demos_are_copied_and_registered_once(tmp_path: Path, store: Store) -> None:
    root = tmp_path / "models"
    first = install_demo_checkpoints(store, root)
    committed = demo_checkpoints()
    assert {d.name for d in first} == set(committed) and len(committed) >= 4
    assert {"demo-softmax", "demo-softpick", "demo-tda"} <= set(committed)
    for d in first:
        assert d.action == "copied" and (d.path / MARKER).is_file()
        row = store.get_checkpoint(d.name)
        assert row.path == str((root / d.name).absolute()) and row.variant == d.variant
        assert row.fingerprint == inspect_checkpoint(committed[d.name]).fingerprint
    again = install_demo_checkpoints(store, root)
    assert [d.action for d in again] == ["kept"] * len(first)
    assert len(store.list_checkpoints()) == len(first)


def test_changed_demo_weights_refresh_the_copy_and_the_fingerprint(tmp_path: Path, store: Store) -> None:
    source, root = tmp_path / "demo", tmp_path / "models"
    tiny_checkpoint(source / "softmax", seed=0)
    install_demo_checkpoints(store, root, source)
    before = store.get_checkpoint("demo-softmax").fingerprint
    shutil.rmtree(source / "softmax")
    tiny_checkpoint(source / "softmax", seed=1)  # the repository's demo was retrained
    (done,) = install_demo_checkpoints(store, root, source)
    assert done.action == "refreshed"
    after = store.get_checkpoint("demo-softmax").fingerprint
    assert after != before and after == inspect_checkpoint(source / "softmax").fingerprint


def test_a_users_own_folder_and_name_are_left_alone(tmp_path: Path, store: Store) -> None:
    source, root = tmp_path / "demo", tmp_path / "models"
    tiny_checkpoint(source / "softmax", seed=0)
    tiny_checkpoint(source / "tda", seed=0)
    mine = tiny_checkpoint(root / "demo-softmax", seed=5)  # not a demo copy: no marker
    weights = (mine / "model.safetensors").read_bytes()
    store.add_checkpoint("demo-tda", "/elsewhere/tda", "f" * 64, "tda", 1)
    by_name = {d.name: d for d in install_demo_checkpoints(store, root, source)}
    assert by_name["demo-softmax"].action.startswith("skipped") and "not an lctx demo copy" in by_name["demo-softmax"].action
    assert (mine / "model.safetensors").read_bytes() == weights and store.find_checkpoint("demo-softmax") is None
    assert by_name["demo-tda"].action.startswith("skipped") and "already registered" in by_name["demo-tda"].action
    assert store.get_checkpoint("demo-tda").path == "/elsewhere/tda"


def test_an_unwritable_root_is_a_warning_not_a_crash(tmp_path: Path, store: Store) -> None:
    source = tmp_path / "demo"
    tiny_checkpoint(source / "softmax", seed=0)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the root's parent folder should be")  # fails for root too, unlike chmod
    (done,) = install_demo_checkpoints(store, blocker / "models", source)
    assert done.action.startswith("skipped: cannot copy into") and "LCTX_DEMO_CHECKPOINTS=false" in done.action
    assert store.find_checkpoint("demo-softmax") is None


@pytest.mark.timeout(900)  # about a minute unloaded; the shared CPU can be 10x slower
def test_fresh_serve_registers_demos_and_runs_a_passkey_job_on_one(ray_cluster: str, tmp_path: Path,
                                                                   real_model: Path) -> None:
    """What a newcomer does first: `make serve`, then a passkey job on a demo model and one
    on the real model at 1k tokens. The real model's converted copy is brought along (as a
    second `make serve` finds it: the conversion itself is the `real_model` fixture's)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    shutil.copytree(real_model, real_model_dir(tmp_path / "var" / "checkpoints"), copy_function=os.link)
    env = dict(os.environ, LCTX_HOME=str(tmp_path / "var"), LCTX_RAY_ADDRESS=ray_cluster, LCTX_SCHEDULER="false",
               LCTX_POLL_INTERVAL="0.1", LCTX_DEMO_REAL_MODEL="true")
    env.pop("LCTX_CHECKPOINT_ROOTS", None)
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port",
                             str(port), "--log-level", "warning"], cwd=tmp_path, env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            try:
                return httpx.get(f"{url}/readyz", timeout=2).status_code == 200 or proc.poll() is not None
            except httpx.HTTPError:
                return False

        wait_for(ready, 90, 0.2, "service ready")
        assert proc.poll() is None, log.read_text()
        assert "registered demo checkpoints: demo-" in log.read_text()
        with httpx.Client(base_url=url, timeout=30) as c:
            names = {ck["name"]: ck for ck in c.get("/v1/checkpoints").json()}
            assert set(demo_checkpoints()) <= set(names)
            assert names["demo-softpick"]["path"] == "demo-softpick"  # relative to the first root, var/checkpoints
            assert (tmp_path / "var" / "checkpoints" / "demo-softpick" / "config.json").is_file()
            job = c.post("/v1/jobs", json={"checkpoint": "demo-softpick", "tasks": [
                {"name": "passkey", "lengths": [256], "trials": 20, "seed": 1}]})
            assert job.status_code == 202, job.text
            done = wait_job(c, job.json()["id"], timeout=180)
            assert done["status"] == "succeeded", done
            cell = points(c.get(f"/v1/jobs/{done['id']}/results").json()["results"]["passkey"], "accuracy",
                          "length")[256]
            assert cell.n == 20 and cell.value >= 0.8  # a trained model retrieves; a random one scores ~0

            wait_for(lambda: f"real model {REAL_MODEL} ready" in log.read_text(), 120, 0.5, "the real model")
            real = c.get(f"/v1/checkpoints/{REAL_MODEL}").json()
            assert real["path"] == REAL_MODEL, real  # outside the roots: shown by its name
            assert real["family"] == "llama" and real["context_length"] == 8192
            assert real["chat_template"] == "chat_template.jinja" and real["source"]["kind"] == "gguf"
            job = c.post("/v1/jobs", json={"checkpoint": REAL_MODEL, "tasks": [
                {"name": "passkey", "lengths": [1000], "trials": 5, "seed": 3}]})
            assert job.status_code == 202, job.text
            done = wait_job(c, job.json()["id"], timeout=600)
            assert done["status"] == "succeeded", done
            cell = points(c.get(f"/v1/jobs/{done['id']}/results").json()["results"]["passkey"], "accuracy",
                          "length")[1000]
        assert cell.n == 5 and cell.value >= 0.8  # SmolLM2 finds the key at 1k (4 of 5 at least)
    finally:
        proc.kill()
        proc.wait(30)
