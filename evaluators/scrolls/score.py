"""`lctx score scrolls`: a {id: prediction} file scored with the official SCROLLS metric
(`evaluator.score_predictions_file`; imported when the command runs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, help="gov_report, summ_screen_fd, qmsum, qasper, narrative_qa, "
                                                 "quality or contract_nli")
    p.add_argument("--predictions", required=True, help="JSON object {id: prediction}")
    p.add_argument("--data-dir", required=True, help="folder holding <task>/<split>.jsonl")
    p.add_argument("--split", default="validation", help="the split the predictions are of (default validation)")
    p.add_argument("--out", help="also write the metrics to this file")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.scrolls.evaluator import score_predictions_file

    result = score_predictions_file(args.task, Path(args.predictions), Path(args.data_dir), args.split)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return Scored(result)


SCORER = Scorer("scrolls", "{id: prediction} JSON -> the official SCROLLS metric dict", arguments, run)
