"""RULER v2 through the run path on a tiny model with crafted prepared files (NeMo-Skills'
layout): scored by each task's route, per setup and task; a prompt beyond the context
recorded and scored 0; missing files and setups refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators.errors import EvaluatorError
from evaluators.registry import validate_task
from evaluators.ruler_v2 import protocol
from evaluators.ruler_v2.options import RulerV2Options
from evaluators.suite import run_task
from tests.helpers import tiny_model, typed


def write_setup(root: Path, setup: str) -> None:
    rows = {"mv_niah_basic": [{"index": 0, "question": "One of the special magic numbers for x is: 12.\nWhat are all "
                               "the special magic numbers for x? The special magic numbers for x are",
                               "expected_answer": ["12"], "length": 30}],
            "mk_niah_medium": [{"index": 0, "question": "Q1: 2+2? A. 3 B. 4 C. 5 D. 6\nSolve it in \\boxed{}.",
                                "expected_answer": "B", "length": 25},
                               {"index": 1, "question": "long " * 600, "expected_answer": "A", "length": 600}]}
    for task, rs in rows.items():
        folder = root / "ruler2" / setup / task
        folder.mkdir(parents=True)
        (folder / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rs) + "\n")


def test_missing_setup_and_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="lengths"):
        validate_task({"name": "ruler_v2"})
    with pytest.raises(EvaluatorError, match="setups"):
        validate_task({"name": "ruler_v2", "source": "prepared"})
    with pytest.raises(EvaluatorError, match="source=prepared"):
        validate_task({"name": "ruler_v2", "lengths": [4096], "setups": "m_4096"})
    opts = RulerV2Options(source="prepared", setups=["m_4096"], tasks=["qa_easy"])
    [line] = opts.missing_files(tmp_path)
    assert str(tmp_path / "ruler2" / "m_4096" / "qa_easy" / "test.jsonl") in line and "prepare" in line


def test_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    write_setup(tmp_path / "data", "tiny_512")
    loaded = tiny_model(tmp_path / "m", max_position_embeddings=512)
    task = {"name": "ruler_v2", "source": "prepared", "setups": "tiny_512", "tasks": "mv_niah_basic,mk_niah_medium",
            "chat_template": False, "max_new_tokens": 4}
    result = run_task(loaded, task, tmp_path / "out", data_dir=tmp_path / "data")
    recs = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert len(recs) == 3
    for r in recs:
        if r["beyond_context"]:
            assert r["index"] == 1 and r["score"] == 0.0 and r["prediction"] is None
        else:
            assert r["score"] == protocol.score_one(r["subtask"], r["prediction"], r["references"]).score
            assert r["max_new_tokens"] == 4
    res = typed(result)
    cells = protocol.table(recs)["tiny_512"]
    assert res.headline == "average" and res.metric("tiny_512").value == protocol.setup_score(cells)
    assert res.metric("tiny_512/mk_niah_medium").n == 2 and res.extra["beyond_context"] == 1


def test_generated_end_to_end_on_a_tiny_model(tmp_path: Path, source_data: Path) -> None:
    """source=generate: per task and length, the samples drawn as `synthetic.generate` draws them
    with the evaluator's chat path, each request the fit test's ids; scored by the task's route."""
    from evaluators.ruler_v2.synthetic import generate

    loaded = tiny_model(tmp_path / "m", max_position_embeddings=2048)
    task = {"name": "ruler_v2", "lengths": [1500, 1800], "samples": 1, "tasks": "mk_niah_basic,mv_niah_hard,qa_hard",
            "chat_template": False, "max_new_tokens": 4}
    result = run_task(loaded, task, tmp_path / "out", data_dir=source_data)
    recs = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert len(recs) == 6 and {(r["length"], r["setup"]) for r in recs} == {(1500, "1500"), (1800, "1800")}
    for r in recs:
        drawn = generate(r["subtask"], loaded.tokenizer, r["length"], 1, data_dir=source_data)[r["index"]]
        assert r["references"] == drawn.expected_answer and r["sample_index"] == drawn.index
        assert r["prompt_tokens"] == len(drawn.ids) and r["prepared_length"] <= r["length"]
        assert r["score"] == protocol.score_one(r["subtask"], r["prediction"], r["references"]).score
    res = typed(result)
    assert res.metric("1800/qa_hard").n == 1 and res.metric("1500").value == protocol.setup_score(
        protocol.table(recs)["1500"])


def test_generate_refuses_missing_sources(tmp_path: Path) -> None:
    opts = RulerV2Options(lengths=[4096], tasks=["mk_niah_basic", "qa_hard"])
    dev, train = opts.missing_files(tmp_path)
    assert "hotpotqa.json" in dev and str(tmp_path / "ruler2") in dev and "hotpot_train_v1.1.json" in train
    assert RulerV2Options(lengths=[4096], tasks=["mk_niah_basic"]).missing_files(None) == []
