"""`lctx score mrcr`: the card's grader and bins on predictions made elsewhere. The folder
holds one JSONL file per model (`<model>.jsonl`), one line per row of openai/mrcr: the row's
`n_needles`, `answer`, `random_string_to_prepend` and either its `prompt` (the JSON messages,
counted with o200k_base for the bin) or `o200k_tokens` (prompt + answer tokens, already
counted), with the model's `response` (the text as the model gave it); a row the model could
not take carries `"beyond_context": true` (and no response) and is counted, not graded.
Writes result.json beside the files: per model, `protocol.table` (overall, per needle count,
per official bin, per needle count x bin)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.data import json_objects
from evaluators.datafiles import jsonl_prediction_files
from evaluators.errors import EvaluatorError
from evaluators.mrcr import protocol

OUTPUTS = ("result.json",)
NEEDED = ("n_needles", "answer", "random_string_to_prepend")
LAYOUT = ("one JSON object per line with n_needles, answer, random_string_to_prepend, prompt (or o200k_tokens) "
          "and response (or beyond_context: true)")


def graded(path: Path, count: Any) -> list[dict[str, Any]]:
    rows = []
    for lineno, item in json_objects(path, "a prediction"):
        where = f"{path}:{lineno}"
        missing = [k for k in NEEDED if k not in item]
        if missing or ("prompt" not in item and "o200k_tokens" not in item):
            raise EvaluatorError(f"{where}: lacks {missing or ['prompt or o200k_tokens']}; {LAYOUT}")
        if isinstance(item.get("o200k_tokens"), int) and not isinstance(item["o200k_tokens"], bool):
            tokens = item["o200k_tokens"]
        else:
            if not isinstance(item.get("prompt"), str):
                raise EvaluatorError(f"{where}: prompt must be the row's JSON string of messages; {LAYOUT}")
            tokens = protocol.bin_tokens(count, protocol.messages_of(item["prompt"], where), item["answer"])
        row = {"n_needles": item["n_needles"], "bin": protocol.length_bin(tokens), "o200k_tokens": tokens,
               "beyond_context": bool(item.get("beyond_context"))}
        if not row["beyond_context"]:
            if not isinstance(item.get("response"), str):
                raise EvaluatorError(f"{where}: response must be the model's text; {LAYOUT}")
            row["score"] = protocol.grade(item["response"], item["answer"], item["random_string_to_prepend"])
        rows.append(row)
    return rows


def score_prediction_dir(pred_dir: Path, o200k_file: str | None = None) -> dict[str, Any]:
    """{model name: protocol.table of its file}; writes result.json."""
    from evaluators.mrcr import o200k

    pred_dir = Path(pred_dir)
    files = jsonl_prediction_files(pred_dir, "MRCR", LAYOUT)
    count = o200k.counter(o200k_file)
    out = {}
    for path in files:
        rows = graded(path, count)
        if not rows:
            raise EvaluatorError(f"{path} holds no predictions")
        out[path.stem] = protocol.table(rows)
    write_json_atomic(pred_dir / "result.json", out)
    return out
