"""A RoPE sweep's jobs on a running service: what each job costs beyond its samples when the
checkpoint is the same and only the RoPE setting changes (the guide's comparison loop).

`lctx serve` in a subprocess (SQLite, local Ray with 2 CPUs, one job at a time) with the real
model (SmolLM2-135M-Instruct, fp32: 540 MB of weights; its conversion from var/models, as the
tests find it, or --model), then passkey at 1,000 tokens x 2 trials under each setting of
SETTINGS in turn, each timed from POST to the first answer that says succeeded (polled every
10 ms). Two configurations of the same code: LCTX_WARM_WORKERS=0 (each job starts Ray actors
that import torch and read the weights) and the default (a job of the same weights under
another setting takes the idle worker, which keeps its weights: `work.reloaded_workers`).
After each setting's job the same job runs once more (other trials): with the default its
workers hold that very model, so that job is the floor, the samples' compute and the
service's own round trip; the gap to it is what a setting change costs. A first job (not
timed) under the last setting makes the machine warm.

Usage: python bench/rope_sweep.py [--rounds 2] [--model DIR] [--out bench/results]"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.service import timed_job, wait_ready, wait_registered  # noqa: E402
from service.demo import REAL_MODEL, real_model_dir  # noqa: E402

SETTINGS = ("none", "yarn:2", "ntk:2", "yarn:4", "ntk:4")
LENGTH, TRIALS = 1000, 2


def start(tmp: Path, port: int, warm: bool, model: Path) -> subprocess.Popen:
    shutil.copytree(model, real_model_dir(tmp / "var" / "checkpoints"), copy_function=os.link)
    env = dict(os.environ, LCTX_HOME=str(tmp / "var"), LCTX_RAY_NUM_CPUS="2", LCTX_MAX_RUNNING_JOBS="1",
               LCTX_SCHEDULER="false", LCTX_DEMO_REAL_MODEL="true", LCTX_WARM_WORKERS="4" if warm else "0")
    return subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "warning"], cwd=tmp, env=env,
                            stdout=(tmp / "service.log").open("wb"), stderr=subprocess.STDOUT)


def job_seconds(c: httpx.Client, rope: str, seed: int) -> tuple[float, dict]:
    """POST to succeeded, seconds; the job's results' `work`."""
    return timed_job(c, {"checkpoint": REAL_MODEL, "rope": rope,
                         "tasks": [{"name": "passkey", "lengths": [LENGTH], "trials": TRIALS, "seed": seed}]})


def measure(warm: bool, rounds: int, model: Path) -> dict:
    with tempfile.TemporaryDirectory() as d:
        tmp, port = Path(d), 8900 + os.getpid() % 500
        proc = start(tmp, port, warm, model)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc, timeout=180)
            with httpx.Client(base_url=url, timeout=120) as c:
                wait_registered(c, REAL_MODEL)
                job_seconds(c, SETTINGS[-1], 999)  # the machine has run one such job
                seconds: dict[str, list[float]] = {s: [] for s in SETTINGS}
                again: list[float] = []  # the same setting's job once more: its workers hold that model
                reloaded = warm_seen = jobs = 0
                for r in range(rounds):
                    for rope in SETTINGS:
                        s, work = job_seconds(c, rope, r)
                        seconds[rope].append(s)
                        reloaded += work.get("reloaded_workers", 0)
                        warm_seen += work.get("warm_workers", 0)
                        s, work = job_seconds(c, rope, r + 100)
                        again.append(s)
                        warm_seen += work.get("warm_workers", 0)
                        jobs += 2
        finally:
            proc.terminate()
            proc.wait(timeout=90)
    per_setting = {s: round(statistics.median(v), 2) for s, v in seconds.items()}
    return {"warm_workers": warm, "median_s": per_setting, "all_s": {s: [round(x, 2) for x in v]
                                                                      for s, v in seconds.items()},
            "sweep_s": round(sum(per_setting.values()), 2), "jobs": jobs,
            "same_setting_again_s": round(statistics.median(again), 2),
            "workers_reloaded": reloaded, "workers_warm": warm_seen}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", type=Path, default=REPO / "var" / "models" / REAL_MODEL,
                    help="the real model's converted folder (the tests' cache)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    if not (args.model / "config.json").is_file():
        sys.exit(f"no converted model in {args.model}: run the real-model tests once (they convert it) or pass --model")
    rows = [measure(False, args.rounds, args.model), measure(True, args.rounds, args.model)]
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "load_1min": round(os.getloadavg()[0], 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rope_sweep.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    lines = ["# A RoPE sweep's jobs on a running service", "",
             f"Machine: {machine['cpus']} CPUs, {machine['platform']}, load (1 min) {machine['load_1min']} after. "
             f"`lctx serve` (SQLite, local Ray, 2 CPUs, one job at a time), {REAL_MODEL} (fp32), passkey at "
             f"{LENGTH} tokens x {TRIALS} trials under each RoPE setting in turn, POST to succeeded, medians of "
             f"{args.rounds} rounds after one untimed job. The samples' compute is the same in both rows: the "
             "difference is starting workers and reading the weights.", "",
             "| workers | " + " | ".join(SETTINGS) + " | sweep s | the same setting again s | "
             "workers that kept their weights |",
             "|---|" + "---:|" * (len(SETTINGS) + 3)]
    for r in rows:
        name = "kept (default)" if r["warm_workers"] else "fresh per job (LCTX_WARM_WORKERS=0)"
        lines.append(f"| {name} | " + " | ".join(str(r["median_s"][s]) for s in SETTINGS) +
                     f" | {r['sweep_s']} | {r['same_setting_again_s']} | {r['workers_reloaded']} of "
                     f"{r['jobs'] // 2} setting changes |")
    (args.out / "rope_sweep.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
