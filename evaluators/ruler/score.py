"""`lctx score ruler`: prediction files in RULER's layout scored as NVIDIA's evaluate.py
scores them (`scoring.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of <task>.jsonl files as NVIDIA's call_api.py writes")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.ruler.scoring import score_prediction_dir

    result = score_prediction_dir(Path(args.pred_dir))
    missing = (f"no prediction file for: {', '.join(result['missing'])}",) if result["missing"] else ()
    return Scored(result["scores"], (*missing, "wrote " + ", ".join(result["files"])))


SCORER = Scorer("ruler", "DIR/<task>.jsonl in RULER's prediction layout -> DIR/summary.json, summary.csv "
                "(NVIDIA evaluate.py's scoring)", arguments, run)
