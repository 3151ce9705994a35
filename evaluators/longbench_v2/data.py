"""LongBench v2's data: the official data.json (a JSON array of 503 records) from the data
directory, or the hub's THUDM/LongBench-v2 (split "train", as pred.py loads it) with
LCTX_HUB_DATA. Each record is checked for the fields pred.py reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evaluators.data import from_hub
from evaluators.errors import EvaluatorError
from evaluators.longbench_v2.options import DATA_HOWTO, DATA_PATHS
from evaluators.longbench_v2.protocol import LETTERS, RECORD_FIELDS

HUB_REPO = "THUDM/LongBench-v2"


def check_records(rows: Any, where: str) -> list[dict[str, Any]]:
    """The records, each with every field of RECORD_FIELDS as a string and an answer A-D."""
    if not isinstance(rows, list):
        raise EvaluatorError(f"{where}: LongBench v2's data.json is a JSON array of records; got {type(rows).__name__}")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise EvaluatorError(f"{where}: record {i} is not an object")
        missing = [k for k in RECORD_FIELDS if not isinstance(r.get(k), str)]
        if missing:
            raise EvaluatorError(f"{where}: record {i} ({r.get('_id')}) lacks string field(s) {missing}")
        if r["answer"] not in LETTERS:
            raise EvaluatorError(f"{where}: record {i} ({r['_id']}) has answer {r['answer']!r}, not one of A-D")
    return rows


def load_records(data_dir: Path | None) -> list[dict[str, Any]]:
    if data_dir is not None:
        paths = [Path(data_dir) / p for p in DATA_PATHS]
        for path in paths:
            if path.is_file():
                try:
                    rows = json.loads(path.read_text(encoding="utf-8"))
                except json.JSONDecodeError as e:
                    raise EvaluatorError(f"{path}: not JSON ({e}); {DATA_HOWTO}") from None
                return check_records(rows, str(path))
        raise EvaluatorError(f"LongBench v2 data not found: looked for {' and '.join(map(str, paths))}; {DATA_HOWTO}")
    rows = from_hub(HUB_REPO, None, "train")
    if rows is None:
        raise EvaluatorError(f"LongBench v2: no data directory is configured and the Hugging Face dataset {HUB_REPO} "
                             f"cannot be reached; {DATA_HOWTO}")
    return check_records(rows, HUB_REPO)
