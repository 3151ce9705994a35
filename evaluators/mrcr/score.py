"""`lctx score mrcr`: each model's responses to openai/mrcr rows graded as the card grades
them (`scoring.score_prediction_dir`; imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluators.registry import Scored, Scorer


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of <model>.jsonl files: one line per row with "
                                                     "n_needles, answer, random_string_to_prepend, prompt (or "
                                                     "o200k_tokens) and response (or beyond_context: true)")
    p.add_argument("--o200k-file", help="tiktoken's o200k_base.tiktoken (default: the ranks quicktok-v1 ships)")


def run(args: argparse.Namespace, _judge: object = None) -> Scored:
    from evaluators.mrcr.scoring import score_prediction_dir

    result = score_prediction_dir(Path(args.pred_dir), args.o200k_file)
    return Scored(result, (f"wrote {Path(args.pred_dir) / 'result.json'}",))


SCORER = Scorer("mrcr", "DIR of <model>.jsonl files (openai/mrcr rows with each model's response) -> the card's "
                "grade per needle count and o200k length bin, DIR/result.json", arguments, run)
