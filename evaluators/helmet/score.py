"""`lctx score helmet`: HELMET's output files (or an lctx helmet run's samples.jsonl) scored
again with the code the `helmet` task scores with, printed beside the numbers the files
recorded, per dataset and length and as collect_results.py's table (`rescore`; imported
when the command runs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="a folder of HELMET's output files as eval.py writes them (with "
                   "their .json.score and -gpt4eval_o.json files) or of an lctx helmet run's samples.jsonl; or a "
                   "folder of such folders, one per model (HELMET's output/<model>/)")
    p.add_argument("--tolerance", type=float, default=1e-9, help="largest difference between a recomputed and a "
                   "recorded number not reported (default 1e-9)")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.helmet.rescore import differences, score_prediction_dir

    pred_dir = Path(args.pred_dir)
    result = score_prediction_dir(pred_dir)
    out = pred_dir / "helmet_scores.json"
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    notes = differences(result, args.tolerance) or ["every recomputed number equals the recorded one"]
    for model, r in result.items():
        kept = sorted({m for d in r["datasets"] for m in d["taken_as_recorded"]})
        if kept:
            notes.append(f"{model}: taken as recorded (no NLI model here): {', '.join(kept)}")
        if r["recomputed"]["dropped"]:
            notes.append(f"{model}: left out of the table (a reported metric missing): "
                         f"{', '.join(r['recomputed']['dropped'])}")
    return Scored(result, (*notes, f"wrote {out}"))


SCORER = Scorer("helmet", "DIR of HELMET output files (or an lctx helmet run's samples.jsonl) -> each dataset's "
                "metrics recomputed beside the recorded ones, and collect_results.py's categories and overall "
                "average per length; DIR/helmet_scores.json", arguments, run)
