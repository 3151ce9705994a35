"""InfiniteBench through the run path on a tiny model with crafted task files: the prompt
truncated in the middle to the budget, each task scored by its compute_scores scorer, the
result per task and averaged; missing files refused naming every path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators.errors import EvaluatorError
from evaluators.infinitebench import protocol
from evaluators.infinitebench.options import InfiniteBenchOptions
from evaluators.registry import validate_task
from evaluators.suite import run_task
from tests.helpers import tiny_model, typed

HAYSTACK = "The grass is green. The sky is blue. " * 40


def write_data(folder: Path) -> None:
    rows = {
        "passkey": [{"id": 0, "context": HAYSTACK + "The pass key is 71432. " + HAYSTACK,
                     "input": "What is the pass key?", "answer": ["71432"], "options": []}],
        "longbook_choice_eng": [{"id": 0, "context": HAYSTACK, "input": "What colour is the sky?",
                                 "options": ["red", "blue", "green", "grey"], "answer": ["blue"]}],
        "math_calc": [{"id": 0, "context": "1 + 2 + 3", "input": "", "answer": [[1, 3, 6]], "options": []}],
    }
    (folder / "InfiniteBench").mkdir(parents=True)
    for task, rs in rows.items():
        (folder / "InfiniteBench" / f"{task}.jsonl").write_text("\n".join(json.dumps(r) for r in rs) + "\n")


def test_missing_files_are_refused_naming_each_path(tmp_path: Path) -> None:
    opts = InfiniteBenchOptions(tasks=["passkey", "code_run"])
    [line] = opts.missing_files(tmp_path)
    for task in ("passkey", "code_run"):
        assert str(tmp_path / "InfiniteBench" / f"{task}.jsonl") in line and str(tmp_path / f"{task}.jsonl") in line
    assert "xinrongzhang2022/InfiniteBench" in line and "no data directory" in opts.missing_files(None)[0]
    write_data(tmp_path)
    assert InfiniteBenchOptions(tasks=["passkey"]).missing_files(tmp_path) == []
    with pytest.raises(EvaluatorError, match="chat_template=true"):
        validate_task({"name": "infinitebench", "prompts": "gpt4"})
    with pytest.raises(EvaluatorError, match="tasks"):
        validate_task({"name": "infinitebench", "tasks": "passkey,nope"})


def test_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    loaded = tiny_model(tmp_path / "m", max_position_embeddings=512)
    task = {"name": "infinitebench", "tasks": "passkey,longbook_choice_eng,math_calc", "max_new_tokens": 4}
    result = run_task(loaded, task, tmp_path / "out", data_dir=tmp_path / "data")
    recs = {r["subtask"]: r for r in map(json.loads, (tmp_path / "out" / "samples.jsonl").read_text().splitlines())}
    assert set(recs) == {"passkey", "longbook_choice_eng", "math_calc"}
    for name, r in recs.items():
        assert r["max_length"] == 512 - 4  # the model's context less the generation
        assert r["score"] == protocol.score_one(name, r["prediction"], r["references"]).literal
    assert recs["passkey"]["truncated"] and recs["passkey"]["prompt_tokens"] <= 508 + 1
    assert not recs["math_calc"]["truncated"] and recs["longbook_choice_eng"]["references"] == ["blue", "B"]
    res = typed(result)
    assert res.headline == "average" and res.metric("passkey").n == 1
    want = round(sum(100 * recs[t]["score"] for t in recs) / 3, 2)
    assert res.metric("average").value == pytest.approx(want)
