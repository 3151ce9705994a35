"""Benchmark data in the official layouts (see docs/protocols/protocols.md):

- LongBench: `<dir>/<dataset>.jsonl` (LongBench-E: `<dir>/<dataset>_e.jsonl`), records
  `input, context, answers[], length, dataset, language, all_classes, _id`;
- SCROLLS: `<dir>/<task>/<split>.jsonl` (what the official zips unpack to), records
  `id, pid, input, output`.

Without a local directory the Hugging Face datasets (`Xnhyacinth/LongBench`,
`tau/scrolls`) are tried when the `datasets` library can reach them. A missing
dataset is an error that lists the files looked for and how to get them; a
malformed record is an error naming the file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints import jsonfiles
from evaluators.datafiles import LONGBENCH_HOWTO, SCROLLS_HOWTO, longbench_file, scrolls_file
from evaluators.errors import EvaluatorError

# field -> accepted types; None in the tuple means the field may be null.
LONGBENCH_FIELDS: dict[str, tuple] = {
    "input": (str,), "context": (str,), "answers": (list,), "length": (int,),
    "dataset": (str, type(None)), "language": (str, type(None)), "all_classes": (list, type(None)),
    "_id": (str, int, type(None)),
}
SCROLLS_FIELDS: dict[str, tuple] = {"id": (str,), "pid": (str, int, type(None)), "input": (str,), "output": (str,)}

LONGBENCH_HF = "Xnhyacinth/LongBench"
SCROLLS_HF = "tau/scrolls"
def json_objects(path: Path, what: str = "a record") -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL file; an EvaluatorError naming
    the file and line for one that is not a JSON object."""
    try:
        return list(jsonfiles.records(path, what=what))
    except jsonfiles.BadRecord as e:
        raise EvaluatorError(str(e)) from None


def read_jsonl(path: Path, fields: dict[str, tuple], required: tuple[str, ...]) -> list[dict[str, Any]]:
    """Records of a JSONL file, each checked for required fields and types."""
    records = []
    for lineno, rec in json_objects(path):
        missing = [k for k in required if k not in rec]
        if missing:
            raise EvaluatorError(f"{path}:{lineno}: record lacks field(s) {missing}")
        for k, types in fields.items():
            if k in rec and not isinstance(rec[k], types) or isinstance(rec.get(k), bool):
                want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
                raise EvaluatorError(f"{path}:{lineno}: field {k!r} must be {want}, got {rec[k]!r:.60}")
        if "answers" in rec and not all(isinstance(a, str) for a in rec["answers"]):
            raise EvaluatorError(f"{path}:{lineno}: field 'answers' must be a list of strings")
        records.append(rec)
    return records


_unreachable: set[str] = set()  # hubs that failed once in this process: fail fast afterwards


def _from_hub(repo: str, name: str, split: str) -> list[dict[str, Any]] | None:
    """The dataset from the Hugging Face hub, or None when it cannot be reached."""
    if repo in _unreachable:
        return None
    try:
        import datasets  # optional, and slow to import

        return [dict(r) for r in datasets.load_dataset(repo, name, split=split)]
    except Exception:  # no network, no such config, no library: the caller explains
        _unreachable.add(repo)
        return None


def load_longbench(dataset: str, data_dir: Path | None, e: bool = False) -> list[dict[str, Any]]:
    name = f"{dataset}{'_e' if e else ''}"
    if data_dir is not None:
        path = longbench_file(data_dir, dataset, e)
        if path.is_file():
            return read_jsonl(path, LONGBENCH_FIELDS, ("input", "context", "answers", "length"))
        raise EvaluatorError(f"LongBench dataset {name} not found: looked for {path}; {LONGBENCH_HOWTO}")
    rows = _from_hub(LONGBENCH_HF, name, "test")
    if rows is None:
        raise EvaluatorError(f"LongBench dataset {name}: no data directory is configured and the Hugging Face "
                             f"dataset {LONGBENCH_HF} ({name}) cannot be reached; {LONGBENCH_HOWTO}")
    for r in rows:  # the hub copy names the question field 'question' in some revisions
        r.setdefault("input", r.get("question", ""))
    return rows


def load_scrolls(task: str, split: str, data_dir: Path | None) -> list[dict[str, Any]]:
    if data_dir is not None:
        path = scrolls_file(data_dir, task, split)
        if path.is_file():
            return read_jsonl(path, SCROLLS_FIELDS, ("id", "input", "output"))
        raise EvaluatorError(f"SCROLLS task {task} ({split}) not found: looked for {path}; {SCROLLS_HOWTO}")
    rows = _from_hub(SCROLLS_HF, task, split)
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
