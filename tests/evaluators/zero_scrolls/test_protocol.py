"""ZeroSCROLLS' prompts, truncation and metrics against an independent reading of its code on
crafted examples and outputs: every branch of each metric, the chat format, build_prompt's
truncation, and `lctx score zero-scrolls` on the scripts' preds files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy.stats import kendalltau

from cli.main import main
from evaluators.zero_scrolls import protocol
from evaluators.zero_scrolls.protocol import (
    accuracy_score,
    concordant_index_score,
    exp_similarity_score,
    f1_score,
)


def example(text: str = "Summarize it.\n\nDoc: the story.\n\nQuestion: who?\n\nAnswer:") -> dict:
    q = text.index("Question:")
    return {"id": "a", "input": text, "query_start_index": q, "query_end_index": text.index("\n\nAnswer:"),
            "document_start_index": text.index("\n\n") + 2, "document_end_index": q - 2,
            "truncation_seperator": "... [The rest of the story is omitted]\n\n"}


def test_chat_format_adds_the_request_and_drops_the_answer_prompt() -> None:
    ex = protocol.chat_example(example(), "qasper")
    assert ex["input"] == "Summarize it. Do not provide any explanation.\n\nDoc: the story.\n\nQuestion: who?"
    assert ex["input"][ex["query_start_index"]:].startswith("Question:")
    summary = protocol.chat_example(example(), "gov_report")  # summarization: no format request
    assert summary["input"] == "Summarize it.\n\nDoc: the story.\n\nQuestion: who?"


def test_build_prompt_keeps_the_query() -> None:
    ex = example("Instr.\n\n" + "x" * 200 + "\n\nQuestion: q?\n\nAnswer:")
    enc, dec = (lambda s: [ord(c) for c in s]), (lambda ids: "".join(map(chr, ids)))
    assert protocol.build_prompt(ex, enc, dec, 500, 10, chat=False) == (ex["input"], False)
    prompt, cut = protocol.build_prompt(ex, enc, dec, 150, 10, chat=False)
    suffix = ex["truncation_seperator"] + ex["input"][ex["query_start_index"]:]
    keep = 150 - len(suffix) - 10 - 1
    assert cut and prompt == ex["input"][:keep] + suffix
    chat_prompt, _ = protocol.build_prompt(ex, enc, dec, 150, 10, chat=True)
    assert chat_prompt == ex["input"][:keep - 9] + suffix
    with pytest.raises(ValueError, match="no room"):
        protocol.build_prompt(ex, enc, dec, 60, 10, chat=False)


@pytest.mark.parametrize(("pred", "gold", "want"), [
    ("The Eiffel tower!", "eiffel Tower", 1.0), ("Café au lait", "cafe au lait", 1.0), ("x y", "y z", 0.5),
    ("nothing", "else", 0.0), ("the a an", "the", 0.0),
])
def test_f1(pred: str, gold: str, want: float) -> None:
    assert f1_score(pred, gold) == pytest.approx(want)


@pytest.mark.parametrize(("pred", "gold", "want"), [
    ("About 40% of them", "40%", 1.0), ("30%", "40%", 0.5), ("20.5%", "40.5%", 0.25),
    ("no number", "40%", 0.0), ("10%", "no percentage", 0.5), ("40 %", "40%", 0.0),
])
def test_exp_similarity(pred: str, gold: str, want: float) -> None:
    assert exp_similarity_score(pred, gold) == pytest.approx(want)


@pytest.mark.parametrize("pred", ["3, 1, 2, 4", "1 2 3 4", "4,3,2,1", "Summary 2 then 1, 4, 3."])
def test_concordance_index_is_kendalls_tau_rescaled(pred: str) -> None:
    gold = "1, 2, 3, 4"
    p = protocol.normalize_answer_ci(pred)
    tau = kendalltau(protocol.positions([1, 2, 3, 4]), protocol.positions(p)).statistic
    assert concordant_index_score(pred, gold) == pytest.approx((tau + 1) / 2)


def test_concordance_index_zero_and_normalization() -> None:
    assert concordant_index_score("1, 2, 3", "1, 2, 3, 4") == 0.0  # not the same ids
    assert protocol.normalize_answer_ci("[2], [1]!") == [2, 1]
    assert protocol.normalize_answer_ci("no ids") == []
    with pytest.raises(ZeroDivisionError):  # one summary: lifelines has no pair to compare
        concordant_index_score("1", "1")


def test_accuracy() -> None:
    assert accuracy_score("The answer is (B)", "(B) a cat") == 1.0
    assert accuracy_score("A or B", "(B) a cat") == 0.0  # the first standalone letter
    assert accuracy_score("Bob", "(B) a cat") == 0.0
    with pytest.raises(ValueError, match="Invalid ground truth"):
        accuracy_score("A", "none")


def test_rouge_is_the_geometric_mean_of_the_means() -> None:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)
    preds, refs = ["the cat sat on a mat", "dogs bark"], [["the cat sat on the mat"], ["dogs bark loudly", "no"]]
    per = [protocol.example_score("gov_report", p, r) for p, r in zip(preds, refs, strict=True)]
    means = {k: 100 * sum(max(scorer.score(x, p)[k].fmeasure for x in r) for p, r in zip(preds, refs, strict=True)) / 2
             for k in ("rouge1", "rouge2", "rougeL")}
    want = (means["rouge1"] * means["rouge2"] * means["rougeL"]) ** (1 / 3)
    assert protocol.dataset_score("gov_report", per)["score"] == pytest.approx(want)


def test_lctx_score_reads_the_preds_files(tmp_path: Path) -> None:
    data = tmp_path / "data" / "zero_scrolls"
    for d, rows in {"space_digest": [{"id": "s1", "output": "40%"}, {"id": "s2", "output": "10%"}],
                    "quality": [{"id": "q1", "output": "(A) x"}, {"id": "q1", "output": "(A) x"}]}.items():
        (data / d).mkdir(parents=True)
        (data / d / "validation.jsonl").write_text("\n".join(json.dumps({**example(), **r}) for r in rows))
    pred = tmp_path / "preds"
    pred.mkdir()
    (pred / "preds_space_digest.json").write_text(json.dumps({"s1": "30%", "s2": "10%"}))
    (pred / "preds_quality.json").write_text(json.dumps({"q1": "A"}))
    assert main(["score", "zero-scrolls", "--pred-dir", str(pred), "--data-dir", str(tmp_path / "data")]) == 0
    table = json.loads((pred / "result.json").read_text())
    assert table["space_digest"]["score"] == pytest.approx(75.0) and table["quality"] == {
        "accuracy": 100.0, "score": 100.0, "n": 1}
    assert table["average"] == pytest.approx(87.5)
    (pred / "preds_quality.json").write_text(json.dumps({"q2": "A"}))
    assert main(["score", "zero-scrolls", "--pred-dir", str(pred), "--data-dir", str(tmp_path / "data")]) != 0
