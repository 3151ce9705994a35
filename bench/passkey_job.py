"""A passkey job on every demo checkpoint, timed: the evaluation loop before and
after the batched engine. Runs on whichever lctx is importable (the repository
it lives in, or another checkout given by --tree), so the same script times an
older commit: `python bench/passkey_job.py --tree /tmp/old --label before`.

Accuracy is read from samples.jsonl (same record layout in both), so the two
runs are compared on equal terms. Results are merged into
bench/results/passkey_job.{json,md} under the label.
Usage: python bench/passkey_job.py --label after [--trials 100] [--lengths 256] [--threads 2]"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMOS = REPO / "demo" / "checkpoints"


def run_one(tree: Path, checkpoint: Path, lengths: list[int], trials: int, threads: int) -> dict:
    """One passkey job in a fresh interpreter importing lctx from `tree`."""
    code = f"""
import json, sys, time, tempfile
from pathlib import Path
import torch
torch.set_num_threads({threads})
from checkpoints.loading import load_model
from evaluators import run_task
loaded = load_model({str(checkpoint)!r}, device="cpu")
out = Path(tempfile.mkdtemp())
t0 = time.perf_counter()
run_task(loaded, {{"name": "passkey", "lengths": {lengths!r}, "trials": {trials}, "seed": 0}}, out)
seconds = time.perf_counter() - t0
scores = [json.loads(l)["score"] for l in (out / "samples.jsonl").read_text().splitlines() if l.strip()]
print(json.dumps({{"seconds": seconds, "accuracy": sum(scores) / len(scores), "n": len(scores)}}))
"""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                         timeout=3600)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--tree", type=Path, default=REPO, help="checkout whose lctx is timed")
    ap.add_argument("--lengths", default="256")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.tree, capture_output=True,
                            text=True).stdout.strip()
    runs = {}
    for demo in sorted(p for p in DEMOS.iterdir() if (p / "config.json").is_file()):
        with tempfile.TemporaryDirectory():
            runs[demo.name] = run_one(args.tree, demo, lengths, args.trials, args.threads)
        print(demo.name, runs[demo.name], flush=True)
    path = args.out / "passkey_job.json"
    report = json.loads(path.read_text()) if path.is_file() else {}
    report[args.label] = {"commit": commit, "lengths": lengths, "trials": args.trials, "threads": args.threads,
                          "load_average": os.getloadavg(), "runs": runs, "measured_at": time.strftime("%Y-%m-%d %H:%M")}
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    labels = list(report)
    lines = ["# Passkey job on the demo checkpoints", "",
             f"passkey, lengths {lengths}, {args.trials} trials, seed 0, CPU, {args.threads} threads; seconds of "
             "`run_task` (model loaded before timing).", "",
             "| checkpoint | " + " | ".join(f"{lab} ({report[lab]['commit']}) s / acc" for lab in labels) + " |",
             "|---|" + "---|" * len(labels)]
    for name in sorted({n for lab in labels for n in report[lab]["runs"]}):
        cells = []
        for lab in labels:
            r = report[lab]["runs"].get(name)
            cells.append(f"{r['seconds']:.1f} / {r['accuracy']:.2f}" if r else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    (args.out / "passkey_job.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
