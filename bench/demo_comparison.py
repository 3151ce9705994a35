"""The demo comparison: every demo checkpoint at 1x, 2x and 4x its training
length, with no RoPE scaling, YaRN and NTK (factor = the extension), scored by
the lctx passkey evaluator. Writes JSON, a markdown table and a plot to
`bench/results/demo_comparison.*`.

    .venv/bin/python bench/demo_comparison.py [--trials 100] [--multiples 1 2 4]

At 1x the scaled variants equal the unscaled model in spirit (factor 1), so
only "none" is run there."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkpoints.loading import load_model  # noqa: E402
from evaluators import run_task  # noqa: E402
from evaluators.registry import task_result  # noqa: E402
from training.train import demo_checkpoints  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ROPES = ("none", "yarn", "ntk")


def training_length(path: Path) -> int:
    info = path / "train_info.json"
    if info.is_file():
        return int(json.loads(info.read_text())["train_config"]["seq_len"])
    return int(json.loads((path / "config.json").read_text())["max_position_embeddings"])


def rope_override(kind: str, multiple: int) -> str | None:
    return None if kind == "none" else f"{kind}:{multiple}"


def run(trials: int, multiples: list[int], seed: int, only: list[str] | None = None) -> dict:
    rows = []
    for name, path in demo_checkpoints().items():
        if only and name not in only and name.removeprefix("demo-") not in only:
            continue
        base = training_length(path)
        for m in multiples:
            for kind in ROPES if m > 1 else ("none",):
                loaded = load_model(path, rope=rope_override(kind, m))
                start = time.perf_counter()
                with tempfile.TemporaryDirectory() as tmp:
                    result = run_task(loaded, {"name": "passkey", "lengths": [base * m], "trials": trials,
                                               "seed": seed}, Path(tmp))
                typed = task_result(result)
                point = next(p for s in typed.series if s.axis == "length" for p in s.points if p.key == base * m)
                cell = {"accuracy": point.value, "n": point.n}
                rows.append({"checkpoint": name, "variant": loaded.config.attention.variant,
                             "train_length": base, "multiple": m, "length": base * m, "rope": kind,
                             "accuracy": cell["accuracy"], "n": cell["n"],
                             "mean_prompt_tokens": typed.extra["prompt_tokens"][str(base * m)]["mean"],
                             "seconds": round(time.perf_counter() - start, 1)})
                print(f"{name:16s} {m}x ({base * m:5d}) {kind:5s} accuracy {cell['accuracy']:.2f}", flush=True)
    return {"task": "passkey", "trials": trials, "seed": seed, "multiples": multiples, "rows": rows,
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def markdown(report: dict) -> str:
    names = sorted({r["checkpoint"] for r in report["rows"]})
    cols = [(m, k) for m in report["multiples"] for k in (ROPES if m > 1 else ("none",))]
    cell = {(r["checkpoint"], r["multiple"], r["rope"]): r["accuracy"] for r in report["rows"]}
    head = "| checkpoint | " + " | ".join(f"{m}x {k}" for m, k in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for n in names:
        vals = [cell.get((n, m, k)) for m, k in cols]
        lines.append(f"| {n} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in vals) + " |")
    return (f"Passkey accuracy ({report['trials']} trials per cell, lctx passkey evaluator, seed "
            f"{report['seed']}); columns: multiple of the training length and RoPE scaling "
            "(factor = multiple).\n\n" + "\n".join(lines) + "\n")


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r["checkpoint"] for r in report["rows"]})
    fig, axes = plt.subplots(1, len(ROPES), figsize=(4 * len(ROPES), 3.4), sharey=True)
    for ax, kind in zip(axes, ROPES, strict=True):
        for n in names:
            pts = sorted((r["multiple"], r["accuracy"]) for r in report["rows"]
                         if r["checkpoint"] == n and (r["rope"] == kind or r["multiple"] == 1))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=n.removeprefix("demo-"))
        ax.set_xscale("log", base=2)
        ax.set_xticks(report["multiples"], [f"{m}x" for m in report["multiples"]])
        ax.set_title(f"RoPE: {kind}")
        ax.set_xlabel("prompt length / training length")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("passkey accuracy")
    axes[-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--multiples", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="+", help="evaluate only these demo checkpoints and keep the other "
                                                  "rows of an existing results file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not demo_checkpoints():
        sys.exit("no demo checkpoints under demo/checkpoints/: train them first (see demo/checkpoints/README.md)")
    report = run(args.trials, args.multiples, args.seed, args.only)
    RESULTS.mkdir(parents=True, exist_ok=True)
    previous = RESULTS / "demo_comparison.json"
    if args.only and previous.is_file():
        old = json.loads(previous.read_text())
        if (old["trials"], old["seed"], old["multiples"]) == (args.trials, args.seed, args.multiples):
            fresh = {r["checkpoint"] for r in report["rows"]}
            report["rows"] = [r for r in old["rows"] if r["checkpoint"] not in fresh] + report["rows"]
    (RESULTS / "demo_comparison.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "demo_comparison.md").write_text(markdown(report))
    plot(report, RESULTS / "demo_comparison.png")
    print(markdown(report))


if __name__ == "__main__":
    main()
