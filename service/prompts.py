"""The prompt of one recorded sample, rebuilt from its record. Passkey and needle samples
record the key, the haystack length and the needle's position, not the prompt itself (a
1M-token prompt on every line would swell samples.jsonl); their evaluators' own prompt
functions rebuild it exactly, and the needle's offsets let the dashboard highlight it.

The rebuild lives here, one function per task, because the evaluators expose no hook for
it yet; a task without one answers 404 with a message saying so."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluators.errors import EvaluatorError
from evaluators.passkey import NeedleEvaluator, needle_text, passkey_prompt
from service.errors import NotFound

Rebuilt = tuple[str, str]  # (prompt, needle)


def _passkey(record: dict[str, Any], options: dict[str, Any], data_dir: Path | None) -> Rebuilt:
    key = int(record["key"])
    return passkey_prompt(key, int(record["garbage_chars"]), int(record["depth_chars"])), needle_text(key)


def _needle(record: dict[str, Any], options: dict[str, Any], data_dir: Path | None) -> Rebuilt:
    evaluator = NeedleEvaluator(options, data_dir)
    evaluator.prepare(None)  # type: ignore[arg-type]  # reads only the haystack file option
    key = int(record["key"])
    return evaluator.prompt(key, int(record["haystack_chars"]), int(record["depth_percent"])), needle_text(key)


REBUILD: dict[str, Callable[[dict[str, Any], dict[str, Any], Path | None], Rebuilt]] = {
    "passkey": _passkey, "needle": _needle}


def find_record(samples: Path, sample_id: str) -> dict[str, Any]:
    """The newest record of `sample_id` in a samples.jsonl (a resumed run may repeat one)."""
    found = None
    if samples.is_file():
        with samples.open(encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line still being written
                if isinstance(record, dict) and record.get("id") == sample_id:
                    found = record
    if found is None:
        raise NotFound(f"no sample {sample_id!r} recorded; GET /v1/jobs/{{id}}/samples lists the recorded ids")
    return found


def rebuild_prompt(task: str, record: dict[str, Any], options: dict[str, Any], data_dir: Path | None) -> Rebuilt:
    """The sample's prompt and its needle; NotFound for a task whose prompts are not rebuilt."""
    rebuild = REBUILD.get(task)
    if rebuild is None:
        raise NotFound(f"{task} samples do not record their prompt and it is not rebuilt; prompts are rebuilt for "
                       f"{', '.join(sorted(REBUILD))}")
    try:
        return rebuild(record, options, data_dir)
    except (KeyError, TypeError, ValueError) as e:
        raise NotFound(f"sample {record.get('id')!r} lacks what its prompt is rebuilt from ({e})") from e
    except EvaluatorError as e:  # the needle's haystack file is gone since the run
        raise NotFound(f"the prompt of sample {record.get('id')!r} cannot be rebuilt: {e}") from e
