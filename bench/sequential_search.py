"""Sequential effective-length search against the full grid (issue 26, item 2;
docs/protocols/sequential.md): the same effective length for how many samples.

(a) Simulated models over 1k..128k (doubling, 8 lengths) whose unit scores are drawn
    from known curves (RULER-like: 13 tasks around a curve; passkey-like: one Bernoulli),
    500 units per cell as RULER's grid: the search's answer, the grid's answer, the truth,
    and the share of the grid's samples the search spent, over many seeds.
(b) The real pretrained model (--checkpoint) over 1k..8k with passkey and RULER
    niah_single_1, through `run_task` (the path of `lctx eval` and the service worker):
    the sequential search first, then the full grid in the same folder (it reuses the
    search's samples: they are the grid's first samples of each length and carry the same
    configuration), both answers compared.

Saves bench/results/sequential_search.{json,md,png}. The real part is slow on a CPU
(minutes per length at 8k): run it with `nice`; samples already in --work are reused.
Usage: python bench/sequential_search.py [--checkpoint var/checkpoints/smollm2-135m-instruct]
       [--trials 20] [--part all|simulated|real]"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from evaluators.sequential.search import SearchConfig, grid_effective_length
from evaluators.sequential.simulate import Simulated, grid_answer, logistic_curve, search

REPO = Path(__file__).resolve().parents[1]
SIM_LENGTHS = [1024 << k for k in range(8)]  # 1k .. 128k
SIM_CAP = 500  # RULER's samples per task and length
REAL_LENGTHS = [1024, 2048, 4096, 8192]
RULER_THRESHOLD = 85.6


def simulated(seeds: int, block: int, alpha: float) -> list[dict[str, Any]]:
    """Per scenario: the search against the grid on `seeds` draws of the same known curve."""
    rng = np.random.default_rng(2026)
    scenarios = [
        # RULER's 13 tasks around a curve passing 85.6 up to 16k: 95 at 1k falling to ~30 at 128k
        ("ruler-13-tasks, crossing between 16k and 32k", 13, 0.8555, 14.6, 0.9, 0.12),
        ("ruler-13-tasks, crossing between 4k and 8k", 13, 0.8555, 12.5, 0.7, 0.12),
        ("passkey-like (one Bernoulli), threshold 0.5, crossing between 8k and 16k", 1, 0.5, 13.5, 1.5, 0.0),
        ("passkey-like (one Bernoulli), threshold 0.5, crossing between 32k and 64k", 1, 0.5, 15.5, 1.5, 0.0),
    ]
    # RULER README's Llama-3.1-8B row (4k..128k: 95.5 94.8 93.7 91.6 87.4 77.0), 1k and 2k set to 96.0 and
    # 95.8 (not measured by NVIDIA): 64k lies 1.85 points above the threshold, a hard cell.
    llama = np.array([96.0, 95.8, 95.5, 94.8, 93.7, 91.6, 87.4, 77.0]) / 100
    offsets = rng.uniform(-0.12, 0.12, size=13)
    published = Simulated(SIM_LENGTHS, np.clip(llama[:, None] + (offsets - offsets.mean())[None, :], 0, 1))
    out = []
    for name, tasks, threshold, crossing, slope, spread in [("ruler-13-tasks, Llama-3.1-8B's published curve "
                                                             "(64k at 87.4)", 13, 0.8555, 0, 0, 0), *scenarios]:
        model = published if crossing == 0 else logistic_curve(SIM_LENGTHS, crossing, threshold, slope, tasks,
                                                                spread, rng)
        truth = model.true_effective_length(threshold)
        config = SearchConfig(lengths=SIM_LENGTHS, cap=SIM_CAP, block=block, alpha=alpha, threshold=threshold)
        rows = []
        for _ in range(seeds):
            grid = model.draws(rng, SIM_CAP)
            state = search(config, grid)
            rows.append({"search": state.effective_length(), "grid": grid_answer(config, grid),
                         "spent": state.spent, "confident": state.confident, "cells": len(state.cells)})
        grid_units = SIM_CAP * len(SIM_LENGTHS)
        shares = np.array([r["spent"] / grid_units for r in rows])
        out.append({
            "scenario": name, "tasks": tasks, "threshold": threshold, "true_means": model.means.round(4).tolist(),
            "lengths": SIM_LENGTHS, "true_effective_length": truth, "seeds": seeds, "cap": SIM_CAP,
            "block": block, "alpha": alpha,
            "agree_with_grid": sum(r["search"] == r["grid"] for r in rows) / seeds,
            "agree_with_truth": sum(r["search"] == truth for r in rows) / seeds,
            "grid_agrees_with_truth": sum(r["grid"] == truth for r in rows) / seeds,
            "confident": sum(r["confident"] for r in rows) / seeds,
            "share_of_grid_samples": {"mean": float(shares.mean()), "median": float(np.median(shares)),
                                      "p90": float(np.quantile(shares, 0.9)), "max": float(shares.max())},
            "grid_samples": grid_units * tasks, "mean_search_samples": float(np.mean([r["spent"] for r in rows])) * tasks,
        })
    return out


def real(checkpoint: Path, work: Path, trials: int, block: int, alpha: float, passkey_threshold: float,
         tasks: list[str], recorded_only: bool = False) -> list[dict[str, Any]]:
    """Both tasks through run_task: the search, then the grid (reusing the search's samples).
    `recorded_only`: run nothing, read what the sample logs hold (partial_result: a grid cut
    short is marked so, with the samples each length has)."""
    from checkpoints.loading import load_model
    from evaluators import partial_result, run_task
    from evaluators.registry import task_result

    loaded = None if recorded_only else load_model(str(checkpoint), device="cpu")
    specs = {
        "passkey": {"name": "passkey", "lengths": REAL_LENGTHS, "trials": trials, "seed": 0,
                    "search_threshold": passkey_threshold},
        "ruler/niah_single_1": {"name": "ruler", "tasks": ["niah_single_1"], "lengths": REAL_LENGTHS,
                                "samples": trials, "threshold": RULER_THRESHOLD, "bootstrap": 0},
    }
    out = []
    for key, spec in specs.items():
        if spec["name"] not in tasks:
            continue
        folder = work / key.replace("/", "-")
        sequential = {**spec, "search": "sequential", "search_block": block, "search_alpha": alpha}
        if spec["name"] == "ruler":
            sequential.pop("search_threshold", None)
        grid_spec = {k: v for k, v in spec.items() if k != "search_threshold"}
        t0 = time.perf_counter()
        seq_entry = partial_result(sequential, folder) if loaded is None else \
            run_task(loaded, sequential, folder, progress=_progress(f"{key} sequential"))
        seq_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        grid_entry = partial_result(grid_spec, folder) if loaded is None else \
            run_task(loaded, grid_spec, folder, progress=_progress(f"{key} grid"))
        grid_seconds = time.perf_counter() - t0
        if "result" not in seq_entry or "result" not in grid_entry:
            out.append({"task": key, "note": "no samples recorded yet"})
            continue
        seq = task_result(seq_entry)
        grid = task_result(grid_entry)
        means = _grid_means(grid, spec["name"])
        threshold = passkey_threshold if spec["name"] == "passkey" else (RULER_THRESHOLD - 0.05) / 100
        grid_eff = grid_effective_length(means, threshold)
        search = seq.extra["search"]
        out.append({
            "task": key, "lengths": REAL_LENGTHS, "samples_per_cell": trials, "block": block, "alpha": alpha,
            "threshold": threshold, "grid_means": {str(k): round(v, 4) for k, v in means.items()},
            "grid_effective_length": grid_eff, "search_effective_length": seq.metric("effective_length").value,
            "bracket": search["bracket"], "confident": search["confident"], "cells": search["cells"],
            "monotonicity": search["monotonicity"], "search_samples": search["samples_spent"],
            "grid_samples": search["grid_samples"], "share": search["samples_spent"] / search["grid_samples"],
            "summary": seq.summary, "seconds_search_with_reuse": round(seq_seconds, 1),
            "seconds_grid_rest": round(grid_seconds, 1),
            "grid_complete": not grid_entry.get("partial", False),
            "grid_samples_per_length": {str(k): v for k, v in _grid_counts(grid, spec["name"]).items()},
            "search_finished": search["finished"],
        })
    return out


def _grid_means(result: Any, task: str) -> dict[int, float]:
    """Per-length mean score in [0, 1] of a grid result (passkey: accuracy; RULER: the average)."""
    name = "accuracy" if task == "passkey" else "average"
    series = next(s for s in result.series if s.name == name and s.axis == "length" and not s.at)
    scale = 1.0 if task == "passkey" else 100.0
    return {int(p.key): p.value / scale for p in series.points}


def _grid_counts(result: Any, task: str) -> dict[int, int]:
    name = "accuracy" if task == "passkey" else "average"
    series = next(s for s in result.series if s.name == name and s.axis == "length" and not s.at)
    return {int(p.key): p.n for p in series.points}


def _progress(label: str):
    last = [0.0]

    def report(_name: str, done: int, total: int) -> None:
        if time.monotonic() - last[0] > 30 or done == total:
            last[0] = time.monotonic()
            print(f"{label}: {done}/{total} samples", flush=True)
    return report


def markdown(results: dict[str, Any]) -> str:
    lines = ["# Sequential effective-length search against the full grid", "",
             "`python bench/sequential_search.py` (docs/protocols/sequential.md). Share = samples the search ran / "
             "samples the full grid over the same candidate lengths runs.", ""]
    if results.get("simulated"):
        lines += ["## (a) Simulated models, 1k..128k (8 doubling lengths), 500 units per cell", "",
                  "| scenario | true eff. length | search = grid | search = truth | grid = truth | confident | "
                  "share (mean / p90 / max) |", "|---|---|---|---|---|---|---|"]
        for r in results["simulated"]:
            s = r["share_of_grid_samples"]
            lines.append(f"| {r['scenario']} | {r['true_effective_length']} | {r['agree_with_grid']:.1%} | "
                         f"{r['agree_with_truth']:.1%} | {r['grid_agrees_with_truth']:.1%} | {r['confident']:.1%} | "
                         f"{s['mean']:.1%} / {s['p90']:.1%} / {s['max']:.1%} |")
        lines += ["", f"Over {results['simulated'][0]['seeds']} draws each; block "
                  f"{results['simulated'][0]['block']}, alpha {results['simulated'][0]['alpha']}; share = units the "
                  "search drew / the grid's 8 x 500. True mean per length (1k..128k):", ""]
        lines += [f"- {r['scenario']}: " + ", ".join(f"{v:.3f}" for v in r["true_means"])
                  + f" (threshold {r['threshold']})" for r in results["simulated"]]
        lines += [""]
    if results.get("real"):
        lines += [f"## (b) {results['checkpoint']}, 1k..8k, {results['real'][0].get('samples_per_cell')} samples per "
                  "cell", "",
                  "| task | grid means | grid eff. length | search eff. length (bracket) | confident | "
                  "search / grid samples | share |", "|---|---|---|---|---|---|---|"]
        for r in results["real"]:
            if "note" in r:
                lines.append(f"| {r['task']} | {r['note']} | | | | | |")
                continue
            means = ", ".join(f"{k}: {v:.2f}" for k, v in r["grid_means"].items())
            if not r.get("grid_complete", True):
                means += f" (grid incomplete: samples per length {r['grid_samples_per_length']})"
            lines.append(f"| {r['task']} | {means} | {r['grid_effective_length']} | "
                         f"{r['search_effective_length']} ({r['bracket']}) | {r['confident']} | "
                         f"{r['search_samples']} / {r['grid_samples']} | {r['share']:.0%} |")
        lines += [""] + [f"- {r['task']}: {r['summary']}" for r in results["real"] if "summary" in r] + [""]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(r["scenario"].split(",")[0] + "\n" + r["scenario"].split(",")[-1].strip(),
             r["share_of_grid_samples"]["mean"]) for r in results.get("simulated", [])]
    rows += [(f"{r['task']}\n(real model, 1k..8k)", r["share"]) for r in results.get("real", []) if "share" in r]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.5))
    ax.barh([r[0] for r in rows], [100 * r[1] for r in rows], color="tab:blue")
    ax.axvline(10, color="tab:red", ls="--", label="target, simulated (10%)")
    ax.axvline(20, color="tab:orange", ls="--", label="target, real model (20%)")
    ax.set_xlabel("samples the sequential search ran, % of the full grid")
    ax.invert_yaxis()
    ax.legend(loc="lower right")
    ax.set_title("Sequential effective-length search: cost against the full grid")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, default=REPO / "var" / "checkpoints" / "smollm2-135m-instruct")
    ap.add_argument("--trials", type=int, default=20, help="samples per cell of the real model's grid")
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--passkey-threshold", type=float, default=0.5)
    ap.add_argument("--seeds", type=int, default=200, help="draws per simulated scenario")
    ap.add_argument("--part", choices=["all", "simulated", "real"], default="all")
    ap.add_argument("--tasks", default="passkey,ruler", help="real-model tasks: passkey, ruler or both")
    ap.add_argument("--recorded-only", action="store_true", help="run no sample: report what --work holds")
    ap.add_argument("--work", type=Path, default=REPO / "var" / "bench" / "sequential_search")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    path = args.out / "sequential_search.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    if args.part in ("all", "simulated"):
        results["simulated"] = simulated(args.seeds, args.block, args.alpha)
    if args.part in ("all", "real"):
        import torch

        torch.set_num_threads(2)
        results["checkpoint"] = str(args.checkpoint.name)
        results["real"] = real(args.checkpoint, args.work, args.trials, args.block, args.alpha,
                               args.passkey_threshold, args.tasks.split(","),
                               args.recorded_only)
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "sequential_search.md").write_text(markdown(results))
    plot(results, args.out / "sequential_search.png")
    print(markdown(results))


if __name__ == "__main__":
    main()


__all__ = ["Simulated"]
