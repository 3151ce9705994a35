"""MRCR's data: the parquet files of openai/mrcr, per needle count `<data dir>/mrcr/<n>needle.parquet`
(the first release) or `<data dir>/mrcr/<n>needle/<n>needle_<i>.parquet` (the later shards,
read in name order), or with LCTX_HUB_DATA and no data directory the same files from the
hub. Each row is checked for the columns the card's code reads and the ones lctx records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluators.data import hub_snapshot, read_parquet
from evaluators.errors import EvaluatorError
from evaluators.mrcr.options import DATA_DIR, DATA_HOWTO, needle_files

HUB_REPO = "openai/mrcr"
FIELDS: dict[str, tuple] = {"prompt": (str,), "answer": (str,), "random_string_to_prepend": (str,),
                            "n_needles": (int,), "desired_msg_index": (int,), "total_messages": (int,),
                            "n_chars": (int,)}


def read_needles(root: Path, n: int) -> list[dict[str, Any]]:
    files = needle_files(root, n)
    if not files:
        raise EvaluatorError(f"MRCR data not found: looked for {root / f'{n}needle.parquet'} and "
                             f"{root / f'{n}needle'}/{n}needle_*.parquet; {DATA_HOWTO}")
    rows = []
    for path in files:
        for i, row in enumerate(read_parquet(path, FIELDS, DATA_HOWTO)):
            if row["n_needles"] != n:
                raise EvaluatorError(f"{path}: row {i} has n_needles={row['n_needles']}, not {n}; {DATA_HOWTO}")
            rows.append(row)
    return rows


def load_rows(data_dir: Path | None, needles: list[int]) -> dict[int, list[dict[str, Any]]]:
    """{needle count: its rows in file order}."""
    if data_dir is None:
        patterns = [p for n in needles for p in (f"{n}needle.parquet", f"{n}needle/{n}needle_*.parquet")]
        snapshot = hub_snapshot(HUB_REPO, patterns)
        if snapshot is None:
            raise EvaluatorError(f"MRCR: no data directory is configured and the Hugging Face dataset {HUB_REPO} "
                                 f"cannot be reached; {DATA_HOWTO}")
        return {n: read_needles(snapshot, n) for n in needles}
    return {n: read_needles(Path(data_dir) / DATA_DIR, n) for n in needles}
