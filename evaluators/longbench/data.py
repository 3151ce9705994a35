"""LongBench's data in the official layout (docs/protocols/protocols.md): `<dir>/<dataset>.jsonl`
(LongBench-E: `<dir>/<dataset>_e.jsonl`), records `input, context, answers[], length,
dataset, language, all_classes, _id`. Without a local directory the Hugging Face dataset
(`Xnhyacinth/LongBench`) is tried when the `datasets` library can reach it. A missing
dataset is an error that lists the file looked for and how to get it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluators import data
from evaluators.datafiles import LONGBENCH_HOWTO, longbench_file
from evaluators.errors import EvaluatorError

# field -> accepted types; None in the tuple means the field may be null.
LONGBENCH_FIELDS: dict[str, tuple] = {
    "input": (str,), "context": (str,), "answers": (list,), "length": (int,),
    "dataset": (str, type(None)), "language": (str, type(None)), "all_classes": (list, type(None)),
    "_id": (str, int, type(None)),
}
LONGBENCH_HF = "Xnhyacinth/LongBench"


def load_longbench(dataset: str, data_dir: Path | None, e: bool = False) -> list[dict[str, Any]]:
    name = f"{dataset}{'_e' if e else ''}"
    if data_dir is not None:
        path = longbench_file(data_dir, dataset, e)
        if path.is_file():
            return data.read_jsonl(path, LONGBENCH_FIELDS, ("input", "context", "answers", "length"))
        raise EvaluatorError(f"LongBench dataset {name} not found: looked for {path}; {LONGBENCH_HOWTO}")
    rows = data.from_hub(LONGBENCH_HF, name, "test")
    if rows is None:
        raise EvaluatorError(f"LongBench dataset {name}: no data directory is configured and the Hugging Face "
                             f"dataset {LONGBENCH_HF} ({name}) cannot be reached; {LONGBENCH_HOWTO}")
    for r in rows:  # the hub copy names the question field 'question' in some revisions
        r.setdefault("input", r.get("question", ""))
    return rows
