"""SCROLLS' data in the official layout (docs/protocols/protocols.md): `<dir>/<task>/<split>.jsonl`
(what the official zips unpack to), records `id, pid, input, output`; rows sharing an `id`
are one example with several references. Without a local directory the Hugging Face dataset
(`tau/scrolls`) is tried when the `datasets` library can reach it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluators import data
from evaluators.datafiles import SCROLLS_HOWTO, scrolls_file
from evaluators.errors import EvaluatorError

SCROLLS_FIELDS: dict[str, tuple] = {"id": (str,), "pid": (str, int, type(None)), "input": (str,), "output": (str,)}
SCROLLS_HF = "tau/scrolls"


def load_scrolls(task: str, split: str, data_dir: Path | None) -> list[dict[str, Any]]:
    if data_dir is not None:
        path = scrolls_file(data_dir, task, split)
        if path.is_file():
            return data.read_jsonl(path, SCROLLS_FIELDS, ("id", "input", "output"))
        raise EvaluatorError(f"SCROLLS task {task} ({split}) not found: looked for {path}; {SCROLLS_HOWTO}")
    rows = data.from_hub(SCROLLS_HF, task, split)
    if rows is None:
        raise EvaluatorError(f"SCROLLS task {task} ({split}): no data directory is configured and the Hugging "
                             f"Face dataset {SCROLLS_HF} cannot be reached; {SCROLLS_HOWTO}")
    return rows


def group_by_id(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """SCROLLS rows sharing an `id` are one example with several references (first-seen order)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        ex = out.setdefault(str(r["id"]), {"id": str(r["id"]), "input": r["input"], "outputs": []})
        if r.get("output") is not None:
            ex["outputs"].append(r["output"])
    return list(out.values())
