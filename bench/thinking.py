"""What a reasoning model loses without a thinking budget of its own, and what lctx's costs:
the thinking test model (`demo/thinking`: it writes an 85-token think block before a passkey
answer of a few tokens) on passkey with the protocol's answer budget of 10 tokens:

- thinking off (the template's empty block) and on (its own budget): the accuracy and the
  tokens thought per sample;
- thinking on with the block forced closed at 12 tokens (budget forcing): still answered;
- thinking on with ONE budget for block and answer (what a harness without a think phase does:
  no plan, the block's text scored): the answer is cut before it is written.

Saves bench/results/thinking.json and thinking.md. CPU, one thread; about a minute."""

from __future__ import annotations

import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from checkpoints.loading import load_model
from evaluators.registry import make_evaluator
from evaluators.run import run_evaluator
from evaluators.thinking import ThinkPlanner

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
SPEC = {"name": "passkey", "lengths": [256, 264, 272], "trials": 10, "chat_template": True}


def run(loaded, folder: Path, **options) -> dict:
    started = time.perf_counter()
    entry = run_evaluator(make_evaluator({**SPEC, **options}), loaded, folder)
    records = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    result = entry["result"]
    metrics = {m["name"]: m["value"] for m in result["metrics"]}
    return {"options": options, "accuracy": metrics["accuracy"], "summary": result["summary"],
            "thinking_tokens_mean": metrics.get("thinking_tokens_mean"),
            "thinking_truncated": metrics.get("thinking_truncated"),
            "answer_tokens_mean": sum(len(r.get("prediction", "")) for r in records) / len(records),
            "seconds": round(time.perf_counter() - started, 2)}


def main() -> None:
    torch.set_num_threads(1)
    loaded = load_model(ROOT / "demo" / "thinking")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, options in (("thinking off", {"thinking": "off"}), ("thinking on", {"thinking": "on"}),
                              ("thinking on, block forced closed at 12", {"thinking": "on", "thinking_budget": 12})):
            rows.append({"setting": name, **run(loaded, Path(tmp) / name.replace(" ", "_"), **options)})
        # One budget for block and answer: the plan taken off every request, as a harness without a
        # think phase runs the model (the block's text is what gets scored).
        original = ThinkPlanner.attach
        ThinkPlanner.attach = lambda self, built: built  # type: ignore[method-assign]
        try:
            rows.append({"setting": "thinking on, one budget (no think phase)",
                         **run(loaded, Path(tmp) / "shared", thinking="on")})
        finally:
            ThinkPlanner.attach = original  # type: ignore[method-assign]
    doc = {"model": "demo/thinking", "task": SPEC, "rows": rows,
           "machine": {"platform": platform.platform(), "torch": torch.__version__, "threads": 1}}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "thinking.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = ["# Thinking budgets on the thinking test model (`bench/thinking.py`)", "",
             f"passkey at {SPEC['lengths']} tokens, {SPEC['trials']} trials each, answer budget 10 tokens, "
             "chat template on; CPU, one thread.", "",
             "| setting | accuracy | thinking tokens (mean) | blocks closed at the budget | seconds |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['accuracy']:.2f} | {r['thinking_tokens_mean'] if r['thinking_tokens_mean'] is not None else '-'} "
                     f"| {r['thinking_truncated'] if r['thinking_truncated'] is not None else '-'} | {r['seconds']} |")
    (OUT / "thinking.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
