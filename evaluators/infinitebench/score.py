"""`lctx score infinitebench`: the official scripts' preds_<task>.jsonl files scored as
compute_scores.py scores them (`scoring.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of preds_<task>.jsonl files as InfiniteBench's scripts "
                                                     "write them (<output_dir>/<model_name>/), or an lctx run's "
                                                     "samples.jsonl")
    p.add_argument("--model-name", default=None, help="compute_scores' --model_name (default: the folder's name; "
                                                      "gpt4 drops the first number of math_calc's predictions)")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.infinitebench.scoring import OUTPUT, score_prediction_dir

    table = score_prediction_dir(Path(args.pred_dir), args.model_name)
    return Scored(table, (f"wrote {Path(args.pred_dir) / OUTPUT}",))


SCORER = Scorer("infinitebench", "DIR of preds_<task>.jsonl files -> each task's compute_scores.py score and their "
                "average, DIR/result.json", arguments, run)
