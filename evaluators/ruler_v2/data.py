"""RULER v2's data: the files NeMo-Skills' prepare.py writes, one `test.jsonl` per setup
and task (`index`, `question`: the whole prompt, `expected_answer`: a list of strings, or
the letter for the multiple-choice tasks, `length`: the prompt's tokens by the tokenizer it
was prepared with). Each line is checked for what the scorer reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    path = task_file(data_dir, setup, task)
    if not path.is_file():
        raise EvaluatorError(f"RULER v2 data not found: looked for {path}; {DATA_HOWTO}")
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise EvaluatorError(f"{path}:{lineno}: not JSON ({e.msg}); {DATA_HOWTO}") from None
            rows.append(check_sample(row, task, f"{path}:{lineno}"))
    if not rows:
        raise EvaluatorError(f"{path} holds no samples; {DATA_HOWTO}")
    return rows
