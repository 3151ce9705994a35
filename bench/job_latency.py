"""A small job's latency on a running service: what the service adds around its samples'
compute (issue #40 item 2, #41 item 5). `lctx serve` in a subprocess (SQLite, local Ray with
2 CPUs, the demo checkpoints), one job run first so the machine is warm, then passkey jobs of
20 and 40 trials at 1,000 tokens on demo-softmax, alternating, timed from POST to the first
answer that says succeeded (polled every 10 ms). The fixed cost is 2 x T(20) - T(40): the
samples' compute cancels, what each job pays once remains.

Two configurations of the same code: LCTX_WARM_WORKERS=0 (every job starts fresh Ray actors
that import torch and load the checkpoint: the behaviour before warm workers) and the default
(a worker keeps the checkpoint loaded for the next job of it). Medians over rounds.

Usage: python bench/job_latency.py [--rounds 3] [--out bench/results]"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.service import timed_job, wait_ready, wait_registered  # noqa: E402

LENGTH, SMALL, LARGE = 1000, 20, 40


def start(tmp: Path, port: int, warm: bool) -> subprocess.Popen:
    env = dict(os.environ, LCTX_HOME=str(tmp / "var"), LCTX_RAY_NUM_CPUS="2", LCTX_MAX_RUNNING_JOBS="1",
               LCTX_SCHEDULER="false", LCTX_DEMO_REAL_MODEL="false", LCTX_WARM_WORKERS="4" if warm else "0")
    return subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "warning"], cwd=tmp, env=env,
                            stdout=(tmp / "service.log").open("wb"), stderr=subprocess.STDOUT)


def job_seconds(c: httpx.Client, trials: int, seed: int) -> tuple[float, dict]:
    """POST to succeeded, seconds; the job's results' `work`."""
    return timed_job(c, {"checkpoint": "demo-softmax",
                         "tasks": [{"name": "passkey", "lengths": [LENGTH], "trials": trials, "seed": seed}]})


def measure(warm: bool, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        tmp, port = Path(d), 8400 + os.getpid() % 500
        proc = start(tmp, port, warm)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc, timeout=180)
            with httpx.Client(base_url=url, timeout=120) as c:
                wait_registered(c, "demo-softmax", timeout=60)
                job_seconds(c, SMALL, 999)  # the service has run one such job
                small, large, warm_seen = [], [], []
                for r in range(rounds):
                    s, work = job_seconds(c, SMALL, 2 * r)
                    small.append(s)
                    warm_seen.append(work.get("warm_workers", 0))
                    s, work = job_seconds(c, LARGE, 2 * r + 1)
                    large.append(s)
                    warm_seen.append(work.get("warm_workers", 0))
        finally:
            proc.terminate()
            proc.wait(timeout=90)
    t20, t40 = statistics.median(small), statistics.median(large)
    return {"warm_workers": warm, "t20_s": round(t20, 2), "t40_s": round(t40, 2),
            "fixed_s": round(2 * t20 - t40, 2), "t20_all": [round(x, 2) for x in small],
            "t40_all": [round(x, 2) for x in large], "jobs_on_a_warm_worker": f"{sum(warm_seen)}/{len(warm_seen)}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    rows = [measure(False, args.rounds), measure(True, args.rounds)]
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "load_1min": round(os.getloadavg()[0], 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "job_latency.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    lines = ["# A small job's latency on a running service", "",
             f"Machine: {machine['cpus']} CPUs, {machine['platform']}, load (1 min) {machine['load_1min']} after. "
             f"`lctx serve` (SQLite, local Ray, 2 CPUs), passkey at {LENGTH} tokens on demo-softmax, POST to "
             f"succeeded, medians of {args.rounds} rounds after one warm-up job. Fixed cost = 2 x T({SMALL}) - "
             f"T({LARGE}): the samples' compute cancels. Target (issue #40): at most 0.5 s.", "",
             f"| workers | T({SMALL}) s | T({LARGE}) s | fixed cost s | jobs on a warm worker |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {'warm (default)' if r['warm_workers'] else 'fresh per job (LCTX_WARM_WORKERS=0)'} | "
                     f"{r['t20_s']} | {r['t40_s']} | {r['fixed_s']} | {r['jobs_on_a_warm_worker']} |")
    (args.out / "job_latency.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
