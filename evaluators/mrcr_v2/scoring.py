"""`lctx score mrcr_v2`: run_evaluation.py's `mrcr_v2_metric` (and the hash-first reading beside
it) on predictions made elsewhere, in the "up to" and "at" views `protocol.table` gives a run.
The folder holds one JSONL file per model (`<model>.jsonl`), one line per row of a release file:
the row's `answer`, the release file it comes from (`data_file`, e.g.
mrcr_v2p1_8needle_upto_128K_dynamic_fewshot_text_style_fast.csv; or `needles` and `length` as lctx
names them) and the model's `response`; a row the model could not take carries
`"beyond_context": true` and is counted, not graded. An lctx mrcr_v2 samples.jsonl reads as it is
(`prediction`, `references`). Writes result.json beside the files: per model, `protocol.table`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.data import json_objects
from evaluators.datafiles import jsonl_prediction_files
from evaluators.errors import EvaluatorError
from evaluators.mrcr_v2 import protocol
from evaluators.mrcr_v2.options import FILES, NEEDLES, file_name

LAYOUT = ("one JSON object per line with answer (the row's answer: its hash, then the text), data_file (the release "
          "CSV's name) or needles and length, and response (or beyond_context: true)")
# The release's file name -> (needles, lctx's length name)
FILE_KEYS = {file_name(n, k): (n, k) for n in NEEDLES for k in FILES}


def _text(item: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = item.get(key)
        if isinstance(value, list) and len(value) == 1:  # lctx's records: references as a list
            value = value[0]
        if isinstance(value, str):
            return value
    return None


def graded(path: Path) -> list[dict[str, Any]]:
    """Each line of one model's file with its scores, as the evaluator records them."""
    rows = []
    for lineno, item in json_objects(path, "a prediction"):
        where = f"{path}:{lineno}"
        key = FILE_KEYS.get(str(item.get("data_file", "")))
        if key is None and item.get("needles") in NEEDLES and item.get("length") in FILES:
            key = (int(item["needles"]), str(item["length"]))
        answer = _text(item, "answer", "references")
        if key is None or answer is None:
            raise EvaluatorError(f"{where}: needs {LAYOUT}")
        row: dict[str, Any] = {"needles": key[0], "length": key[1], "beyond_context": bool(item.get("beyond_context"))}
        if not row["beyond_context"]:
            response = _text(item, "response", "prediction")
            if response is None:
                raise EvaluatorError(f"{where}: response must be the model's text; {LAYOUT}")
            row.update(score=protocol.mrcr_v2_metric(response, answer),
                       score_hash_first=protocol.hash_first_metric(response, answer),
                       hash=protocol.hash_position(response, answer))
        rows.append(row)
    return rows


def score_prediction_dir(pred_dir: Path) -> dict[str, Any]:
    """{model name: protocol.table of its file}; writes result.json."""
    pred_dir = Path(pred_dir)
    out = {}
    for path in jsonl_prediction_files(pred_dir, "MRCR v2", LAYOUT):
        rows = graded(path)
        if not rows:
            raise EvaluatorError(f"{path} holds no predictions")
        out[path.stem] = protocol.table(rows)
    write_json_atomic(pred_dir / "result.json", out)
    return out
