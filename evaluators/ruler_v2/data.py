"""RULER v2's data: the files NeMo-Skills' prepare.py writes, one `test.jsonl` per setup
and task (`index`, `question`: the whole prompt, `expected_answer`: a list of strings, or
the letter for the multiple-choice tasks, `length`: the prompt's tokens by the tokenizer it
was prepared with). Each line is checked for what the scorer reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluators.data import first_file, suite_records
from evaluators.errors import EvaluatorError
from evaluators.ruler_v2.options import DATA_HOWTO, task_file
from evaluators.ruler_v2.protocol import route


def check_sample(row: Any, task: str, where: str) -> dict[str, Any]:
    if not isinstance(row, dict) or not isinstance(row.get("question"), str):
        raise EvaluatorError(f"{where}: a sample is an object with a string 'question'; {DATA_HOWTO}")
    want = row.get("expected_answer")
    if route(task) == "multichoice":
        if not isinstance(want, str):
            raise EvaluatorError(f"{where}: {task} is multiple choice: expected_answer must be the letter; {DATA_HOWTO}")
    elif not (isinstance(want, list) and want and all(isinstance(a, str) for a in want)):
        raise EvaluatorError(f"{where}: {task}'s expected_answer must be a non-empty list of strings; {DATA_HOWTO}")
    return row


def load_task(data_dir: Path, setup: str, task: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The first `limit` prepared samples of a task (`evaluators.data`'s shared reading)."""
    path = first_file([task_file(data_dir, setup, task)], "RULER v2 data", DATA_HOWTO)
    return suite_records(path, DATA_HOWTO, lambda row, where: check_sample(row, task, where), limit, "a sample")
