"""The CPU target of issue #41: `lctx eval` against lm-eval's `hf` model at batch 16, each as
a whole command (process start, imports, model load, prompt building, generation, scoring),
on RULER niah_single_1 at 2k tokens x 16 samples with the real model (SmolLM2-135M-Instruct,
float32). lm-eval runs its own RULER port (its generator, its samples: the same protocol);
lctx runs its own. Alternating runs, wall time each, medians; both on the same threads.

    .venv/bin/python bench/ruler_e2e_cpu.py [--rounds 2] [--checkpoint var/models/smollm2-135m-instruct]

lctx also runs with prompt lookup off (`--draft-tokens 0`), to show what drafting gives; each
lctx run's engine seconds (prefill, decoding, steps, drafted and kept tokens) come from its
results.json. Writes bench/results/ruler_e2e_cpu.{json,md}. The machine is shared: read the
load beside it."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LENGTH, SAMPLES, BATCH = 2048, 16, 16


def lctx(checkpoint: Path, out: Path, *extra: str) -> list[str]:
    return [str(BIN / "lctx"), "eval", "--checkpoint", str(checkpoint), "--task", "ruler", "--option",
            "tasks=niah_single_1", "--lengths", str(LENGTH), "--samples", str(SAMPLES), "--max-batch", str(BATCH),
            "--option", "bootstrap=0", "--out", str(out), "-q", *extra]


def engine_seconds(out: Path) -> dict:
    """The engine's clock of an lctx run (results.json: the task's `seconds`)."""
    return json.loads((out / "results.json").read_text())["results"]["ruler"]["seconds"]


def lm_eval(checkpoint: Path, out: Path) -> list[str]:
    return [str(BIN / "lm_eval"), "--model", "hf", "--model_args", f"pretrained={checkpoint},dtype=float32",
            "--tasks", "niah_single_1", "--batch_size", str(BATCH), "--limit", str(SAMPLES),
            "--metadata", json.dumps({"max_seq_lengths": [LENGTH]}), "--output_path", str(out)]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--checkpoint", type=Path, default=REPO / "var" / "models" / "smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    plain = "lctx, no prompt lookup"
    times: dict[str, list[float]] = {"lctx": [], plain: [], "lm-eval hf": []}
    engine: dict[str, list[dict]] = {"lctx": [], plain: []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            for name, extra in (("lctx", ()), (plain, ("--draft-tokens", "0"))):
                out = Path(d) / f"{name}{r}".replace(" ", "_").replace(",", "")
                times[name].append(timed(lctx(args.checkpoint, out, *extra), env))
                engine[name].append(engine_seconds(out))
            times["lm-eval hf"].append(timed(lm_eval(args.checkpoint, Path(d) / f"lm{r}"), env))
            print({k: [round(x, 1) for x in v] for k, v in times.items()}, engine, flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    report = {"machine": f"{platform.platform()}, {os.cpu_count()} cores", "load_after": os.getloadavg()[0],
              "threads": args.threads, "seconds": times, "median": med, "engine": engine,
              "ratio": round(med["lm-eval hf"] / med["lctx"], 2)}
    out = REPO / "bench" / "results"
    (out / "ruler_e2e_cpu.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["# RULER niah_single_1 at 2k x 16, whole commands: lctx eval vs lm-eval hf (batch 16), CPU", "",
             f"{report['machine']}, {args.threads} threads, load (1 min) {report['load_after']:.1f} after; the real "
             "model (SmolLM2-135M-Instruct, float32). Each a whole process (imports, load, prompts, generation, "
             f"scoring); lm-eval's own RULER port draws its own samples. Medians of {args.rounds} alternating runs. "
             "Target (issue #41): lctx at least 3x faster.", "",
             "| system | runs (s) | median s |", "|---|---|---:|"]
    for k, v in times.items():
        lines.append(f"| {k} | {', '.join(f'{x:.1f}' for x in v)} | {med[k]:.1f} |")
    lines += ["", f"lm-eval hf / lctx: **{report['ratio']}x** (without prompt lookup: "
              f"{med['lm-eval hf'] / med[plain]:.2f}x)", "",
              "lctx's engine per run (results.json `seconds`):", "",
              "| run | prefill s | decode s | decode steps | drafted tokens | kept tokens |", "|---|---:|---:|---:|---:|---:|"]
    for name, runs in engine.items():
        for s in runs:
            lines.append(f"| {name} | {s['prefill_s']:.1f} | {s['decode_s']:.1f} | {s['decode_steps']} | "
                         f"{s.get('drafted_tokens', 0)} | {s.get('kept_tokens', 0)} |")
    lines.append("")
    (out / "ruler_e2e_cpu.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
