"""Service benchmark: status reads under load while a job runs, and a burst of job
submissions. Starts `lctx serve` in a subprocess (SQLite WAL, local Ray) in a temp dir,
drives it from this process over loopback, and saves JSON + markdown.

1. With one evaluation job running, N client threads poll GET /v1/jobs/{id} for a fixed
   time: requests per second and p50/p99 latency.
2. 1,000 POST /v1/jobs from N threads as fast as they go: time to accept them all, then
   every accepted id is checked in the database (none lost, none duplicated).

Usage: python bench/service.py [--seconds 10] [--threads 4] [--burst 1000] [--out bench/results]"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.store import Store  # noqa: E402
from tests.helpers import free_port, tiny_checkpoint  # noqa: E402

LONG_TASK = {"name": "passkey", "lengths": [512], "trials": 100000, "seed": 0}
BURST_TASK = {"name": "passkey", "lengths": [256], "trials": 1}


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def start(tmp: Path, port: int) -> subprocess.Popen:
    env = dict(os.environ, LCTX_HOME=str(tmp / "var"), LCTX_CHECKPOINT_ROOTS=str(tmp / "models"),
               LCTX_RAY_NUM_CPUS="2", LCTX_MAX_RUNNING_JOBS="1", LCTX_SCHEDULER="false")
    return subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port",
                             str(port), "--log-level", "warning"], cwd=tmp, env=env,
                            stdout=(tmp / "service.log").open("wb"), stderr=subprocess.STDOUT)


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the service exited during start-up")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the service did not become ready")


def wait_registered(c: httpx.Client, name: str, timeout: float = 180) -> None:
    """Until the service lists checkpoint `name` (the demos and the real model register in the
    background after start-up)."""
    deadline = time.monotonic() + timeout
    while not any(x["name"] == name for x in c.get("/v1/checkpoints").json()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"checkpoint {name} was not registered within {timeout:.0f} s")
        time.sleep(0.5)


def timed_job(c: httpx.Client, body: dict) -> tuple[float, dict]:
    """POST the job and poll every 10 ms until it ends: seconds to succeeded, and its results'
    `work` (RuntimeError when it did not succeed)."""
    t0 = time.perf_counter()
    r = c.post("/v1/jobs", json=body)
    r.raise_for_status()
    job = r.json()
    while True:
        state = c.get(f"/v1/jobs/{job['id']}").json()
        if state["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.01)
    seconds = time.perf_counter() - t0
    if state["status"] != "succeeded":
        raise RuntimeError(f"job {job['id']} {state['status']}: {state.get('error')}")
    return seconds, c.get(f"/v1/jobs/{job['id']}/results").json().get("work", {})


def status_reads(url: str, job_id: str, seconds: float, threads: int) -> dict:
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors = [0] * threads
    stop = time.monotonic() + seconds

    host, port = url.removeprefix("http://").split(":")

    def client(i: int) -> None:
        # http.client on a kept-alive connection: a light client, so the machine's two
        # cores go to the server and the running job rather than to the load generator.
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        while time.monotonic() < stop:
            t = time.perf_counter()
            conn.request("GET", f"/v1/jobs/{job_id}")
            r = conn.getresponse()
            r.read()
            latencies[i].append(time.perf_counter() - t)
            errors[i] += r.status != 200
        conn.close()

    started = time.monotonic()
    pool = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.monotonic() - started
    flat = [x for xs in latencies for x in xs]
    return {"requests": len(flat), "errors": sum(errors), "seconds": round(elapsed, 2),
            "requests_per_s": round(len(flat) / elapsed, 1),
            "p50_ms": round(percentile(flat, 50) * 1000, 2), "p99_ms": round(percentile(flat, 99) * 1000, 2),
            "mean_ms": round(statistics.fmean(flat) * 1000, 2), "client_threads": threads}


def burst(url: str, n: int, threads: int, db: str) -> dict:
    accepted: list[str] = []
    failures: list[str] = []
    lock = threading.Lock()
    counter = iter(range(n))

    def client() -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [BURST_TASK], "priority": -1})
                with lock:
                    (accepted if r.status_code == 202 else failures).append(
                        r.json()["id"] if r.status_code == 202 else f"{r.status_code} {r.text[:200]}")

    t = time.perf_counter()
    pool = [threading.Thread(target=client) for _ in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    elapsed = time.perf_counter() - t
    store = Store(db)
    with store.reading() as s:
        from sqlalchemy import select

        from service.store import JobRow

        stored = set(s.scalars(select(JobRow.id).where(JobRow.id.in_(accepted))))
    store.close()
    return {"submitted": n, "accepted": len(accepted), "refused": len(failures), "first_refusals": failures[:3],
            "persisted": len(stored), "lost": len(set(accepted) - stored), "duplicates": len(accepted) - len(set(accepted)),
            "seconds": round(elapsed, 2), "accepted_per_s": round(len(accepted) / elapsed, 1), "client_threads": threads}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lctx-bench-") as d:
        tmp = Path(d)
        tiny_checkpoint(tmp / "models" / "tiny")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start(tmp, port)
        try:
            wait_ready(url, proc)
            with httpx.Client(base_url=url, timeout=30) as c:
                assert c.post("/v1/checkpoints", json={"name": "tiny", "path": "tiny"}).status_code == 201
                job = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [LONG_TASK]}).json()
                deadline = time.monotonic() + 120
                while c.get(f"/v1/jobs/{job['id']}").json()["progress"].get("passkey", {}).get("done", 0) < 1:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the background job did not start scoring samples")
                    time.sleep(0.2)
                reads = status_reads(url, job["id"], args.seconds, args.threads)
                running = c.get(f"/v1/jobs/{job['id']}").json()
                bursts = burst(url, args.burst, args.threads, f"sqlite:///{tmp / 'var' / 'lctx.db'}")
                still_running = c.get(f"/v1/jobs/{job['id']}").json()["status"] == "running"
                c.post(f"/v1/jobs/{job['id']}/cancel")
        finally:
            proc.terminate()
            proc.wait(60)
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_average_before": load_before, "load_average_after": os.getloadavg()},
        "setup": "lctx serve (uvicorn, 1 process) + SQLite WAL + local Ray (2 CPUs), client threads in another "
                 "process on the same machine, loopback",
        "job_running_during_reads": {"task": LONG_TASK, "samples_done_after": running["progress"]["passkey"]["done"],
                                     "status_after_burst": "running" if still_running else "not running"},
        "status_reads": reads,
        "submission_burst": bursts,
        "targets": {"reads_per_s": 500, "p99_ms": 50},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "service.json").write_text(json.dumps(report, indent=2) + "\n")
    r, b = reads, bursts
    md = [
        "# Service benchmark",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}. {report['setup']}. Load average "
        f"(1 min) {load_before[0]:.1f} before, {report['machine']['load_average_after'][0]:.1f} after: the machine "
        "is shared, so other work competes for the two cores.",
        "",
        f"## GET /v1/jobs/{{id}} with a job running ({args.seconds:g} s, {r['client_threads']} client threads)",
        "",
        "| requests | errors | req/s | p50 ms | p99 ms | mean ms |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {r['requests']} | {r['errors']} | {r['requests_per_s']} | {r['p50_ms']} | {r['p99_ms']} | {r['mean_ms']} |",
        "",
        f"Target: at least 500 req/s with p99 under 50 ms. The job was scoring passkey samples throughout "
        f"({running['progress']['passkey']['done']} done when the reads ended).",
        "",
        f"## {b['submitted']} POST /v1/jobs in a burst ({b['client_threads']} client threads)",
        "",
        "| submitted | accepted (202) | refused | persisted | lost | duplicates | seconds | accepted/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {b['submitted']} | {b['accepted']} | {b['refused']} | {b['persisted']} | {b['lost']} | {b['duplicates']} "
        f"| {b['seconds']} | {b['accepted_per_s']} |",
        "",
        "Every accepted id was looked up in the database after the burst.",
        "",
    ]
    (out / "service.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
