"""Graphwalks' data: the hub's two parquet files, `<data dir>/graphwalks/graphwalks_128k_and_shorter.parquet`
and `graphwalks_256k_to_1mil.parquet`, or with LCTX_HUB_DATA and no data directory the same
files from the hub. The columns are `prompt`, `answer_nodes` (the card's table calls it
`answer`; the files name it `answer_nodes`), `problem_type` and `prompt_chars`.

Files from before the card's 2026-02-27 fix are told by what the fix changed
(docs/protocols/mrcr_graphwalks.md, "Data revisions"): `parents` rows whose truth holds the node
asked about (the fix removed it from 24 of 400), and BFS prompts asking for the nodes at
"depth N" without "exactly" (the fix reworded them to "exactly depth N"). The run counts both
in the rows it reads (the result's `data.warnings`); a submission reads the first BFS prompt of
each file only (`first_bfs_prompt`: not the whole 300 MB file)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from evaluators.data import hub_snapshot, read_parquet
from evaluators.errors import EvaluatorError
from evaluators.graphwalks.options import DATA_DIR, DATA_HOWTO, PROBLEM_TYPES, SETS
from evaluators.provenance import file_key, warn

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
    for text in stale_rows(path, rows):
        warn(text)
    return rows


FIX = "openai/graphwalks' fix of 2026-02-27"
UNFIXED = "results on it do not compare with results on the fixed files; download the files again (" + \
    "https://huggingface.co/datasets/openai/graphwalks)"
_PARENTS_OF = re.compile(r"Find the parents of node ([^\s.]+)\.")


def old_bfs_wording(prompt: str) -> bool:
    """A BFS prompt as first released: it asks for the nodes at "depth N" ("Perform a BFS from
    node A with depth N", "reachable at that depth") and never says "exactly"."""
    return "depth" in prompt and "exactly" not in prompt


def queried_node(prompt: str) -> str | None:
    """The node a `parents` prompt asks about: the last "Find the parents of node X." (the
    prompt's own example asks one before the real question)."""
    found = _PARENTS_OF.findall(prompt)
    return found[-1] if found else None


def stale_rows(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    """Warnings about rows the 2026-02-27 fix changed: BFS prompts in the old wording, `parents`
    rows whose truth holds the node asked about (empty: the file is of the fixed release)."""
    bfs = [i for i, r in enumerate(rows) if r["problem_type"] == "bfs"]
    old = [i for i in bfs if old_bfs_wording(rows[i]["prompt"])]
    rooted = [i for i, r in enumerate(rows)
              if r["problem_type"] == "parents" and queried_node(r["prompt"]) in r["answer_nodes"]]
    out = []
    if old:
        out.append(f"{path.name}: {len(old)} of {len(bfs)} bfs prompts ask for the nodes at \"depth N\" without "
                   f"\"exactly\" (first: row {old[0]}), the wording before {FIX} (\"exactly depth N\"); {UNFIXED}")
    if rooted:
        out.append(f"{path.name}: {len(rooted)} parents rows have the node they ask about in their truth (first: "
                   f"row {rooted[0]}); {FIX} removed it from 24 such rows; {UNFIXED}")
    return out


_first_bfs: dict[tuple[str, int, int], str | None] = {}


def first_bfs_prompt(path: Path) -> str | None:
    """The prompt of the file's first bfs row (None: no such row or column), reading the
    `problem_type` column and then the prompts only as far as that row; once per file content."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    key = file_key(path)
    if key not in _first_bfs:
        prompt = None
        try:
            file = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
            if {"problem_type", "prompt"} <= set(file.schema_arrow.names):
                types = file.read(columns=["problem_type"]).column(0).to_pylist()
                if "bfs" in types:
                    at = types.index("bfs")
                    seen = 0
                    for batch in file.iter_batches(batch_size=min(at + 1, 64), columns=["prompt"]):
                        if at < seen + batch.num_rows:
                            prompt = batch.column(0)[at - seen].as_py()
                            break
                        seen += batch.num_rows
        except (pa.ArrowInvalid, OSError):
            prompt = None  # not a readable parquet file: the run says so
        _first_bfs[key] = prompt
    return _first_bfs[key]


def wording_warnings(paths: list[Path]) -> list[str]:
    """The submission's check: a file whose first BFS prompt is in the wording before the fix."""
    out = []
    for path in paths:
        prompt = first_bfs_prompt(path) if path.is_file() else None
        if prompt is not None and old_bfs_wording(prompt):
            out.append(f"{path.name}: its bfs prompts ask for the nodes at \"depth N\" without \"exactly\", the "
                       f"wording before {FIX}; {UNFIXED}")
    return out


def load_sets(data_dir: Path | None, sets: list[str]) -> dict[str, list[dict[str, Any]]]:
    """{set name: its rows in file order}."""
    if data_dir is None:
        snapshot = hub_snapshot(HUB_REPO, [SETS[s] for s in sets])
        if snapshot is None:
            raise EvaluatorError(f"Graphwalks: no data directory is configured and the Hugging Face dataset "
                                 f"{HUB_REPO} cannot be reached; {DATA_HOWTO}")
        return {s: read_set(snapshot / SETS[s]) for s in sets}
    return {s: read_set(Path(data_dir) / DATA_DIR / SETS[s]) for s in sets}
