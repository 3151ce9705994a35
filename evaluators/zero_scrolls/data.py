"""ZeroSCROLLS' data: `<dataset>/<split>.jsonl` from the dataset's zips, one example per line
(`id`, `input`: instruction, document and query, `output`, `query_start_index`,
`query_end_index`, `document_start_index`, `document_end_index`, `truncation_seperator`). An id
given on several lines (several reference outputs) is one example whose references are all
its outputs (verify_task.drop_duplicates_in_input)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluators.data import first_file, suite_records
from evaluators.errors import EvaluatorError
from evaluators.zero_scrolls.options import DATA_HOWTO, data_file
from evaluators.zero_scrolls.protocol import references_by_id

FIELDS = ("id", "input", "truncation_seperator")
INDICES = ("query_start_index", "query_end_index", "document_start_index", "document_end_index")


def check_row(row: dict[str, Any], where: str) -> dict[str, Any]:
    bad = [k for k in FIELDS if not isinstance(row.get(k), str)] + \
        [k for k in INDICES if not isinstance(row.get(k), int) or isinstance(row.get(k), bool)]
    if bad:
        raise EvaluatorError(f"{where}: field(s) {bad} missing or of the wrong type; {DATA_HOWTO}")
    return row


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every line of a split's file (`evaluators.data`'s shared reading, each row checked)."""
    return suite_records(first_file([path], "ZeroSCROLLS data", DATA_HOWTO), DATA_HOWTO, check_row, what="an example")


def load_dataset(data_dir: Path, dataset: str, split: str, limit: int | None = None
                 ) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """(the first `limit` examples, one per id in file order; every id's reference outputs)."""
    rows = read_rows(data_file(data_dir, dataset, split))
    refs = references_by_id(rows)
    seen, examples = set(), []
    for r in rows:
        if r["id"] not in seen:
            seen.add(r["id"])
            examples.append(r)
    return (examples[:limit] if limit else examples), refs
