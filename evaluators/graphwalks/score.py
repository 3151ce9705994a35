"""`lctx score graphwalks`: each model's responses to openai/graphwalks rows scored with the
sound set F1 and the card's literal one (`scoring.score_prediction_dir`; imported when the
command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of <model>.jsonl files: one line per row with "
                                                     "answer_nodes, problem_type, data_file and response (or "
                                                     "beyond_context: true)")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.graphwalks.scoring import score_prediction_dir

    result = score_prediction_dir(Path(args.pred_dir))
    return Scored(result, (f"wrote {Path(args.pred_dir) / 'result.json'}",))


SCORER = Scorer("graphwalks", "DIR of <model>.jsonl files (openai/graphwalks rows with each model's response) -> "
                "the sound set F1 and the card's literal one per problem type and length bin, DIR/result.json",
                arguments, run)
