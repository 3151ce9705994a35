"""`lctx score babilong`: run_model_on_babilong.py's CSV files scored as collect_results.py
scores them (`scoring.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of run_model_on_babilong.py's CSV files")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.babilong.scoring import score_prediction_dir

    result = score_prediction_dir(Path(args.pred_dir))
    return Scored(result, (f"wrote {Path(args.pred_dir) / 'result.json'} and a heatmap per prompt configuration",))


SCORER = Scorer("babilong", "DIR of <task>_<length>_<prompt name>.csv files -> accuracy per task and length "
                "(collect_results.py with metrics.py), DIR/result.json, heatmaps", arguments, run)
