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
from evaluators.graphwalks.fix import FIX, UNFIXED, old_bfs_wording
from evaluators.graphwalks.options import DATA_DIR, DATA_HOWTO, PROBLEM_TYPES, SETS
from evaluators.provenance import warn

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


_PARENTS_OF = re.compile(r"Find the parents of node ([^\s.]+)\.")


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


def load_sets(data_dir: Path | None, sets: list[str]) -> dict[str, list[dict[str, Any]]]:
    """{set name: its rows in file order}."""
    if data_dir is None:
        snapshot = hub_snapshot(HUB_REPO, [SETS[s] for s in sets])
        if snapshot is None:
            raise EvaluatorError(f"Graphwalks: no data directory is configured and the Hugging Face dataset "
                                 f"{HUB_REPO} cannot be reached; {DATA_HOWTO}")
        return {s: read_set(snapshot / SETS[s]) for s in sets}
    return {s: read_set(Path(data_dir) / DATA_DIR / SETS[s]) for s in sets}
