"""`lctx score longbench-v2`: result.py on a folder of prediction files in pred.py's
layout (`<model>.jsonl`, `<model>_cot.jsonl`, ...; one JSON item per line with `judge`,
`difficulty`, `length`, `pred`, or one JSON array). Like result.py it reads every file
of the folder (a whole-file JSON array first, else one object per line), names each row
after the file without its extension and writes the table to result.txt (tab-separated,
its header); lctx also writes result.json with the counts. Rows come in name order
(result.py's follow os.listdir)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.errors import EvaluatorError
from evaluators.longbench_v2.protocol import result_row

HEADER = "Model\tOverall\tEasy\tHard\tShort\tMedium\tLong"
OUTPUTS = ("result.txt", "result.json")
NEEDED = ("judge", "difficulty", "length")


def read_predictions(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        items = json.loads(text)
    except json.JSONDecodeError:
        items = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise EvaluatorError(f"{path}:{lineno}: not JSON ({e.msg}); pred.py writes one item per line") from None
    if isinstance(items, dict):
        items = [items]
    for i, item in enumerate(items):
        if not isinstance(item, dict) or any(k not in item for k in NEEDED):
            raise EvaluatorError(f"{path}: item {i} lacks {list(NEEDED)} (pred.py's layout: the data record with "
                                 "'response', 'pred' and 'judge' added)")
    return items


def _cell(value: float | None) -> str:
    return "-" if value is None else str(value)


def score_prediction_dir(pred_dir: Path, compensated: bool = False) -> dict[str, Any]:
    """{model name: result.py's numbers and counts}; writes result.txt and result.json."""
    pred_dir = Path(pred_dir)
    if not pred_dir.is_dir():
        raise EvaluatorError(f"{pred_dir} is not a folder of LongBench v2 prediction files")
    files = sorted(p for p in pred_dir.iterdir() if p.is_file() and p.name not in OUTPUTS
                   and not p.name.startswith("."))
    if not files:
        raise EvaluatorError(f"no prediction files in {pred_dir}: expected pred.py's <model>.jsonl files")
    table: dict[str, Any] = {}
    lines = [HEADER]
    for path in files:
        items = read_predictions(path)
        if not items:
            raise EvaluatorError(f"{path} holds no predictions (result.py would divide by zero)")
        row = result_row(items, compensated)
        name = ".".join(path.name.split(".")[:-1])
        table[name] = row.as_dict()
        lines.append("\t".join([name] + [_cell(v) for v in (row.overall, row.easy, row.hard, row.short, row.medium,
                                                            row.long)]))
    (pred_dir / "result.txt").write_text("\n".join(lines), encoding="utf-8")
    write_json_atomic(pred_dir / "result.json", table)
    return table
