"""`lctx score ruler-v2`: NeMo-Skills' RULER v2 generations scored as eval_ruler2 and
eval_mcq (`scoring.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="NeMo-Skills' output folder (its eval-results/ruler2.<setup>."
                                                     "<task>/output.jsonl files) or an lctx run's folder")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.ruler_v2.scoring import OUTPUT, score_prediction_dir

    result = score_prediction_dir(Path(args.pred_dir))
    return Scored(result, (f"wrote {Path(args.pred_dir) / OUTPUT}",))


SCORER = Scorer("ruler-v2", "DIR of NeMo-Skills' ruler2 generations -> each task's accuracy per setup and "
                "compute_score's mean, DIR/result.json", arguments, run, aliases=("ruler_v2", "ruler2"))
