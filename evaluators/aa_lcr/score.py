"""`lctx score aa-lcr`: each model's answers to the AA-LCR questions graded by a judge model
with the card's prompt (`scoring.score_prediction_dir`; imported when the command runs).
The CLI opens the judge (`--judge`: a checkpoint folder or an endpoint URL) and hands it over."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from evaluators.registry import Scored, Scorer

if TYPE_CHECKING:
    from evaluators.judges import Judge


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse names the flag in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pred-dir", required=True, help="folder of <model>.jsonl files: one line per question with "
                                                     "question_id, question, answer, document_category and response "
                                                     "(or beyond_context: true); an aa_lcr samples.jsonl as it is")
    p.add_argument("--judge-prompt", choices=("v1.1", "v1.0"), default="v1.1", help="the card's judge prompt "
                   "(default v1.1)")
    p.add_argument("--judge-max-new-tokens", type=positive_int, default=256, help="most tokens of the judge's "
                   "answer (default 256)")
    p.add_argument("--judge-thinking-budget", type=positive_int, default=2048, help="most tokens of a judge's think "
                   "block (default 2048)")


def run(args: argparse.Namespace, judge: Judge | None) -> Scored:
    from evaluators.aa_lcr.scoring import score_prediction_dir

    if judge is None:  # Scorer(judge=True): whoever runs it opens the judge first
        raise ValueError("lctx score aa-lcr grades with a judge: give --judge")
    result = score_prediction_dir(Path(args.pred_dir), judge, args.judge_prompt, args.judge_max_new_tokens,
                                  args.judge_thinking_budget, refresh=getattr(args, "judge_refresh", False))
    pred_dir = Path(args.pred_dir)
    return Scored(result, (f"judge {judge.ref}; wrote {pred_dir / 'result.json'} and {pred_dir / 'judged'}/",))


SCORER = Scorer("aa-lcr", "DIR of <model>.jsonl files (AA-LCR questions with each model's answer) -> the card's "
                "judge prompt, graded by --judge: accuracy overall and per document category, DIR/result.json, "
                "DIR/judged/<model>.jsonl", arguments, run, aliases=("aa_lcr",), judge=True)
