"""Graphwalks' data: the hub's two parquet files, `<data dir>/graphwalks/graphwalks_128k_and_shorter.parquet`
and `graphwalks_256k_to_1mil.parquet`, or with LCTX_HUB_DATA and no data directory the same
files from the hub. The columns are `prompt`, `answer_nodes` (the card's table calls it
`answer`; the files name it `answer_nodes`), `problem_type` and `prompt_chars`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluators.data import hub_snapshot, read_parquet
from evaluators.errors import EvaluatorError
from evaluators.graphwalks.options import DATA_DIR, DATA_HOWTO, PROBLEM_TYPES, SETS

HUB_REPO = "openai/graphwalks"
FIELDS: dict[str, tuple] = {"prompt": (str,), "answer_nodes": (list,), "problem_type": (str,), "prompt_chars": (int,)}


def read_set(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise EvaluatorError(f"Graphwalks data not found: looked for {path}; {DATA_HOWTO}")
    rows = read_parquet(path, FIELDS, DATA_HOWTO)
    for i, row in enumerate(rows):
        if row["problem_type"] not in PROBLEM_TYPES or not all(isinstance(x, str) for x in row["answer_nodes"]):
            raise EvaluatorError(f"{path}: row {i} has problem_type {row['problem_type']!r} (not bfs or parents) "
                                 f"or answer_nodes that are not all strings; {DATA_HOWTO}")
    return rows


def load_sets(data_dir: Path | None, sets: list[str]) -> dict[str, list[dict[str, Any]]]:
    """{set name: its rows in file order}."""
    if data_dir is None:
        snapshot = hub_snapshot(HUB_REPO, [SETS[s] for s in sets])
        if snapshot is None:
            raise EvaluatorError(f"Graphwalks: no data directory is configured and the Hugging Face dataset "
                                 f"{HUB_REPO} cannot be reached; {DATA_HOWTO}")
        return {s: read_set(snapshot / SETS[s]) for s in sets}
    return {s: read_set(Path(data_dir) / DATA_DIR / SETS[s]) for s in sets}
