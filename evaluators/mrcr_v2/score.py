"""`lctx score mrcr_v2`: each model's responses to the release's rows scored with
run_evaluation.py's metric (`scoring.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of <model>.jsonl files: one line per row with answer, "
                                                     "data_file (the release CSV's name) and response (or "
                                                     "beyond_context: true); an mrcr_v2 samples.jsonl as it is")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.mrcr_v2.scoring import score_prediction_dir

    result = score_prediction_dir(Path(args.pred_dir))
    return Scored(result, (f"wrote {Path(args.pred_dir) / 'result.json'}",))


SCORER = Scorer("mrcr_v2", "DIR of <model>.jsonl files (MRCR v2 rows with each model's response) -> "
                "run_evaluation.py's mrcr_v2_metric per needle count, up to and at each length, DIR/result.json",
                arguments, run, aliases=("mrcr-v2",))
