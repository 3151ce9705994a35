"""`lctx score helmet` on crafted files in HELMET's output layout (eval.py's .json, its
.json.score, the judge scripts' -gpt4eval_o.json) and on an lctx helmet run's records:
every number worked out by hand as collect_results.py computes it, compared to 1e-9."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from evaluators.errors import EvaluatorError
from evaluators.helmet import score

TOL = 1e-9


def name(dataset: str, length: int) -> str:
    return (f"{dataset}_v1_test_in{length}_size100_shots2_sampFalsemax20min0t0.0p1.0_chatFalse_42")


def write(folder: Path, dataset: str, length: int, data: list[dict[str, Any]], averaged: dict[str, float],
          score_file: dict[str, float] | None = None, gpt4: tuple[list[dict[str, Any]], dict[str, float]] | None = None
          ) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    args = {"datasets": dataset, "input_max_length": length, "tag": "v1", "shots": 2}
    base = folder / name(dataset, length)
    doc = {"args": args, "data": data, "metrics": {}, "averaged_metrics": averaged, "throughput": 1.0}
    (folder / (base.name + ".json")).write_text(json.dumps(doc))
    if score_file is not None:
        (folder / (base.name + ".json.score")).write_text(json.dumps(score_file))
    if gpt4 is not None:
        gdata, gavg = gpt4
        (folder / (base.name + "-gpt4eval_o.json")).write_text(json.dumps({**doc, "data": gdata,
                                                                          "averaged_metrics": {**averaged, **gavg}}))


QREL = [[str(i), "3" if i == 5 else "0"] for i in range(1, 11)]
NQA = [{"output": "They go north", "question": "Where?", "answer": ["north"]} for _ in range(3)]
LEX_REPLIES = ['{"fluency": 1}', 'Reasoning. {"recall": 1}', '{"precision": 5, "sentence_count": 10}']


def helmet_files(folder: Path, nq_recorded: float = 100.0) -> None:
    write(folder, "json_kv", 8192, [{"output": "Corresponding value: 7e1f", "answer": "7e1f"},
                                    {"output": "Corresponding value: zzz", "answer": "7e1f"}],
          {"substring_exact_match": 50.0, "exact_match": 50.0, "input_len": 8000.0},
          score_file={"substring_exact_match": 50.0})
    write(folder, "ruler_niah_mk_2", 8192, [{"output": "are 123 and 456", "answer": ["123", "456"]},
                                            {"output": "is 789", "answer": ["123"]}], {"ruler_recall": 50.0})
    write(folder, "kilt_nq", 8192, [{"output": "Answer: Paris", "answer": ["Paris"]}],
          {"substring_exact_match": nq_recorded})
    write(folder, "kilt_nq", 16384, [{"output": "Answer: London", "answer": ["Paris"]}], {"substring_exact_match": 0.0})
    write(folder, "msmarco_rerank_psg", 8192, [{"output": "[5] > [1]", "qid": "q", "qrel": QREL}], {"NDCG@10": 100.0})
    nqa_judged = [{**NQA[0], "gpt-4-scores": {"fluency": 1, "correctness": 3}},
                  {**NQA[1], "gpt-4-scores": {"fluency": 1, "correctness": 1}},
                  {**NQA[2], "gpt-4-scores": None}]  # the judge's reply did not parse
    write(folder, "narrativeqa_130772", 8192, NQA, {"rougeL_f1": 10.0}, gpt4=(nqa_judged, {"gpt-4-score": 2.0}))
    kp = ["one", "two"]
    lex = [{"output": "The case settled.", "answer": "ref", "id": i, "summary/long": "long", "keypoints": kp}
           for i in range(3)]
    scores0 = {"fluency": 1, "f1": 0.5, "flunecy_output": LEX_REPLIES[0], "recall_output": LEX_REPLIES[1],
               "precision_output": LEX_REPLIES[2]}
    scores1 = {**scores0, "f1": 0.0, "flunecy_output": '{"fluency": 0}'}
    write(folder, "multi_lexsum_130372", 8192, lex, {"rougeL_f1": 1.0},
          gpt4=([{**lex[0], "gpt-4-scores": scores0}, {**lex[1], "gpt-4-scores": scores1}, lex[2]],
                {"gpt-4-f1": 0.25}))
    docs = [{"title": "A", "text": "Paris is in France"}]
    write(folder, "alce_asqa_700", 8192, [{"output": "Paris is in France [1].", "question": "Q", "docs": docs,
                                           "qa_pairs": [{"short_answers": ["France"]}, {"short_answers": ["Spain"]}]}],
          {}, score_file={"str_em": 50.0, "citation_rec": 60.0, "citation_prec": 40.0, "length": 4.0})
    (folder / "result.json").write_text(json.dumps({"not": "helmet"}))


def expected_8k() -> dict[str, float]:
    nqa = 2.0 * 100 / 3  # (1*3 + 1*1) / 2 parsed, x100/3
    cats = {"Recall": (50 + 50) / 2, "RAG": 100.0, "Re-rank": 100.0, "LongQA": nqa, "Summ": 25.0,
            "Cite": (50 + 60 + 40) / 3}
    return {**cats, "Ours": sum(cats.values()) / len(cats)}


def run(pred_dir: Path) -> Any:
    return score.run(argparse.Namespace(pred_dir=str(pred_dir), tolerance=TOL))


def test_helmet_files_reproduce_collect_results(tmp_path: Path) -> None:
    helmet_files(tmp_path / "Llama-X")
    scored = run(tmp_path / "Llama-X")
    r = scored.scores["Llama-X"]
    for which in ("recorded", "recomputed"):
        row8, row16 = r[which]["rows"]
        assert row8["input_max_length"] == 8192 and row16["input_max_length"] == 16384
        for col, value in expected_8k().items():
            assert row8[col] == pytest.approx(value, abs=TOL), (which, col)
        assert row8["ICL"] is None
        assert row16["RAG"] == 0.0 and row16["Ours"] == 0.0
    assert "every recomputed number equals the recorded one" in scored.notes
    by = {(d["dataset"], d["length"]): d for d in r["datasets"]}
    assert by[("narrativeqa_130772", 8192)]["judge_unparsed"] == 1
    assert by[("multi_lexsum_130372", 8192)]["judge_unparsed"] == 1
    assert by[("alce_asqa_700", 8192)]["taken_as_recorded"] == ["citation_rec", "citation_prec"]
    assert by[("alce_asqa_700", 8192)]["recorded_from"].endswith(".json.score")
    assert by[("narrativeqa_130772", 8192)]["recorded_from"].endswith("-gpt4eval_o.json")
    assert any("taken as recorded" in n for n in scored.notes)
    assert json.loads((tmp_path / "Llama-X" / "helmet_scores.json").read_text())["Llama-X"]["recorded"]["overall"]


def test_a_recorded_number_that_differs_is_named(tmp_path: Path) -> None:
    helmet_files(tmp_path / "m", nq_recorded=90.0)
    scored = run(tmp_path / "m")
    assert any("kilt_nq at 8192" in n and "differs" in n for n in scored.notes)
    r = scored.scores["m"]
    assert r["recorded"]["rows"][0]["RAG"] == pytest.approx(90.0, abs=TOL)
    assert r["recomputed"]["rows"][0]["RAG"] == pytest.approx(100.0, abs=TOL)


def test_one_folder_per_model(tmp_path: Path) -> None:
    helmet_files(tmp_path / "out" / "a")
    write(tmp_path / "out" / "b", "kilt_nq", 8192, [{"output": "Paris", "answer": ["Paris"]}, {"output": "no",
                                                                                                "answer": ["x"]}],
          {"substring_exact_match": 50.0})
    r = run(tmp_path / "out").scores
    assert set(r) == {"a", "b"}
    assert r["b"]["recomputed"]["rows"][0]["Ours"] == pytest.approx(50.0, abs=TOL)


def test_lctx_records_are_scored_with_the_same_code(tmp_path: Path) -> None:
    recs = [
        {"task": "helmet", "dataset": "kilt_nq", "length": 8192, "output": "Answer: Paris", "references": ["Paris"],
         "item": {}, "metrics": {"substring_exact_match": 1.0}},
        {"task": "helmet", "dataset": "kilt_nq", "length": 8192, "output": "Answer: Rome", "references": ["Paris"],
         "item": {}, "metrics": {"substring_exact_match": 0.0}},
        {"task": "helmet", "dataset": "narrativeqa", "length": 8192, "output": "Answer: north", "references": ["north"],
         "item": {"question": "Where?"}, "metrics": {"gpt-4-score": 3.0},
         "judgments": [{"answer": 'ok {"fluency": 1, "correctness": 3}'}]},
        {"task": "helmet", "dataset": "narrativeqa", "length": 8192, "output": "Answer: x", "references": ["north"],
         "item": {"question": "Where?"}, "metrics": {}, "judge_unparsed": True,
         "judgments": [{"answer": "no verdict"}]},
        {"task": "helmet", "dataset": "alce_asqa", "length": 8192, "output": "Paris is in France [1].",
         "references": None, "item": {"qa_pairs": [{"short_answers": ["France"]}, {"short_answers": ["Spain"]}]},
         "metrics": {"str_em": 0.5, "citation_rec": 1.0, "citation_prec": 0.5}},
        {"task": "helmet", "dataset": "json_kv", "length": 8192, "error": "non-finite output"},
    ]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    scored = run(tmp_path)
    r = scored.scores[tmp_path.name]
    rag, longqa, cite = 50.0, 100.0, (50 + 100 + 50) / 3
    for which in ("recorded", "recomputed"):
        row = r[which]["rows"][0]
        assert row["RAG"] == pytest.approx(rag, abs=TOL)
        assert row["LongQA"] == pytest.approx(longqa, abs=TOL)
        assert row["Cite"] == pytest.approx(cite, abs=TOL)
        assert row["Ours"] == pytest.approx((rag + longqa + cite) / 3, abs=TOL)
    by = {d["dataset"]: d for d in r["datasets"]}
    assert by["narrativeqa"]["judge_unparsed"] == 1
    assert "every recomputed number equals the recorded one" in scored.notes


def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="not a folder"):
        run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvaluatorError, match="no HELMET files"):
        run(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text(json.dumps({"args": {"datasets": "kilt_nq"}, "data": [], "averaged_metrics": {}}))
    with pytest.raises(EvaluatorError, match="input_max_length"):
        run(bad)
    (bad / "x.json").write_text(json.dumps({"args": {"datasets": "kilt_nq", "input_max_length": 8192},
                                            "data": [{"answer": ["a"]}], "averaged_metrics": {}}))
    with pytest.raises(EvaluatorError, match="without its output"):
        run(bad)
    (bad / "x.json").write_text("{not json")
    with pytest.raises(EvaluatorError, match="not a JSON file"):
        run(bad)
