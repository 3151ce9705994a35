"""`lctx score zero-scrolls`: ZeroSCROLLS' preds_<dataset>.json files scored with its metrics
against the validation outputs (`scoring.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of preds_<dataset>.json ({id: prediction}, as the "
                                                     "scripts write them) or an lctx run's samples.jsonl")
    p.add_argument("--data-dir", required=True, help="the data directory holding zero_scrolls/<dataset>/"
                                                     "validation.jsonl")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.zero_scrolls.scoring import OUTPUT, score_prediction_dir

    table = score_prediction_dir(Path(args.pred_dir), Path(args.data_dir))
    return Scored(table, (f"wrote {Path(args.pred_dir) / OUTPUT}",))


SCORER = Scorer("zero-scrolls", "DIR of preds_<dataset>.json -> each ZeroSCROLLS dataset's score on the validation "
                "outputs and their average, DIR/result.json", arguments, run, aliases=("zero_scrolls", "zeroscrolls"))
