"""`lctx score nolima`: NoLiMa's own result files gathered and scored as its notebook and
README do (`scoring.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="a results folder of NoLiMa's evaluation (its JSON files, "
                                                     "searched recursively)")
    p.add_argument("--include-direct", action="store_true", help="count files whose name holds 'direct' (the "
                                                                  "notebook skips them)")
    p.add_argument("--metric", default="contains", choices=("EM", "contains", "lastline_EM", "lastline_contains"),
                   help="the metric for an lctx samples.jsonl (NoLiMa's own files name theirs)")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.nolima.scoring import OUTPUT, score_prediction_dir

    result = score_prediction_dir(Path(args.pred_dir), args.include_direct, args.metric)
    return Scored(result, (f"wrote {Path(args.pred_dir) / OUTPUT}",))


SCORER = Scorer("nolima", "DIR of NoLiMa's result files -> accuracy per context length, base score and effective "
                "length, DIR/result.json", arguments, run)
