"""`lctx score longbench-v2`: pred.py's prediction files scored as result.py scores them
(`scoring.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of prediction files as LongBench v2's pred.py writes")
    p.add_argument("--compensated", action="store_true", help="result.py's compensated=True: 0.25 for no answer")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.longbench_v2.scoring import score_prediction_dir

    table = score_prediction_dir(Path(args.pred_dir), compensated=args.compensated)
    return Scored(table, (f"wrote {Path(args.pred_dir) / 'result.txt'}, {Path(args.pred_dir) / 'result.json'}",))


SCORER = Scorer("longbench-v2", "DIR of pred.py's <model>.jsonl files -> DIR/result.txt and result.json "
                "(result.py's Overall, Easy, Hard, Short, Medium, Long)", arguments, run)
