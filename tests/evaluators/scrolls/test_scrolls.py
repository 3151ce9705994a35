"""SCROLLS: rows grouped by id, truncation keeps the query, the official metric
dict for existing predictions, and an end-to-end run on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoints.tokenizer import ByteTokenizer
from evaluators import EvaluatorError, run_task, validate_task
from evaluators.scrolls.data import group_by_id, load_scrolls
from evaluators.scrolls.evaluator import score_predictions_file, truncate_end
from tests.helpers import points, tiny_model, typed

DATA = Path(__file__).resolve().parents[1] / "data" / "scrolls"


def test_rows_sharing_an_id_are_one_example() -> None:
    ex = group_by_id(load_scrolls("qasper", "validation", DATA))
    assert [e["id"] for e in ex] == ["q1", "q2"]
    assert ex[0]["outputs"] == ["funding for three new schools", "three new schools and a library"]


def test_truncation_keeps_the_query() -> None:
    tok = ByteTokenizer()
    text = "What was approved?\n\n" + "document " * 50
    ids, truncated = truncate_end(tok, text, 40)
    assert truncated and len(ids) == 40 and tok.decode(ids).startswith("What was approved?\n\n")


def test_official_metric_dict_for_predictions(tmp_path: Path) -> None:
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"q1": "three new schools", "q2": "on Tuesday"}))
    out = score_predictions_file("qasper", preds, DATA)
    # q1: P = 1, R = 3/5 against either reference -> 75; q2: "on tuesday" vs "tuesday": P = 1/2, R = 1 -> 66.67
    assert out["f1"] == pytest.approx((75.0 + 200 / 3) / 2)
    assert out["scrolls_score"] == out["f1"] and out["num_predicted"] == 2
    preds.write_text(json.dumps({"g1": "The committee approved funding for new schools and a library."}))
    out = score_predictions_file("gov_report", preds, DATA)
    assert out["rouge/rouge1"] == pytest.approx(100.0) and out["rouge/geometric_mean"] == pytest.approx(100.0)
    assert out["display_keys"] == ["rouge/rouge1", "rouge/rouge2", "rouge/rougeL"]
    preds.write_text(json.dumps({"q1": "x"}))
    with pytest.raises(EvaluatorError, match="no prediction"):
        score_predictions_file("qasper", preds, DATA)


def test_metric_dict_has_the_official_keys_and_rounding(tmp_path: Path) -> None:
    """The `tau/scrolls` metric script rounds every figure to 4 decimals and adds
    scrolls_score, display_keys and display."""
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"q1": "three new schools", "q2": "on Tuesday"}))
    out = score_predictions_file("qasper", preds, DATA)
    # (75 + 66.666...) / 2 = 70.8333...
    assert out == {"f1": 70.8333, "num_predicted": 2, "mean_prediction_length_characters": 13.5,
                   "scrolls_score": 70.8333, "display_keys": ["f1"], "display": [70.8333]}


def test_options() -> None:
    assert validate_task({"name": "scrolls"})["tasks"] == [
        "gov_report", "summ_screen_fd", "qmsum", "qasper", "narrative_qa", "quality", "contract_nli"]
    assert validate_task({"name": "scrolls", "datasets": ["quality"]})["tasks"] == ["quality"]
    with pytest.raises(EvaluatorError, match="tasks.0: Input should be 'gov_report'"):
        validate_task({"name": "scrolls", "tasks": ["squad"]})
    with pytest.raises(EvaluatorError, match="split"):
        validate_task({"name": "scrolls", "split": "dev"})


def test_scrolls_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    task = {"name": "scrolls", "prompt": "official", "max_length": 200, "max_new_tokens": 8}  # all seven tasks
    result = run_task(loaded, task, tmp_path / "out", data_dir=DATA)
    records = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    ids = sorted(r["id"] for r in records)
    assert len(ids) == 8 and {"scrolls/qasper/q1", "scrolls/qasper/q2", "scrolls/narrative_qa/n1"} <= set(ids)
    assert all(r["prompt_tokens"] <= 192 for r in records)
    assert [r["truncated"] for r in records if r["id"] == "scrolls/gov_report/g1"] == [True]
    assert [r["references"] for r in records if r["id"] == "scrolls/narrative_qa/n1"] == [
        ["His daughter.", "The sailor's daughter"]]  # two rows, one example
    scores = points(result, "score", "dataset")
    assert len(scores) == 7 and sum(p.n for p in scores.values()) == len(ids) == 8
    assert set(typed(result).extra["tasks"]["gov_report"]) >= {"rouge1", "rouge2", "rougeL", "score"}
    assert typed(result).metric("score").value == pytest.approx(sum(p.value for p in scores.values()) / 7)

    assert typed(result).extra["prompt"] == "official" and all(r["prompt_mode"] == "official" for r in records)


# lm-eval 0.4.13's scrolls/task.py, written out (its module cannot be imported here: it needs
# transformers' squad_metrics and datasets' hub loaders): _process_doc_prepended_question,
# each task's _process_doc and doc_to_text, and the multiple-choice process_results.
def lm_eval_reference(task: str, inp: str, outputs: list[str]) -> tuple[str, list[str] | None, int | None]:
    import re

    split = inp.find("\n\n")
    question, text = inp[0:split], inp[split + 2 :]
    if task in ("gov_report", "summ_screen_fd"):
        return f"{inp}\n\nQuestion: What is a summary of the preceding text?\nAnswer:", None, None
    if task == "contract_nli":
        choices = ["Not mentioned", "Entailment", "Contradiction"]
        return f"{text}\n\nHypothesis: {question}\nConclusion:", choices, choices.index(outputs[0])
    choices, gold = None, None
    if task == "quality":
        cut = text.find("\n\n", text.find("(D)"))
        norm = lambda x: " ".join(x.split()).strip()  # noqa: E731
        choices = [norm(c) for c in re.split(re.compile(r" *\([A-D]\) *"), text[:cut])[1:]]
        text = text[cut:].strip()
        gold = choices.index(norm(outputs[0]))
    return f"{text}\n\nQuestion: {question}\nAnswer:", choices, gold


def test_lm_eval_prompts_and_choices_equal_lm_evals() -> None:
    from evaluators.scrolls.evaluator import lm_eval_doc

    for t in ("gov_report", "summ_screen_fd", "qmsum", "qasper", "narrative_qa", "quality", "contract_nli"):
        for ex in group_by_id(load_scrolls(t, "validation", DATA)):
            prompt, choices, gold = lm_eval_reference(t, ex["input"], ex["outputs"])
            got = lm_eval_doc(t, ex["input"], ex["outputs"])
            assert (got["prompt"], got["choices"], got["gold"]) == (prompt, choices, gold), t
            assert got["prompt"].endswith(("\nAnswer:", "\nConclusion:"))
    assert lm_eval_doc("quality", load_scrolls("quality", "validation", DATA)[0]["input"], ["three"])["choices"] == [
        "one", "two", "three", "four"]
    yes_no = lm_eval_doc("qasper", "Was it funded?\n\nIt was.", ["Yes", "yes."])
    assert yes_no["choices"] == ["yes", "no"] and lm_eval_doc("qasper", "Q?\n\nD.", ["Yes", "a library"])[
        "choices"] is None


def test_lm_eval_mode_scores_choices_by_loglikelihood(tmp_path: Path) -> None:
    """QuALITY, ContractNLI and a Qasper yes/no question: one log-likelihood per " choice",
    the prediction lm-eval's (em = acc_norm x 100; qasper " yes"/" no" by F1), checked
    against checkpoints.generate's one-sequence log-likelihood; generation stops at "\n"."""
    import shutil

    from checkpoints.generate import loglikelihood
    from evaluators.scrolls.metrics import squad_f1

    data = tmp_path / "data"
    for t in ("quality", "contract_nli", "narrative_qa"):
        shutil.copytree(DATA / t, data / t)
    (data / "qasper").mkdir()
    (data / "qasper" / "validation.jsonl").write_text("".join(json.dumps(
        {"id": "y1", "pid": f"y1_{i}", "input": "Was a library funded?\n\nThe committee funded a library.",
         "output": o}) + "\n" for i, o in enumerate(["Yes", "yes."])))
    loaded = tiny_model(tmp_path / "m")
    result = run_task(loaded, {"name": "scrolls", "tasks": ["quality", "contract_nli", "qasper", "narrative_qa"],
                               "max_length": 2000, "max_new_tokens": 8}, tmp_path / "out", data_dir=data)
    records = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records if "choice" in r) == sorted(
        [f"scrolls/quality/u1/choice={k}" for k in range(4)] + [f"scrolls/contract_nli/c1/choice={k}" for k in range(3)]
        + ["scrolls/qasper/y1/choice=0", "scrolls/qasper/y1/choice=1"])
    tok = loaded.tokenizer
    assert not any(r["truncated"] for r in records)
    scores = points(result, "score", "dataset")
    for t, ex in (("quality", "u1"), ("contract_nli", "c1")):
        e = group_by_id(load_scrolls(t, "validation", data))[0]
        prompt, choices, gold = lm_eval_reference(t, e["input"], e["outputs"])
        lls = [loglikelihood(loaded.model, tok.encode(prompt), tok.encode(" " + c, add_special_tokens=False))[0]
               for c in choices]
        got = [r["loglikelihood"] for r in sorted((r for r in records if r.get("example") == ex),
                                                  key=lambda r: r["choice"])]
        assert got == pytest.approx(lls, abs=1e-4)
        acc_norm = float(max(range(len(lls)), key=lambda k: lls[k] / len(choices[k])) == gold)
        assert scores[t].value == 100 * acc_norm
        assert typed(result).extra["tasks"][t]["acc"] == 100 * float(max(range(len(lls)), key=lambda k: lls[k]) == gold)
    prompt, _, _ = lm_eval_reference("qasper", "Was a library funded?\n\nThe committee funded a library.", [])
    ll_yes, ll_no = (loglikelihood(loaded.model, tok.encode(prompt), tok.encode(c, add_special_tokens=False))[0]
                     for c in (" yes", " no"))
    prediction = " yes" if ll_yes > ll_no else " no"
    assert scores["qasper"].value == pytest.approx(100 * max(squad_f1(prediction, o) for o in ["Yes", "yes."]))
    narrative = [r for r in records if r["scrolls_task"] == "narrative_qa"]
    assert all("\n" not in r["prediction"] and r["prompt_mode"] == "lm-eval" for r in narrative)
    assert typed(result).extra["prompt"] == "lm-eval"


def test_lm_eval_truncation_keeps_bos_and_the_question_at_the_end() -> None:
    from evaluators.scrolls.evaluator import truncate_start

    tok = ByteTokenizer()
    text = "document " * 50 + "\n\nQuestion: What?\nAnswer:"
    ids, truncated = truncate_start(tok, text, 40)
    assert truncated and len(ids) == 40 and ids[0] == tok.BOS and tok.decode(ids).endswith("Question: What?\nAnswer:")
