"""The prompt of one recorded sample, rebuilt from its record by its evaluator's
`sample_prompt` hook (passkey and needle record the key, the haystack length and the
needle's position, not the prompt itself); the needle's offset lets the dashboard
highlight it. A task without the hook answers 404 with a message saying so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints import jsonfiles
from evaluators.errors import EvaluatorError
from evaluators.samplelog import sample_files
from service.core.errors import NotFound

Rebuilt = tuple[str, str]  # (prompt, needle)


def find_record(folder: Path, sample_id: str) -> dict[str, Any]:
    """The newest record of `sample_id` in a task folder's sample files (a resumed run may
    repeat one)."""
    found = None
    for f in sample_files(folder):
        try:
            for _, record in jsonfiles.records(f, strict=False):  # skips a line still being written
                if record.get("id") == sample_id:
                    found = record
        except FileNotFoundError:  # a unit's file folded into samples.jsonl meanwhile
            continue
    if found is None:
        raise NotFound(f"no sample {sample_id!r} recorded; GET /v1/jobs/{{id}}/samples lists the recorded ids")
    return found


def rebuild_prompt(task: dict[str, Any], record: dict[str, Any], data_dir: Path | None) -> Rebuilt:
    """The sample's prompt and its needle, by the evaluator of the job's task spec `task`;
    NotFound for a task whose prompts are not rebuilt."""
    import evaluators  # the evaluators load torch: on first use, not with the API
    from evaluators.registry import make_evaluator
    from evaluators.task import Evaluator

    try:
        rebuilt = make_evaluator(task, data_dir).sample_prompt(record)
        if rebuilt is None:
            rebuilding = sorted(n for n, c in evaluators.TASKS.items() if c.sample_prompt is not Evaluator.sample_prompt)
            raise NotFound(f"{task['name']} samples do not record their prompt and it is not rebuilt; prompts are "
                           f"rebuilt for {', '.join(rebuilding)}")
        return rebuilt
    except (KeyError, TypeError, ValueError) as e:
        raise NotFound(f"sample {record.get('id')!r} lacks what its prompt is rebuilt from ({e})") from e
    except EvaluatorError as e:  # the needle's haystack file is gone since the run
        raise NotFound(f"the prompt of sample {record.get('id')!r} cannot be rebuilt: {e}") from e
