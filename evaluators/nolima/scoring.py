"""`lctx score nolima`: NoLiMa's result files (one JSON per test and haystack, as
`NoLiMa_Tester.evaluate` writes them under each run config's parent_results_dir) gathered as
evaluation/gather_results.ipynb gathers them, each result's metric recomputed from its response
(`_evaluate_response` with the file's metric and gold answers, or the drawn character when the
needle has {CHAR}); per file the mean rounded to 4 decimals (`get_summarized_result`), per
context length the mean over files in percent; then the base score and the effective length.
Like the notebook it skips files whose name holds "direct" unless asked. Writes result.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.errors import EvaluatorError
from evaluators.nolima.protocol import evaluate_response, summarize

OUTPUT = "result.json"


def file_result(path: Path) -> tuple[int, float, int, int]:
    """(context length, the file's mean rounded to 4 decimals, results, results whose stored
    metric differs from the recomputed one)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        length, results = int(data["context_length"]), data["results"]
        metric, needle, gold = data.get("metric", "EM"), data.get("needle", ""), data.get("gold_answers", "")
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise EvaluatorError(f"{path}: not a NoLiMa result file ({type(e).__name__}: {e}); expected "
                             "async_evaluate.py's output with context_length and results") from None
    if not isinstance(results, list) or not results:
        raise EvaluatorError(f"{path}: no results (the notebook's mean would be nan)")
    scores, differs = [], 0
    for i, r in enumerate(results):
        if not isinstance(r, dict) or not isinstance(r.get("response"), str):
            raise EvaluatorError(f"{path}: result {i} has no response")
        answers = [r["selected_character"]] if "{CHAR}" in needle else gold
        try:
            score = evaluate_response(r["response"], answers, metric)
        except ValueError as e:
            raise EvaluatorError(f"{path}: {e}") from None
        differs += "metric" in r and r["metric"] != score
        scores.append(score)
    return length, round(sum(scores) / len(scores), 4), len(scores), differs


def score_prediction_dir(pred_dir: Path, include_direct: bool = False, metric: str = "contains") -> dict[str, Any]:
    """The gathered scores; an lctx run's samples.jsonl is scored per sample with `metric`."""
    pred_dir = Path(pred_dir)
    if not pred_dir.is_dir():
        raise EvaluatorError(f"{pred_dir} is not a folder of NoLiMa result files")
    by_length: dict[int, list[float]] = {}
    counted = differs = 0
    samples = pred_dir / "samples.jsonl"
    if samples.is_file():  # an lctx run: each record's response scored again, its length's mean
        for line in samples.read_text(encoding="utf-8").splitlines():
            r = json.loads(line) if line.strip() else {}
            if r.get("task") == "nolima" and isinstance(r.get("prediction"), str):
                by_length.setdefault(int(r["length"]), []).append(
                    evaluate_response(r["prediction"], r["references"], metric))
                counted += 1
    for path in sorted(pred_dir.rglob("*.json")):
        if path.name == OUTPUT or (not include_direct and "direct" in path.name):
            continue
        length, mean, n, d = file_result(path)
        by_length.setdefault(length, []).append(mean)
        counted += n
        differs += d
    if not by_length:
        raise EvaluatorError(f"no NoLiMa result files under {pred_dir}: expected async_evaluate.py's "
                             "<model>_book_<test>_<time>.json files")
    scores = {n: 100 * sum(v) / len(v) for n, v in sorted(by_length.items())}
    base, threshold, effective = summarize(scores)
    result = {"accuracy": {str(n): v for n, v in scores.items()}, "files": {str(n): len(v) for n, v in
                                                                              sorted(by_length.items())},
              "base_score": base, "threshold": threshold, "effective_length": effective, "results": counted,
              "stored_metric_differs": differs}
    write_json_atomic(pred_dir / OUTPUT, result)
    return result
