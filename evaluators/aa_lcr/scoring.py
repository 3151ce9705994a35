"""`lctx score aa-lcr` (or aa_lcr): the card's judge prompt on answers made elsewhere, graded by the judge
given (no model under test runs). The folder holds one JSONL file per model (`<model>.jsonl`),
one line per question (and repeat) of ArtificialAnalysis/AA-LCR: the row's `question_id`,
`question`, `answer` (the CSV's official answer) and `document_category`, with the model's
`response` (its answer, a think block left out) and optionally `repeat` (default 0); a question
the model could not take carries `"beyond_context": true` and no response, and is counted,
not judged. lctx's own records (`samples.jsonl` of an aa_lcr run) are read too: `prediction`
for `response`, `references[0]` for `answer`. Writes, beside the files, `judged/<model>.jsonl`
(each line with its `judgment`: the judge's name, settings and raw answer, and its verdict),
`result.json` (per model: the judge, the prompt version, `protocol.table`) and the cache of
judgments in `judgments/` (a second run asks the judge nothing it asked before)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.aa_lcr import protocol
from evaluators.data import json_objects
from evaluators.datafiles import jsonl_prediction_files
from evaluators.errors import EvaluatorError
from evaluators.judges import JUDGMENTS_DIR, Judge, Judging, JudgmentCache

OUTPUTS = ("result.json", "judged", JUDGMENTS_DIR)
LAYOUT = ("one JSON object per line with question_id (text or a whole number), question, answer, document_category "
          "and response (or beyond_context: true); lctx's samples.jsonl records are read as they are")


def row_of(item: dict[str, Any], where: str) -> dict[str, Any]:
    """One prediction line as the table reads it (LAYOUT's names, or an lctx record's)."""
    answer = item.get("answer")
    if answer is None and isinstance(item.get("references"), list) and item["references"]:
        answer = item["references"][0]
    response = item.get("response", item.get("prediction"))
    question_id = item.get("question_id")
    if isinstance(question_id, int) and not isinstance(question_id, bool):  # the card's CSV numbers them: 1, 2, ...
        question_id = str(question_id)
    row = {"question_id": question_id, "question": item.get("question"), "answer": answer,
           "document_category": item.get("document_category"), "repeat": item.get("repeat", 0),
           "beyond_context": bool(item.get("beyond_context")), "response": response}
    missing = [k for k in ("question_id", "question", "answer", "document_category") if not isinstance(row[k], str)]
    if missing:
        raise EvaluatorError(f"{where}: lacks {', '.join(missing)} (text); {LAYOUT}")
    if not row["beyond_context"] and not isinstance(response, str):
        raise EvaluatorError(f"{where}: response must be the model's answer (text); {LAYOUT}")
    return row


def score_prediction_dir(pred_dir: Path, judge: Judge, judge_prompt: str = "v1.1", max_new_tokens: int = 256,
                         thinking_budget: int = 2048, refresh: bool = False) -> dict[str, Any]:
    """{model: {"judge", "judge_prompt", "table"}} of each file, judged by `judge` with the
    card's prompt `judge_prompt`; writes result.json and judged/<model>.jsonl."""
    pred_dir = Path(pred_dir)
    files = jsonl_prediction_files(pred_dir, "AA-LCR", LAYOUT)
    judging = Judging(judge, JudgmentCache(pred_dir / JUDGMENTS_DIR, refresh=refresh), max_new_tokens, thinking_budget)
    out = {}
    for path in files:
        rows = [row_of(item, f"{path}:{n}") for n, item in json_objects(path, "a prediction")]
        if not rows:
            raise EvaluatorError(f"{path} holds no predictions")
        asked = [r for r in rows if not r["beyond_context"]]
        judgments = judging.ask([protocol.judge_messages(judge_prompt, r["question"], r["answer"], r["response"])
                                 for r in asked])
        for r, judgment in zip(asked, judgments, strict=True):
            said = protocol.verdict(judge_prompt, judgment["answer"])
            r.update(judgment={**judgment, "verdict": said}, verdict=said, score=protocol.score_of(said))
        judged = pred_dir / "judged" / path.name
        judged.parent.mkdir(exist_ok=True)
        judged.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        out[path.stem] = {"judge": judge.ref, "judge_prompt": judge_prompt, "table": protocol.table(rows)}
    write_json_atomic(pred_dir / "result.json", out)
    return out
