"""Training speed of the demo checkpoints' configurations on this CPU: seconds per
step over a short run of each demo's exact `train_config` (steps aside), and the
full training time that implies. The wall-clock times in each `train_info.json`
were taken while other work shared the CPU; this script, run on an idle machine,
gives the time a newcomer should expect. Writes `bench/results/train_speed.{json,md}`.

    .venv/bin/python bench/train_speed.py [--steps 40] [--threads 1 2]"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from training.train import TrainConfig, demo_checkpoints, read_log, train  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def seconds_per_step(cfg: TrainConfig, steps: int) -> float:
    """Mean step time after the first 10 steps (allocator and thread-pool warm-up)."""
    run = dataclasses.replace(cfg, steps=steps, log_every=10)
    with tempfile.TemporaryDirectory() as tmp:
        train(run, Path(tmp) / "ckpt", progress=False)
        log = {r["step"]: r["seconds"] for r in read_log(Path(tmp) / "ckpt")}
    return (log[steps - 1] - log[10]) / (steps - 1 - 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    rows = []
    for name, path in demo_checkpoints().items():
        info = json.loads((path / "train_info.json").read_text())
        for threads in args.threads:
            cfg = TrainConfig(**{**info["train_config"], "threads": threads})
            load = os.getloadavg()[0]
            per_step = seconds_per_step(cfg, args.steps)
            rows.append({"checkpoint": name, "variant": cfg.variant, "backend": info["training_backend"],
                         "threads": threads, "seconds_per_step": round(per_step, 3), "steps": cfg.steps,
                         "projected_minutes": round(per_step * cfg.steps / 60, 1),
                         "recorded_minutes": round(info["seconds"] / 60, 1),
                         "recorded_threads": info["machine"]["threads"], "load_average_before": round(load, 2)})
            print(f"{name:16s} threads {threads}: {per_step:.3f} s/step -> "
                  f"{per_step * cfg.steps / 60:.1f} min for {cfg.steps} steps", flush=True)
    report = {"rows": rows, "torch": torch.__version__, "cpus": os.cpu_count(), "steps_timed": args.steps}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "train_speed.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["| checkpoint | backend | threads | s/step | projected min (steps) | recorded min (threads) "
             "| load avg before |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['checkpoint']} | {r['backend']} | {r['threads']} | {r['seconds_per_step']} | "
                     f"{r['projected_minutes']} ({r['steps']}) | {r['recorded_minutes']} ({r['recorded_threads']}) "
                     f"| {r['load_average_before']} |")
    (RESULTS / "train_speed.md").write_text(
        f"Demo training speed on this CPU ({os.cpu_count()} cores, torch {torch.__version__}); projected = "
        "s/step x the demo's steps; recorded = the wall clock in train_info.json (taken on a shared CPU).\n\n"
        + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
