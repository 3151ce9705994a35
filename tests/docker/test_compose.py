"""What can be checked of the GPU deployment without a Docker engine: the compose
file is valid Compose, points at files that exist, uses only settings the
service reads, and the image installs with the Makefile's own recipe.

`compose_spec.json` is the Compose Specification's JSON schema as shipped in
the docker-compose 1.29.2 wheel (compose/config/compose_spec.json)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import pytest
import yaml

from service.core.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
SCHEMA = Path(__file__).with_name("compose_spec.json")
# Variables compose itself substitutes (host paths, ports) and the Ray head address of a worker.
COMPOSE_ONLY = {"LCTX_BIND", "LCTX_PUBLISHED_PORT", "LCTX_RAY_PUBLISHED_PORT", "LCTX_CHECKPOINTS_HOST_DIR",
                "LCTX_DATA_HOST_DIR", "LCTX_DATASETS_HOST_DIR", "LCTX_PG_HOST_DIR", "LCTX_RAY_HEAD_ADDRESS",
                "LCTX_RAY_HEAD", "LCTX_RAY_PORT", "LCTX_PG_BIND", "LCTX_PG_PUBLISHED_PORT", "LCTX_API_HOST"}
COMPOSE_FILES = ("docker-compose.yml", "docker-compose.cluster.yml", "docker-compose.multinode.yml")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())


def settings_env_names() -> set[str]:
    return {f"LCTX_{name.upper()}" for name in Settings.model_fields}


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_is_valid_against_the_compose_schema(name: str) -> None:
    jsonschema.validate(yaml.safe_load((DOCKER / name).read_text()), json.loads(SCHEMA.read_text()))


def test_gpus_reserved_and_port_on_localhost(compose: dict) -> None:
    lctx = compose["services"]["lctx"]
    devices = lctx["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert all(p.startswith("${LCTX_BIND:-127.0.0.1}:") for p in lctx["ports"])
    volumes = {re.search(r":(/[^:]+)(?::ro)?$", v).group(1): v for v in lctx["volumes"]}
    assert volumes["/checkpoints"].endswith(":ro")
    assert "/data" in volumes
    assert compose["services"]["postgres"]["profiles"] == ["postgres"]
    assert compose["services"]["ray-worker"]["profiles"] == ["ray-worker"]


def test_referenced_files_exist(compose: dict) -> None:
    for name, service in compose["services"].items():
        build = service.get("build")
        if build:
            context = (DOCKER / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file(), f"{name}: dockerfile missing"
        if "env_file" in service:
            # `.env` is the user's copy of the documented example.
            assert (DOCKER / (service["env_file"] + ".example")).is_file()
    dockerfile = (DOCKER / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (?:--chown=\S+ )?(.+?) \S+$", dockerfile, re.M):
        for part in src.split():
            assert (REPO / part).exists(), f"Dockerfile copies {part}, which does not exist"


def test_environment_matches_the_settings_the_service_reads(compose: dict) -> None:
    known = settings_env_names()
    example = (DOCKER / ".env.example").read_text()
    documented = set(re.findall(r"^#?\s*(LCTX_[A-Z_]+)=", example, re.M))
    assert known <= documented, f"settings missing from .env.example: {sorted(known - documented)}"
    assert documented - known <= COMPOSE_ONLY, f"unknown settings in .env.example: {sorted(documented - known - COMPOSE_ONLY)}"
    used = {v for name in COMPOSE_FILES for v in re.findall(r"\b(LCTX_[A-Z_]+)\b", (DOCKER / name).read_text())}
    for name in ("Dockerfile", "entrypoint.sh"):
        used |= set(re.findall(r"\b(LCTX_[A-Z_]+)\b", (DOCKER / name).read_text()))
    assert used - known <= COMPOSE_ONLY, f"compose/Dockerfile use unknown settings: {sorted(used - known - COMPOSE_ONLY)}"
    for service in compose["services"].values():
        for key in service.get("environment", {}):
            if key.startswith("LCTX_"):
                assert key in known, key


def test_image_installs_with_the_makefile_recipe() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    run_lines = " ".join(re.findall(r"^RUN (.+)$", dockerfile, re.M))
    assert "make install" in run_lines
    assert "pip install" not in run_lines, "a second install recipe would drift from the Makefile's"
    makefile = (REPO / "Makefile").read_text()
    assert "pip install --progress-bar on torch==2.13.0" in makefile  # the pinned CPU wheel, with progress shown
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert re.search(r"^USER (?!root)\S+", dockerfile, re.M), "the image must not run as root"


def test_multinode_head_shares_the_host_network_and_keeps_the_api_on_loopback(compose: dict) -> None:
    cluster = yaml.safe_load((DOCKER / "docker-compose.multinode.yml").read_text())
    assert set(cluster["services"]) <= set(compose["services"])  # an override, not a second deployment
    lctx = cluster["services"]["lctx"]
    assert lctx["network_mode"] == "host"  # Ray workers on other nodes reach the head's Ray processes
    assert lctx["environment"]["LCTX_HOST"] == "${LCTX_API_HOST:-127.0.0.1}"
    assert compose["services"]["postgres"]["ports"] == ["${LCTX_PG_BIND:-127.0.0.1}:${LCTX_PG_PUBLISHED_PORT:-5432}:5432"]
    assert "--dashboard-host=127.0.0.1" in (DOCKER / "entrypoint.sh").read_text()  # job submission stays local


def test_cluster_file_is_a_head_running_the_api_and_scalable_one_gpu_workers() -> None:
    """docker-compose.cluster.yml: the head runs `lctx serve` (the API, its dispatcher process
    and the Ray head) with no GPU; each worker is a Ray worker node joining the head with one
    GPU, given the inputs at the head's paths and nothing of the service (workers only compute:
    the head's coordinator writes the database and the results)."""
    cluster = yaml.safe_load((DOCKER / "docker-compose.cluster.yml").read_text())
    jsonschema.validate(cluster, json.loads(SCHEMA.read_text()))
    services = cluster["services"]
    assert set(services) == {"head", "worker", "postgres"}
    head, worker = services["head"], services["worker"]

    assert head["command"] == ["lctx", "serve"] and "entrypoint" not in head  # the image's: Ray head, then serve
    assert head["environment"]["LCTX_RAY_HEAD"] == "1" and "--head" in (DOCKER / "entrypoint.sh").read_text()
    assert "deploy" not in head  # no GPU on the head: Ray places every job on a worker's GPU
    assert head["ports"] == ["${LCTX_BIND:-127.0.0.1}:${LCTX_PUBLISHED_PORT:-8000}:8000"]
    assert head["environment"]["LCTX_PORT"] == "8000" and head["environment"]["LCTX_REPLICA_ID"]

    command = " ".join(worker["command"])
    port = head["environment"]["LCTX_RAY_PORT"]
    assert f"ray start --address=head:{port} --num-gpus=1" in command and "--block" in command
    assert "ports" not in worker and worker["entrypoint"] == ["tini", "--"]  # no Ray head of its own
    deploy = worker["deploy"]
    assert deploy["resources"]["reservations"]["devices"] == [{"driver": "nvidia", "count": 1,
                                                               "capabilities": ["gpu"]}]
    assert isinstance(deploy["replicas"], int)  # `--scale worker=N` scales it
    assert "--scale worker=" in (REPO / "docs" / "guide" / "deploy.md").read_text()

    mounts = {v.split(":")[-2] if v.endswith(":ro") else v.split(":")[-1]: v for v in head["volumes"]}
    assert set(mounts) == {"/data", "/checkpoints", "/datasets"} and not mounts["/data"].endswith(":ro")
    assert "@postgres:5432/" in head["environment"]["LCTX_DATABASE_URL"]  # the service below, on the project network
    assert head["depends_on"]["postgres"]["condition"] == "service_healthy" and services["postgres"]["healthcheck"]
    settings = Settings(home=Path(head["environment"]["LCTX_HOME"]), results_dir=None)
    assert settings.results.is_relative_to("/data")  # results/<job>/ land on the head's folder
    # a worker only computes: the inputs read-only at the head's paths (every checkpoint root), a home
    # of its own for caches, and none of the service's settings or secrets (no database, no results)
    inputs = {v.split(":")[-2]: v for v in worker["volumes"] if v.endswith(":ro")}
    roots = head["environment"]["LCTX_CHECKPOINT_ROOTS"].split(",")
    assert set(inputs) == {*roots, "/datasets"}, inputs
    assert [v for v in worker["volumes"] if not v.endswith(":ro")] == ["worker-home:/worker"]
    assert "worker-home" in cluster["volumes"] and worker["env_file"] == []
    assert set(worker["environment"]) == {"LCTX_HOME", "RAY_AUTH_TOKEN"} and worker["environment"]["LCTX_HOME"] == "/worker"
    assert worker["environment"]["RAY_AUTH_TOKEN"] == head["environment"]["RAY_AUTH_TOKEN"]


