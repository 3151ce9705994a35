"""A job spread over a real two-node Ray cluster on loopback (one cluster and one service
for the module), the worker node with its own empty home and no database settings (workers
only compute: the coordinator writes every record and result): cancelled while its units run
on both nodes, every worker stops within a few seconds; then the worker node's processes are
killed by pid mid-job: the unit that node
was running runs again on the head with only its unfinished samples, the job finishes, no
sample is lost or duplicated, and the result equals a one-worker run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from evaluators.samplelog import SAMPLES_FILE, sample_files
from service.core.layout import RESULTS_FILE, TASK_RESULT, job_path, job_results, task_path
from service.core.status import SUCCEEDED
from service.runner.coordinator import run_job
from service.runner.progress import unit_notes
from service.store import Store
from tests.helpers import (
    KILL_MID_UNIT_BATCH,
    TwoNodeRay,
    descendants,
    free_port,
    make_settings,
    ready,
    tiny_checkpoint,
    wait_for,
    wait_job,
)

pytestmark = pytest.mark.integration  # a two-node Ray cluster and `lctx serve`

TASK = {"name": "passkey", "lengths": [4096], "trials": 36, "seed": 5}  # long enough to kill mid-unit
UNIT = 12  # samples per unit: 3 units over 2 workers


def lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@dataclass
class TwoNodeService:
    tmp: Path
    cluster: TwoNodeRay
    url: str
    proc: subprocess.Popen


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodeService]:
    tmp_path = tmp_path_factory.mktemp("two-nodes")
    tiny_checkpoint(tmp_path / "models" / "tiny")
    tiny_checkpoint(tmp_path / "models" / "tiny-other", seed=1)
    cluster = TwoNodeRay(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, LCTX_HOME=str(tmp_path / "var"), LCTX_CHECKPOINT_ROOTS=str(tmp_path / "models"),
               LCTX_RAY_ADDRESS=cluster.address, LCTX_JOB_WORKERS="2", LCTX_UNIT_SAMPLES=str(UNIT),
               LCTX_SCHEDULER="false", LCTX_POLL_INTERVAL="0.1", LCTX_DEMO_CHECKPOINTS="false",
               LCTX_ENGINE_MAX_BATCH=str(KILL_MID_UNIT_BATCH))
    log = (tmp_path / "service.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--log-level", "warning"],
                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: proc.poll() is not None or ready(url), 120, 0.2, "service ready")
        assert proc.poll() is None, (tmp_path / "service.log").read_text()
        # served on another port than the client commands' default: `lctx serve` says what they need
        assert f"export LCTX_BASE_URL={url}" in (tmp_path / "service.log").read_text()
        assert cluster.address.startswith("127.0.0.1:")
        with httpx.Client(base_url=url, timeout=30) as c:
            for name in ("tiny", "tiny-other"):
                assert c.post("/v1/checkpoints", json={"name": name, "path": name}).status_code == 201
        yield TwoNodeService(tmp_path, cluster, url, proc)
    finally:
        proc.terminate()
        proc.wait(60)
        cluster.stop()


def environ(pid: int) -> dict[str, str]:
    """A process's environment as it started."""
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode(errors="replace").partition("=")[::2] for p in pairs if p)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(240)
def test_a_job_cancelled_while_its_units_run_on_two_nodes_stops_every_worker(two_nodes: TwoNodeService) -> None:
    cluster, results = two_nodes.cluster, two_nodes.tmp / "var" / "results"
    with httpx.Client(base_url=two_nodes.url, timeout=30) as c:
        job = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{**TASK, "seed": 9}]}).json()
        folder = task_path(results, job["id"], "passkey")

        def running_on_both() -> set[int] | None:
            pids = {n["pid"] for n in unit_notes(folder)}
            on_worker = set(descendants(cluster.worker_raylet))
            if pids & on_worker and pids - on_worker:
                return pids
            assert not (folder / TASK_RESULT).exists(), "the job ended before both nodes ran a unit"
            return None

        workers = wait_for(running_on_both, 180, 0.01, "units running on both nodes")
        # the worker node's workers run with its own empty home and no other lctx setting: no database URL
        for pid in set(workers) & set(descendants(cluster.worker_raylet)):
            env = environ(pid)
            assert env.get("LCTX_HOME") == str(cluster.worker_home), env
            assert not [k for k in env if k.startswith("LCTX_") and k != "LCTX_HOME"], env
        cancelled_at = time.monotonic()
        r = c.post(f"/v1/jobs/{job['id']}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
        wait_for(lambda: not any(alive(p) for p in workers), 15, 0.05, "every worker of the cancelled job to stop")
        stopped_in = time.monotonic() - cancelled_at
        assert stopped_in < 10, stopped_in
        # their CPUs (GPUs on a GPU node) are free again: a job runs. Another checkpoint's, so the
        # next test's job finds no warm worker whose prefix cache would make its prompts free
        again = c.post("/v1/jobs", json={"checkpoint": "tiny-other", "tasks": [{**TASK, "trials": 4, "lengths": [256]}]})
        assert wait_job(c, again.json()["id"], timeout=120)["status"] == "succeeded"
        partial = c.get(f"/v1/jobs/{job['id']}/results").json()
        assert partial["status"] == "cancelled" and partial["partial"] is True


@pytest.mark.timeout(300)
def test_killing_the_worker_node_mid_job_loses_and_duplicates_nothing(two_nodes: TwoNodeService) -> None:
    tmp_path, cluster, url = two_nodes.tmp, two_nodes.cluster, two_nodes.url
    with httpx.Client(base_url=url, timeout=30) as c:
        job = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [TASK]}).json()
        folder = task_path(tmp_path / "var" / "results", job["id"], "passkey")

        on_node: dict[Path, bool] = {}  # unit run -> ran on the worker node

        def worker_node_unit() -> Path | None:
            """The unit file of a run on the worker node once it holds a record (so the kill lands mid-unit)."""
            for note in (folder / "units").glob("*.json") if (folder / "units").is_dir() else []:
                if note not in on_node:
                    try:
                        pid = json.loads(note.read_text())["pid"]
                    except (ValueError, KeyError):
                        continue
                    on_node[note] = pid in descendants(cluster.worker_raylet)
                records = note.with_suffix(".jsonl")
                if on_node[note] and 1 <= lines(records) < UNIT:
                    return records
            assert not (folder / TASK_RESULT).exists(), "the job ended before the worker node recorded"
            return None

        unit = wait_for(worker_node_unit, 180, 0.002, "a unit on the worker node with a record")
        killed = cluster.kill_worker_node()
        assert killed
        before = lines(unit)  # what the killed run recorded (a line cut short by the kill is not counted)
        assert "samples" not in json.loads(unit.with_suffix(".json").read_text()), "the unit ended before the kill"
        done = wait_job(c, job["id"], timeout=240)
        assert done["status"] == "succeeded", (done.get("error"), (tmp_path / "service.log").read_text()[-4000:])
        assert done["attempts"] == 1  # the job was never requeued: only the unit ran again
        results = json.loads((job_path(tmp_path / "var" / "results", job["id"]) / RESULTS_FILE).read_text())
    work = results["work"]
    assert work["units"] == 3 and work["unit_runs"] >= 4 and len(work["reruns"]) >= 1, work
    stem = unit.stem.split("-")[0]  # u00001of00003: part 2 of 3
    part = f"passkey part {int(stem[1:6]) + 1}/{int(stem[8:])}"
    assert any(r.startswith(part) for r in work["reruns"]), (part, work)
    reruns = [n for n in unit_notes(folder) if n.get("samples") is not None and n["pid"] not in killed
              and n["unit"] == stem]
    # only its unfinished samples ran again: the re-run was handed every record the dead run had sent
    # (those on disk at the kill, and any answered just before it), and ran the rest
    assert [n["samples"] + n["resumed"] for n in reruns] == [UNIT] and reruns[0]["resumed"] >= before
    ids = [json.loads(line)["id"] for line in (folder / SAMPLES_FILE).read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 36 and sample_files(folder) == [folder / SAMPLES_FILE]
    pids = {n["pid"] for n in unit_notes(folder)}
    assert len(pids) >= 2  # both nodes worked; the re-run ran on the head
    # what the worker node kept in its own home: caches only (no results, records or database)
    kept = {p.relative_to(cluster.worker_home).parts[0] for p in cluster.worker_home.rglob("*")}
    assert kept <= {"triton", "scratch", "judgments"}, kept
    assert not list(cluster.worker_home.rglob("*.jsonl")) and not list(cluster.worker_home.rglob("*.db"))

    # the same job on one in-process worker: the same records, the same result
    settings = make_settings(tmp_path / "single", checkpoint_roots=[tmp_path / "models"], engine_max_batch=KILL_MID_UNIT_BATCH)
    store = Store(settings.database)
    store.create_all()
    single = store.add_job(checkpoint="tiny", checkpoint_path=str(tmp_path / "models" / "tiny"),
                           fingerprint="f" * 64, tasks=[TASK], rope=None, backend="auto", priority=0)
    store.claim_next("single")
    assert run_job(settings, single.id, store) == SUCCEEDED
    store.close()
    one = json.loads((job_results(settings, single.id)).read_text())
    assert one["results"]["passkey"]["result"] == results["results"]["passkey"]["result"]
