"""MRCR's data: the parquet files of openai/mrcr, per needle count `<data dir>/mrcr/<n>needle.parquet`
(the first release) or `<data dir>/mrcr/<n>needle/<n>needle_<i>.parquet` (the later shards,
read in name order), or with LCTX_HUB_DATA and no data directory the same files from the
hub. Each row is checked for the columns the card's code reads and the ones lctx records.

Files from before the card's 2025-12-05 fix are told by what the fix changed
(docs/protocols/mrcr_graphwalks.md, "Data revisions"): it added a `date_added` column (a file
without one is older: the submission checks this, from the file's schema alone), and it
replaced the rows with too many target needles — a row whose target ask (the user message at
`desired_msg_index`) occurs more often than its `n_needles` is one (the run counts them); the
three files of the first release are known by their sha256 (`MrcrOptions.stale_sha256`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evaluators.data import hub_snapshot, read_parquet
from evaluators.errors import EvaluatorError
from evaluators.mrcr.options import DATA_DIR, DATA_HOWTO, FIX, UNFIXED, needle_files, schema_warnings
from evaluators.provenance import file_key, warn

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
        read = read_parquet(path, FIELDS, DATA_HOWTO)
        for i, row in enumerate(read):
            if row["n_needles"] != n:
                raise EvaluatorError(f"{path}: row {i} has n_needles={row['n_needles']}, not {n}; {DATA_HOWTO}")
            rows.append(row)
        for text in schema_warnings([path]) + stale_rows(path, read):
            warn(text)
    return rows


def target_needles(row: dict[str, Any]) -> int | None:
    """How often the row's target ask (the user message at `desired_msg_index`) is asked in its
    conversation, the final question left out; None where the index names no user message."""
    try:
        messages = json.loads(row["prompt"])
        ask = messages[row["desired_msg_index"]]
    except (ValueError, IndexError, TypeError, KeyError):
        return None  # the run's build says what is wrong with the row
    if not isinstance(ask, dict) or ask.get("role") != "user":
        return None
    return sum(1 for m in messages[:-1] if isinstance(m, dict) and m.get("role") == "user"
               and m.get("content") == ask.get("content"))


_stale: dict[tuple[str, int, int], list[str]] = {}


def stale_rows(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    """A warning when rows have more target needles than their `n_needles` (the bug the fix
    repaired); empty otherwise. Every conversation is parsed (seconds for the full dataset),
    so the answer is kept per file content for the process (a warm worker asks again)."""
    key = file_key(path)
    if key not in _stale:
        over = [i for i, row in enumerate(rows)
                if (count := target_needles(row)) is not None and count > row["n_needles"]]
        _stale[key] = [f"{path.name}: {len(over)} of {len(rows)} rows ask for their target more often than their "
                       f"n_needles (first: row {over[0]}), the generation bug {FIX} repaired; {UNFIXED}"] if over else []
    return _stale[key]


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
