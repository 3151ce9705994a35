"""The cost estimate against the run (issue #60, finding 1 and build item 1), as a new user
meets it: one toy job on a demo checkpoint is measured, then a job on the real model (SmolLM2-135M,
never run here) is estimated and run. For each job: the seconds the service's estimate said
before it ran (`service/cost.py`), the seconds it took (the coordinator's own measure, loading
included, as the record keeps it), and what the first estimator said (one "overall" tokens per
second over every job, whatever the model: the toy's speed taken as SmolLM2's).

Jobs run through the service's own path: `submit` (validated, planned), claimed, `run_job`
(the coordinator with an in-process worker on this CPU), recorded in <home>/throughput.json.

Usage: python bench/cost_estimate.py [--trials 8] [--length 1024] [--threads 2]
Writes bench/results/cost_estimate.{json,md}."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)

    from service.core.settings import Settings
    from service.cost import duration, read_throughput
    from service.demo import REAL_MODEL
    from service.runner.coordinator import run_job
    from service.schemas import JobCreate
    from service.store import Store
    from service.submission import submit

    real = Path(os.environ.get("LCTX_TEST_MODELS") or REPO / "var" / "models") / REAL_MODEL
    if not (real / "config.json").is_file():
        sys.exit(f"{real} is missing: run the test suite's real_model fixture once (or `make serve`) first")
    home = Path(tempfile.mkdtemp(prefix="lctx-cost-"))
    settings = Settings(home=home, checkpoint_roots=[REPO / "demo" / "checkpoints", real.parent], executor=False,
                        scheduler=False, device="cpu")
    settings.prepare()
    store = Store(settings.database)
    store.upgrade(settings)
    rows = []
    jobs = [("toy (demo/checkpoints/softmax)", str(REPO / "demo" / "checkpoints" / "softmax"), [256], 40),
            (f"{REAL_MODEL} (never run here)", str(real), [args.length], args.trials),
            (f"{REAL_MODEL} again (measured once)", str(real), [args.length], args.trials)]
    overall: tuple[float, float] | None = None  # the first estimator's record: tokens, seconds over every job
    for label, checkpoint, lengths, trials in jobs:
        request = JobCreate(checkpoint=checkpoint, tasks=[{"name": "passkey", "lengths": lengths, "trials": trials}])
        _, plan = submit(store, settings, request, dry_run=True)
        work = plan.prompt_tokens + plan.generated_tokens
        old = None if overall is None else round(work / (overall[0] / overall[1]), 1)
        job, _ = submit(store, settings, request)
        assert job is not None
        claimed = store.claim_next("bench")
        assert claimed is not None and claimed.id == job.id
        t = time.monotonic()
        status = run_job(settings, job.id, store)
        took = time.monotonic() - t
        runs = read_throughput(settings)["runs"].get(job.fingerprint, [])
        measured = runs[-1]["seconds"] if runs else took
        overall = (work + (overall[0] if overall else 0), measured + (overall[1] if overall else 0))
        rows.append({"job": label, "status": status, "tokens": work, "estimate_s": plan.seconds, "basis": plan.basis,
                     "first_estimator_s": old, "took_s": round(measured, 1),
                     "ratio": round(measured / plan.seconds, 2) if plan.seconds else None})
        print(json.dumps(rows[-1]), flush=True)
    store.close()
    out = REPO / "bench" / "results"
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads {args.threads}"
    (out / "cost_estimate.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    lines = ["# Cost estimate against the run", "", f"`python bench/cost_estimate.py --trials {args.trials} "
             f"--length {args.length} --threads {args.threads}` on {machine}. Passkey jobs through the service's "
             "own path (submit, claim, the coordinator with an in-process worker on the CPU); `took` is the "
             "coordinator's measure, loading included.", "",
             "| job | tokens of work | estimate | first estimator (overall tok/s) | took | took / estimate |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        first = duration(r["first_estimator_s"]) if r["first_estimator_s"] is not None else "(nothing measured)"
        estimate = duration(r["estimate_s"]) if r["estimate_s"] is not None else "none"
        lines.append(f"| {r['job']} | {r['tokens']:,} | {estimate} | {first} | {duration(r['took_s'])} | "
                     f"{r['ratio']} |")
    lines += ["", "Bases:", ""] + [f"- {r['job']}: {r['basis']}" for r in rows]
    (out / "cost_estimate.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
