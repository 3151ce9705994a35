"""`lctx score longbench`: LongBench's official prediction layout scored with its rules
(`evaluator.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of pred.py's <dataset>.jsonl files (pred, answers, "
                   "all_classes, length per line)")
    p.add_argument("--e", action="store_true", help="LongBench-E: scores per length bucket")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from checkpoints.jsonfiles import write_json_atomic
    from evaluators.longbench.evaluator import score_prediction_dir

    result = score_prediction_dir(Path(args.pred_dir), e=args.e)
    write_json_atomic(Path(args.pred_dir) / "result.json", result)
    return Scored(result)


SCORER = Scorer("longbench", "DIR/<dataset>.jsonl of {pred, answers, all_classes, length} -> DIR/result.json",
                arguments, run)