def has_docker_compose() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not has_docker_compose(), reason="no `docker compose` here: the schema tests above stand in")
@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_docker_compose_accepts_the_file(name: str, tmp_path: Path) -> None:
    folder = tmp_path / "docker"
    shutil.copytree(DOCKER, folder)
    (folder / ".env").write_text((DOCKER / ".env.example").read_text() + "\nRAY_AUTH_TOKEN=0123\nVLLM_MODEL_DIR=m\n")
    files = ["-f", str(folder / "docker-compose.yml")] if name == "docker-compose.multinode.yml" else []
    run = subprocess.run(["docker", "compose", *files, "-f", str(folder / name), "--env-file", str(folder / ".env"),
                          "config", "-q"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_first_checkpoint_root_is_writable_and_the_users_checkpoints_read_only(compose: dict) -> None:
    """`lctx serve` writes an example checkpoint into the first root; on the read-only
    /checkpoints mount that would stop the container from starting."""
    lctx = compose["services"]["lctx"]
    mounts = {m.group(1): [m.group(2)] if m.group(2) else []
              for m in (re.search(r":(/[^:]+)(?::(ro|rw))?$", v) for v in lctx["volumes"])}
    dockerfile = (DOCKER / "Dockerfile").read_text()
    for roots in (re.search(r"LCTX_CHECKPOINT_ROOTS=(\S+)", dockerfile).group(1),
                  lctx["environment"]["LCTX_CHECKPOINT_ROOTS"]):
        settings = Settings(home=Path(lctx["environment"]["LCTX_HOME"]), checkpoint_roots=roots)
        first, *rest = settings.roots
        assert first.is_relative_to(settings.home) and mounts[str(settings.home)] == []  # a writable volume
        assert Path("/checkpoints") in rest and mounts["/checkpoints"] == ["ro"]
    assert lctx["environment"]["LCTX_REPLICA_ID"]  # stable across re-created containers: recovery at once
    assert lctx["stop_grace_period"]


@pytest.mark.integration
def test_healthcheck_command_probes_a_real_server(tmp_path: Path) -> None:
    from service.app import create_app
    from tests.helpers import ThreadServer, make_settings

    code = re.search(r'^  CMD python3 -c "(.+)" \|\| exit 1$', (DOCKER / "Dockerfile").read_text(), re.M).group(1)
    with ThreadServer(create_app(make_settings(tmp_path))) as srv:
        env = dict(os.environ, LCTX_HOST="0.0.0.0", LCTX_PORT=str(srv.port))  # as the image sets them
        assert subprocess.run([sys.executable, "-c", code], env=env, timeout=30).returncode == 0
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=30).returncode != 0


def test_entrypoint_refuses_an_unwritable_data_folder_and_runs_the_command(tmp_path: Path) -> None:
    env = dict(os.environ, LCTX_HOME=str(tmp_path / "data"), LCTX_RAY_HEAD="0")
    env.pop("RAY_ADDRESS", None)
    ran = subprocess.run(["bash", str(DOCKER / "entrypoint.sh"), "sh", "-c", "echo ran"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0 and ran.stdout == "ran\n", ran.stderr
    # a folder the service user cannot write: root-owned (what Docker creates for a missing bind mount)
    shared = Path(tempfile.mkdtemp(prefix="lctx-entry-"))
    try:
        script = shared / "entrypoint.sh"
        shutil.copy(DOCKER / "entrypoint.sh", script)
        locked = shared / "data"
        locked.mkdir()
        shared.chmod(0o755)
        if os.geteuid() == 0:
            prefix = ["runuser", "-u", "nobody", "--"]
        else:
            prefix = []
            locked.chmod(0o555)
        env["LCTX_HOME"] = str(locked)
        refused = subprocess.run([*prefix, "bash", str(script), "sh", "-c", "echo ran"], env=env,
                                 capture_output=True, text=True, timeout=30)
        assert refused.returncode == 1 and refused.stdout == ""
        assert f"cannot write {locked}" in refused.stderr and "chown" in refused.stderr, refused.stderr
    finally:
        locked.chmod(0o755)
        shutil.rmtree(shared, ignore_errors=True)


def test_guide_deploy_commands_name_files_and_profiles_that_exist(compose: dict) -> None:
    guide = REPO / "docs" / "guide"
    assert (guide / "deploy.md").read_text().startswith("# Deploy on a GPU node")
    assert (guide / "upgrading.md").read_text().startswith("# Upgrading")
    deploy = (guide / "deploy.md").read_text() + (guide / "upgrading.md").read_text()
    assert "ray start --address" in deploy
    commands = re.findall(r"^docker compose .+$", deploy, re.M)
    assert commands
    profiles = {p for s in compose["services"].values() for p in s.get("profiles", [])}
    for command in commands:
        for f in re.findall(r"-f (\S+)", command):
            assert (REPO / f).is_file(), command
        for p in re.findall(r"--profile (\S+)", command):
            assert p in profiles, command
    for name in re.findall(r"`(LCTX_[A-Z_]+)`", deploy):
        assert name in settings_env_names() | COMPOSE_ONLY, name


def test_vllm_profile_serves_beside_lctx_on_the_gpus_and_lctx_may_reach_it(compose: dict) -> None:
    vllm = compose["services"]["vllm"]
    assert vllm["profiles"] == ["vllm"]
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert all(p.startswith("${LCTX_BIND:-127.0.0.1}:") for p in vllm["ports"])
    assert all(v.endswith(":ro") for v in vllm["volumes"])  # it reads the checkpoints, never writes them
    flags = dict(f.removeprefix("--").split("=", 1) for f in vllm["command"] if "=" in f)
    assert flags["model"].startswith("/checkpoints/") and "tensor-parallel-size" in flags
    assert "--enable-prefix-caching" in vllm["command"]
    assert flags["port"] == "8001" and vllm["ports"][0].endswith(":8001")
    hosts = compose["services"]["lctx"]["environment"]["LCTX_ENDPOINT_HOSTS"]
    assert "vllm" in hosts and "*" not in hosts  # the compose service, not any host
    for page in (REPO / "README.md", REPO / "docs" / "guide" / "endpoints.md"):  # the recipe and the guide
        assert "--profile vllm" in page.read_text() and "SGLang" in page.read_text(), page.name
