"""InfiniteBench's data: the task files of the Hugging Face dataset
xinrongzhang2022/InfiniteBench (`<task>.jsonl`, one record per line with `id`, `context`,
`input`, `answer`, `options`), read in file order as `eval_utils.load_data` reads them.
Each record is checked for what `create_prompt` and `get_answer` read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluators.data import first_file, suite_records
from evaluators.errors import EvaluatorError
from evaluators.infinitebench.options import DATA_HOWTO, task_paths
from evaluators.infinitebench.protocol import get_answer

CHOICE_TASKS = ("longbook_choice_eng", "code_debug")


def check_record(eg: Any, task: str, where: str) -> dict[str, Any]:
    """The record, or an EvaluatorError naming the file and line and the field that is wrong."""
    if not isinstance(eg, dict):
        raise EvaluatorError(f"{where}: not a JSON object; {DATA_HOWTO}")
    wrong = [k for k in ("context", "input") if not isinstance(eg.get(k), str)]
    if wrong:
        raise EvaluatorError(f"{where}: {task} records need string field(s) {wrong}; {DATA_HOWTO}")
    if "answer" not in eg:
        raise EvaluatorError(f"{where}: the record has no 'answer'; {DATA_HOWTO}")
    if task in CHOICE_TASKS:
        opts = eg.get("options")
        if not (isinstance(opts, list) and len(opts) == 4 and all(isinstance(o, str) for o in opts)):
            raise EvaluatorError(f"{where}: {task} records need 'options', a list of four strings; {DATA_HOWTO}")
        try:
            get_answer(eg, task)
        except ValueError as e:
            raise EvaluatorError(f"{where}: {e}") from None
    return eg


def load_task(data_dir: Path, task: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The first `limit` records (all when None) of the task's file (`evaluators.data`'s
    shared reading of a suite's JSONL file, each record checked by `check_record`)."""
    path = first_file(task_paths(data_dir, task), f"InfiniteBench {task} data", DATA_HOWTO)
    return suite_records(path, DATA_HOWTO, lambda eg, where: check_record(eg, task, where), limit)
