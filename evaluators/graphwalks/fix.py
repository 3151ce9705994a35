"""Graphwalks files from before the card's 2026-02-27 fix, told by what the fix changed
(docs/protocols/mrcr_graphwalks.md, "Data revisions"): the BFS prompts' wording, read from the
first BFS prompt of a file at submission (not the whole 300 MB file). A module of its own: the
options' submission check and the data reader both read it."""

from __future__ import annotations

from pathlib import Path

from evaluators.provenance import file_key

FIX = "openai/graphwalks' fix of 2026-02-27"
UNFIXED = "results on it do not compare with results on the fixed files; download the files again (" + \
    "https://huggingface.co/datasets/openai/graphwalks)"

def old_bfs_wording(prompt: str) -> bool:
    """A BFS prompt as first released: it asks for the nodes at "depth N" ("Perform a BFS from
    node A with depth N", "reachable at that depth") and never says "exactly"."""
    return "depth" in prompt and "exactly" not in prompt


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
