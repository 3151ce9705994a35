"""LongBench: configs read from lm-eval, prompt and truncation, chat template
exceptions, scoring parity with lm-eval's metric functions under the official
rules, the prediction-directory scorer and an end-to-end run on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval.tasks.longbench.metrics as lb
import pytest

from checkpoints.tokenizer import ByteTokenizer
from evaluators import EvaluatorError, run_task, validate_task
from evaluators.longbench.configs import configs
from evaluators.longbench.data import load_longbench
from evaluators.longbench.evaluator import (
    LongBenchEvaluator,
    render_prompt,
    score_prediction_dir,
    truncate_middle,
)
from tests.helpers import points, tiny_model, typed

DATA = Path(__file__).resolve().parents[1] / "data" / "longbench"


# LongBench's config/dataset2maxlen.json, as a check on what was read from lm-eval.
OFFICIAL_MAXLEN = {
    "narrativeqa": 128, "qasper": 128, "multifieldqa_en": 64, "multifieldqa_zh": 64, "hotpotqa": 32,
    "2wikimqa": 32, "musique": 32, "dureader": 128, "gov_report": 512, "qmsum": 512, "multi_news": 512,
    "vcsum": 512, "trec": 64, "triviaqa": 32, "samsum": 128, "lsht": 64, "passage_count": 32,
    "passage_retrieval_en": 32, "passage_retrieval_zh": 32, "lcc": 64, "repobench-p": 64,
}


def test_configs_cover_longbench_and_longbench_e() -> None:
    assert len(configs(False)) == 21 and len(configs(True)) == 13
    for e in (False, True):
        assert {d: c.max_gen for d, c in configs(e).items()} == {d: OFFICIAL_MAXLEN[d] for d in configs(e)}
    assert configs(False)["dureader"].metric == "rouge_zh_score"
    assert configs(False)["trec"].category == "Few-shot Learning"
    assert set(configs(True)) < set(configs(False))
    for e in (False, True):  # every template renders with a record's fields
        for d, cfg in configs(e).items():
            assert "<CTX>" in render_prompt(cfg.template, {"context": "<CTX>", "input": "<Q>"}), d


@pytest.mark.parametrize("e", [False, True], ids=["longbench", "longbench-e"])
def test_prompts_are_the_official_ones(e: bool) -> None:
    """Every prompt renders exactly as LongBench's config/dataset2prompt.json (a copy of it ships
    with the tests): lm-eval's templates, with the whitespace lm-eval 0.4.13 lost put back."""
    official = json.loads((DATA.parent / "longbench_dataset2prompt.json").read_text(encoding="utf-8"))
    record = {"context": "<CONTEXT>\n", "input": "<INPUT>"}
    for d, cfg in configs(e).items():
        assert render_prompt(cfg.template, record) == official[d].format(**record), d
    assert configs(e)["passage_count"].template.endswith("The final answer is: ")
    assert configs(e)["lcc"].template.endswith("Next line of code:\n")


def test_a_changed_lm_eval_template_is_not_patched_blindly() -> None:
    from evaluators.longbench.configs import official_template

    with pytest.raises(EvaluatorError, match="not the one lctx corrects"):
        official_template("lcc", "Please complete the code given below. \n{{context}}Next line of code:\n")
    with pytest.raises(EvaluatorError, match="not the one lctx corrects"):
        official_template("samsum", "Summarize.\n\n{{context}}\n\n{{question}}")
    assert official_template("qasper", "anything") == "anything"


def test_prompt_uses_context_and_input() -> None:
    rec = load_longbench("qasper", DATA)[0]
    prompt = render_prompt(configs(False)["qasper"].template, rec)
    assert prompt.startswith("You are given a scientific article and a question.")
    assert rec["context"] in prompt and f"Question: {rec['input']}\n\nAnswer:" in prompt


def test_middle_truncation_keeps_both_ends() -> None:
    tok = ByteTokenizer()
    text = "A" * 50 + "M" * 100 + "Z" * 50
    out, truncated = truncate_middle(tok, text, 41)
    # BOS counts (as in LongBench's pred.py): BOS + 19 bytes, then the last 20.
    assert truncated and out == "A" * 19 + "Z" * 20 and len(tok.encode(out)) <= 41
    assert truncate_middle(tok, "short", 41) == ("short", False)


def test_chat_template_exceptions() -> None:
    tok = ByteTokenizer()
    tok.chat_template = "{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
    ev = LongBenchEvaluator(LongBenchEvaluator.validate({"chat_template": True}))
    rec = load_longbench("qasper", DATA)[0]
    ids, _ = ev.prompt_ids(tok, configs(False)["qasper"], rec, 4096)
    text = tok.decode(ids)
    assert text.startswith("<u>You are given") and text.endswith("</u><a>")
    rec = load_longbench("trec", DATA)[0]
    ids, _ = ev.prompt_ids(tok, configs(False)["trec"], rec, 4096)
    assert not tok.decode(ids).startswith("<u>")
    with pytest.raises(EvaluatorError, match="no chat template"):
        ev.prompt_ids(ByteTokenizer(), configs(False)["qasper"], load_longbench("qasper", DATA)[0], 4096)


PREDICTIONS = {
    "qasper": ["the Penn Treebank", "Yes, end to end.\nSecond line"],
    "multifieldqa_zh": ["北京是中国的首都"],
    "lcc": ["# comment\n    with open(path, 'w') as f:"],
    "trec": ["\nCity\nCountry"],
    "passage_count": ["2 or 3"],
}


def official_code_sim_score(prediction: str, ground_truth: str, **kwargs) -> float:
    """LongBench's metrics.py code_sim_score as published (lm-eval 0.4.13's copy skips blank lines)."""
    from fuzzywuzzy import fuzz

    all_lines = prediction.lstrip("\n").split("\n")
    prediction = ""
    for line in all_lines:
        if ("`" not in line) and ("#" not in line) and ("//" not in line):
            prediction = line
            break
    return fuzz.ratio(prediction, ground_truth) / 100


def official_metric(name: str):
    return official_code_sim_score if name == "code_sim_score" else getattr(lb, name)


def official_scorer(dataset: str, predictions: list[str], answers: list[list[str]], all_classes) -> float:
    """The official LongBench eval.py scorer, written out here with lm-eval's metric functions."""
    metric = {"qasper": lb.qa_f1_score, "multifieldqa_zh": lb.qa_f1_zh_score, "lcc": lb.code_sim_score,
              "trec": lb.classification_score, "passage_count": lb.count_score}[dataset]
    metric = official_code_sim_score if dataset == "lcc" else metric
    total = 0.0
    for prediction, golds in zip(predictions, answers, strict=True):
        score = 0.0
        if dataset in ["trec", "triviaqa", "samsum", "lsht"]:
            prediction = prediction.lstrip("\n").split("\n")[0]
        for gold in golds:
            score = max(score, metric(prediction, gold, all_classes=all_classes))
        total += score
    return round(100 * total / len(predictions), 2)


def write_predictions(folder: Path) -> dict[str, float]:
    folder.mkdir()
    expected = {}
    for d, preds in PREDICTIONS.items():
        recs = load_longbench(d, DATA)
        with (folder / f"{d}.jsonl").open("w", encoding="utf-8") as f:
            for p, r in zip(preds, recs, strict=True):
                f.write(json.dumps({"pred": p, "answers": r["answers"], "all_classes": r["all_classes"],
                                    "length": r["length"]}, ensure_ascii=False) + "\n")
        expected[d] = official_scorer(d, preds, [r["answers"] for r in recs], recs[0]["all_classes"])
    return expected


def test_prediction_dir_scores_equal_the_official_rules(tmp_path: Path) -> None:
    expected = write_predictions(tmp_path / "pred")
    got = score_prediction_dir(tmp_path / "pred")
    assert got == expected
    assert got["trec"] == 100.0  # the first-line rule at work: "City" alone
    assert 0 < got["qasper"] < 100 and got["passage_count"] == 50.0


def test_single_line_predictions_equal_lm_eval_task_scores(tmp_path: Path) -> None:
    """Where the official rules and lm-eval's wrappers agree (one stripped line), the scores match
    lm-eval's process_results x 100."""
    wrappers = {"qasper": lb.get_qa_f1_with_score, "multifieldqa_zh": lb.get_qa_f1_zh_with_score,
                "passage_count": lb.get_count_with_score}
    preds = {"qasper": ["Penn Treebank", "yes"], "multifieldqa_zh": ["中国"], "passage_count": ["2"]}
    (tmp_path / "p").mkdir()
    for d, ps in preds.items():
        recs = load_longbench(d, DATA)
        with (tmp_path / "p" / f"{d}.jsonl").open("w", encoding="utf-8") as f:
            for p, r in zip(ps, recs, strict=True):
                f.write(json.dumps({"pred": p, "answers": r["answers"], "all_classes": None, "length": 1}) + "\n")
    got = score_prediction_dir(tmp_path / "p")
    for d, ps in preds.items():
        recs = load_longbench(d, DATA)
        lm = [wrappers[d](r, [p])["score"] for p, r in zip(ps, recs, strict=True)]
        assert got[d] == round(100 * sum(lm) / len(lm), 2)


def test_longbench_e_prediction_buckets(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    rows = [{"pred": "Adam", "answers": ["Adam"], "all_classes": None, "length": 5000},
            {"pred": "no", "answers": ["Adam"], "all_classes": None, "length": 100}]
    (tmp_path / "p" / "qasper.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert score_prediction_dir(tmp_path / "p", e=True) == {"qasper": {"0-4k": 0.0, "4-8k": 100.0, "8k+": None}}


def test_unknown_prediction_files_are_named_not_silently_skipped(tmp_path: Path, caplog) -> None:
    (tmp_path / "p").mkdir()
    row = json.dumps({"pred": "Adam", "answers": ["Adam"], "all_classes": None, "length": 5000})
    (tmp_path / "p" / "qasper.jsonl").write_text(row)
    (tmp_path / "p" / "qasper_e.jsonl").write_text(row)
    with caplog.at_level("WARNING", logger="lctx.longbench"):
        assert score_prediction_dir(tmp_path / "p") == {"qasper": 100.0}
    assert "qasper_e.jsonl" in caplog.text and "need --e" in caplog.text


def test_bad_prediction_file_names_line(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "qasper.jsonl").write_text('{"pred": "a", "answers": ["a"]}\n{"answers": ["a"]}\n')
    with pytest.raises(EvaluatorError, match=r"qasper.jsonl:2"):
        score_prediction_dir(tmp_path / "p")


def test_options_validated() -> None:
    assert len(validate_task({"name": "longbench"})["datasets"]) == 21
    assert len(validate_task({"name": "longbench", "e": True})["datasets"]) == 13
    with pytest.raises(EvaluatorError, match="unknown LongBench-E datasets"):
        validate_task({"name": "longbench", "e": True, "datasets": ["dureader"]})


def test_longbench_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    task = {"name": "longbench", "datasets": ["passage_count", "multifieldqa_zh", "trec"], "max_length": 200}
    result = run_task(loaded, task, tmp_path / "out", data_dir=DATA)
    records = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 3 and {r["dataset"] for r in records} == {"passage_count", "multifieldqa_zh", "trec"}
    max_gen = {d: configs(False)[d].max_gen for d in task["datasets"]}
    for r in records:  # the prompt (BOS included) fits max_length whatever max_gen (pred.py); byte tokens cut
        # inside a Chinese character decode to U+FFFD (3 bytes) at the seam, as they would in pred.py
        assert r["prompt_tokens"] <= 200 + (6 if r["language"] == "zh" else 0), r["id"]
        assert r["max_length"] == 200 and max_gen[r["dataset"]] > 0
    assert any(r["truncated"] for r in records)
    datasets = points(result, "score", "dataset")
    assert set(datasets) == {"passage_count", "multifieldqa_zh", "trec"}
    for d, point in datasets.items():
        rs = [r for r in records if r["dataset"] == d]
        assert point.value == round(100 * sum(r["score"] for r in rs) / len(rs), 2) and point.n == len(rs)
    assert set(points(result, "score", "category", language="en")) == {"Synthetic Tasks", "Few-shot Learning"}
    assert set(points(result, "score", "category", language="zh")) == {"Single-Document QA"}
    en, zh = typed(result).metric("average_en"), typed(result).metric("average_zh")
    assert typed(result).headline == "average_en" and en.higher_is_better and (en.n, zh.n) == (2, 1)
    assert en.value == round((datasets["passage_count"].value + datasets["trec"].value) / 2, 2)
    assert zh.value == datasets["multifieldqa_zh"].value
    assert typed(result).metric("mean_over_datasets").value == round(
        sum(p.value for p in datasets.values()) / 3, 2)
    assert typed(result).extra["max_length"] == 200
    assert result["model"]["rope"] and result["lctx_version"]


# LongBench's eval.py dataset2metric, written out to check what lctx derives from lm-eval's YAML.
OFFICIAL_METRIC = {
    "narrativeqa": "qa_f1_score", "qasper": "qa_f1_score", "multifieldqa_en": "qa_f1_score",
    "multifieldqa_zh": "qa_f1_zh_score", "hotpotqa": "qa_f1_score", "2wikimqa": "qa_f1_score",
    "musique": "qa_f1_score", "dureader": "rouge_zh_score", "gov_report": "rouge_score", "qmsum": "rouge_score",
    "multi_news": "rouge_score", "vcsum": "rouge_zh_score", "trec": "classification_score",
    "triviaqa": "qa_f1_score", "samsum": "rouge_score", "lsht": "classification_score",
    "passage_retrieval_en": "retrieval_score", "passage_count": "count_score",
    "passage_retrieval_zh": "retrieval_zh_score", "lcc": "code_sim_score", "repobench-p": "code_sim_score",
}
CASES = {  # (prediction, answers, all_classes) per metric family
    "qa_f1_score": [("The answer is Paris.\nMore text", ["Paris", "paris france"], None), ("no", ["yes"], None)],
    "qa_f1_zh_score": [("北京是中国的首都", ["中国的首都"], None)],
    "rouge_score": [("the meeting approved the budget\nand then ended", ["the budget was approved"], None),
                    ("", ["x"], None)],
    "rouge_zh_score": [("会议通过了预算", ["预算获得通过"], None)],
    "classification_score": [("\nCity\nCountry", ["City"], ["City", "Country"]),
                             ("Country and City", ["City"], ["City", "Country"])],
    "retrieval_score": [("Paragraph 3, maybe Paragraph 4", ["Paragraph 3"], None)],
    "retrieval_zh_score": [("段落5", ["段落5"], None)],
    "count_score": [("3 3 4", ["3"], None)],
    "code_sim_score": [("\n# note\n    x = foo(1)\n", ["    x = foo(2)"], None),
                       ("# note\n\n    x = foo(2)", ["    x = foo(2)"], None)],  # official: the blank line
}


def test_every_dataset_scores_like_the_official_scorer(tmp_path: Path) -> None:
    assert {d: c.metric for d, c in configs(False).items()} == OFFICIAL_METRIC
    pred = tmp_path / "pred"
    pred.mkdir()
    expected = {}
    for d, metric in OFFICIAL_METRIC.items():
        fn = official_metric(metric)
        rows = CASES[metric]
        with (pred / f"{d}.jsonl").open("w", encoding="utf-8") as f:
            for p, answers, classes in rows:
                f.write(json.dumps({"pred": p, "answers": answers, "all_classes": classes, "length": 10},
                                   ensure_ascii=False) + "\n")
        total = 0.0
        for p, answers, classes in rows:
            if d in ["trec", "triviaqa", "samsum", "lsht"]:
                p = p.lstrip("\n").split("\n")[0]
            total += max(fn(p, a, all_classes=classes) for a in answers)
        expected[d] = round(100 * total / len(rows), 2)
    assert score_prediction_dir(pred) == expected


def test_longbench_e_run_reports_length_buckets(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    result = run_task(loaded, {"name": "longbench", "e": True, "datasets": ["lcc"], "max_length": 200},
                      tmp_path / "out", data_dir=DATA)
    buckets = {k: p.value for k, p in points(result, "score", "bucket", dataset="lcc").items()}
    assert buckets["0-4k"] is None and buckets["4-8k"] is None  # the one record has length 9000
    assert buckets["8k+"] == points(result, "score", "dataset")["lcc"].value


def test_every_dataset_of_the_shipped_data_runs_through_the_pipeline(tmp_path: Path, monkeypatch) -> None:
    """All 21 LongBench and 13 LongBench-E datasets: data, prompt, truncation, generation
    settings, scoring and the per-dataset, per-category, average and bucket summary. Generation
    is stubbed (with a tiny model these 57 samples take minutes on a shared CPU)."""
    from checkpoints.engine import Engine
    from checkpoints.generate import Generation

    calls: list[tuple[str, int, tuple[str, ...]]] = []

    def fake_generate_until(engine, requests, done=None):
        out = []
        for i, req in enumerate(requests):
            calls.append((engine.tokenizer.decode(list(req.prompt_ids)), req.max_new_tokens, req.stop_ids))
            # samsum as pred.py: the id of "\n" ends it, min_length = context + 1; no stop strings
            assert not req.stop and (req.min_new_tokens, req.stop_ids) == ((1, (10,)) if req.stop_ids else (0, ()))
            out.append(Generation(text="Paragraph 2", token_ids=[], prompt_tokens=len(req.prompt_ids),
                                  stop_reason="length"))
            if done is not None:
                done(i, out[-1])
        return out

    monkeypatch.setattr(Engine, "generate_until", fake_generate_until)
    loaded = tiny_model(tmp_path / "m")
    for e, n in ((False, 21), (True, 13)):
        calls.clear()
        result = run_task(loaded, {"name": "longbench", "e": e, "max_length": 640}, tmp_path / f"out{e}",
                          data_dir=DATA)
        datasets = points(result, "score", "dataset")
        assert len(datasets) == n and typed(result).metric("average_en").value is not None
        assert (typed(result).metric("average_zh").value is None) == e  # LongBench-E has no Chinese dataset
        assert set(points(result, "score", "category", language="en")) == {
            "Single-Document QA", "Multi-Document QA", "Summarization", "Few-shot Learning", "Synthetic Tasks",
            "Code Completion"}
        records = [json.loads(x) for x in (tmp_path / f"out{e}" / "samples.jsonl").read_text().splitlines()]
        assert len(records) == len(calls) == sum(p.n for p in datasets.values())
        for r in records:
            assert r["prompt_tokens"] <= 640 + (6 if r["language"] == "zh" else 0)
        assert {mx for _, mx, _ in calls} == {32, 64, 128, 512}
        assert [s for _, _, s in calls if s] == [(10,)] * datasets["samsum"].n  # samsum only
        assert datasets["passage_retrieval_en"].value > 0
        if e:  # the LongBench-E files written with lengths in all three buckets report all three
            full = [d for d, p in datasets.items() if p.n == 3]
            assert len(full) == 11 and all(
                None not in [p.value for p in points(result, "score", "bucket", dataset=d).values()] for d in full)


def pred_py_truncation(tokenizer, prompt: str, max_length: int) -> str:
    """LongBench pred.py's rule, written out: budget max_length whatever max_gen, keep
    int(max_length / 2) tokens from each end, decode each half skipping special tokens."""
    tokenized = tokenizer.encode(prompt)
    if len(tokenized) > max_length:
        half = int(max_length / 2)
        prompt = tokenizer.decode(tokenized[:half], skip_special_tokens=True) + \
            tokenizer.decode(tokenized[-half:], skip_special_tokens=True)
    return prompt


@pytest.mark.parametrize("max_length", [None, 301])
def test_budget_is_one_max_length_per_model_default_context_minus_500(tmp_path: Path, max_length) -> None:
    """A long sample: the prompt is cut to pred.py's budget (the model's context minus 500 by
    default, or the option), the same for a 32-token and a 512-token dataset, and the
    surviving halves are pred.py's."""
    loaded = tiny_model(tmp_path / "m", max_position_embeddings=1024)  # effective context 1024 -> 524
    budget = max_length or 1024 - 500
    data = tmp_path / "data"
    data.mkdir()
    words = " ".join(f"w{i}" for i in range(3000))  # ~17k bytes: far beyond the budget
    for d in ("hotpotqa", "gov_report"):
        rec = {"input": "Which?", "context": words, "answers": ["w1"], "length": 3000, "dataset": d,
               "language": "en", "all_classes": None, "_id": f"{d}-long"}
        (data / f"{d}.jsonl").write_text(json.dumps(rec) + "\n")
    options = {"datasets": ["hotpotqa", "gov_report"], **({"max_length": max_length} if max_length else {})}
    ev = LongBenchEvaluator(LongBenchEvaluator.validate(options), data)
    ev.prepare(loaded)
    for sample in ev.plan(loaded):
        built = ev.build(loaded, sample)
        d = built.record["dataset"]
        full = render_prompt(configs(False)[d].template, ev.records[d][0])
        assert built.record["max_length"] == budget and built.record["truncated"]
        assert list(built.request.prompt_ids) == loaded.tokenizer.encode(pred_py_truncation(loaded.tokenizer, full,
                                                                                             budget))
        assert len(built.request.prompt_ids) <= budget  # BOS + 2 * int(budget / 2) - 1 bytes
    small = tiny_model(tmp_path / "small", max_position_embeddings=512)
    with pytest.raises(EvaluatorError, match="minus the 500 tokens pred.py reserves"):
        LongBenchEvaluator(LongBenchEvaluator.validate({"datasets": ["hotpotqa"]})).max_length(small)


# The official leaderboard (THUDM/LongBench README, zero-shot, the 20-dataset release with NQ):
# Llama2-7B-chat-4k per dataset, and its published averages by language (English 29.0, Chinese 13.5).
PUBLISHED = {
    "narrativeqa": 19.1, "qasper": 19.6, "multifieldqa_en": 35.8, "multifieldqa_zh": 11.6, "hotpotqa": 24.3,
    "2wikimqa": 31.4, "musique": 8.6, "dureader": 1.9, "gov_report": 27.3, "qmsum": 20.6, "vcsum": 0.2,
    "trec": 60.5, "nq": 31.4, "triviaqa": 59.7, "lsht": 19.8, "lcc": 52.3, "repobench-p": 42.4,
    "passage_retrieval_en": 9.2, "passage_count": 2.5, "passage_retrieval_zh": 0.5,
}
PUBLISHED_EN = {"Single-Document QA": 24.8, "Multi-Document QA": 21.4, "Summarization": 23.9,
                "Few-shot Learning": 50.5, "Code Completion": 47.3, "Synthetic Tasks": 5.9}
PUBLISHED_ZH = {"Single-Document QA": 11.6, "Multi-Document QA": 1.9, "Summarization": 0.2,
                "Few-shot Learning": 19.8, "Code Completion": 47.3, "Synthetic Tasks": 0.5}


def test_language_averages_are_the_leaderboards() -> None:
    """From per-dataset scores to the leaderboard's EN and ZH averages: mean over categories of
    the per-category means (code in both languages), not the mean over datasets."""
    from evaluators.longbench.evaluator import leaderboard_averages
    from evaluators.longbench.evaluator import typed as typed_result

    cats = {d: c.category for d, c in configs(False).items()} | {"nq": "Few-shot Learning"}
    datasets = {d: {"score": v, "category": cats[d], "n": 200, "metric": "x", "truncated": 0}
                for d, v in PUBLISHED.items()}
    board = leaderboard_averages(datasets)
    for lang, published, avg in (("en", PUBLISHED_EN, 29.0), ("zh", PUBLISHED_ZH, 13.5)):
        assert board[lang]["categories"].keys() == published.keys()
        for c, v in published.items():  # the README rounds each figure to one decimal
            assert abs(board[lang]["categories"][c] - v) <= 0.051, (lang, c)
        assert abs(board[lang]["average"] - avg) <= 0.1, lang
    plain = sum(PUBLISHED.values()) / len(PUBLISHED)
    assert abs(plain - board["en"]["average"]) > 1  # the mean over datasets is another number
    result = typed_result({"datasets": datasets, "average": round(plain, 2)})
    assert result.headline == "average_en" and result.metric("average_zh").value == board["zh"]["average"]
    assert result.metric("mean_over_datasets").value == round(plain, 2)


def bigram_checkpoint(path: Path, vocab: list[str], successor: dict[str, str]) -> Path:
    """A real checkpoint whose next token depends only on the current one: a WordLevel
    tokenizer over `vocab` (pieces "\\n\\n", "\\n", " " and words), and a decoder whose
    attention and MLP outputs are zero, so the residual stream is the token's one-hot
    embedding and lm_head maps token i to successor[i] (else to id 0, EOS)."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    from checkpoints.config import ModelConfig
    from checkpoints.loading import save_model
    from checkpoints.model import Decoder

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("\n\n|\n| "), behavior="isolated")
    tok.decoder = decoders.Fuse()
    cfg = ModelConfig(hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64,
                      vocab_size=len(vocab), max_position_embeddings=4096)
    model = Decoder(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.zero_()
        model.embed.weight.copy_(torch.eye(len(vocab), 64))
        model.lm_head.weight.zero_()
        for a, b in successor.items():
            model.lm_head.weight[vocab.index(b), vocab.index(a)] = 10.0
    path.mkdir(parents=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text('{"bos_token": "<s>", "eos_token": "</s>"}')

    class Files:  # save_model writes the tokenizer through .save(path); it is already there
        def save(self, _path: Path) -> None:
            pass

    save_model(model, path, Files())
    return path


def test_samsum_ends_at_the_newline_token_id_not_at_newline_text(tmp_path: Path) -> None:
    """pred.py's samsum rule on a tokenizer with a "\\n\\n" token: the end token is
    encode("\\n")[-1] (not "\\n\\n"), so a first token "\\n\\n" does not end the answer;
    a stop on the text "\\n" would have cut it to nothing."""
    from checkpoints.loading import load_model

    vocab = ["</s>", "<s>", "<unk>", "\n\n", "\n", " ", "Summary:", "Bob", "left", "early"]
    # The prompt ends in "Summary:" (the record's input); then "\n\n", "Bob left", "\n" (end), never "early".
    path = bigram_checkpoint(tmp_path / "m", vocab, {"Summary:": "\n\n", "\n\n": "Bob", "Bob": " ", " ": "left",
                                                     "left": "\n", "\n": "early"})
    loaded = load_model(path)
    assert loaded.tokenizer.encode("\n", add_special_tokens=False)[-1] == 4
    assert loaded.tokenizer.encode("a\n\nb", add_special_tokens=False) == [2, 3, 2]  # "\n\n" is one token
    data = tmp_path / "data"
    data.mkdir()
    rec = {"input": "Bob left\nSummary:", "context": "Bob left", "answers": ["Bob left"], "length": 4,
           "dataset": "samsum", "language": "en", "all_classes": None, "_id": "s1"}
    (data / "samsum.jsonl").write_text(json.dumps(rec) + "\n")
    result = run_task(loaded, {"name": "longbench", "datasets": ["samsum"]}, tmp_path / "out", data_dir=data)
    record = json.loads((tmp_path / "out" / "samples.jsonl").read_text())
    assert record["prediction"] == "\n\nBob left"  # ended at the "\n" id, which is left out like EOS
    assert points(result, "score", "dataset")["samsum"].value == 100.0
    # The text rule this replaces: the same generation stopped at the text "\n" is empty.
    from checkpoints.engine import Engine, GenerateRequest

    ids = LongBenchEvaluator(LongBenchEvaluator.validate({"datasets": ["samsum"]})).prompt_ids(
        loaded.tokenizer, configs(False)["samsum"], rec, 3000)[0]
    old = Engine(loaded.model, loaded.tokenizer).generate_until(
        [GenerateRequest(ids, max_new_tokens=8, stop=("\n",), min_new_tokens=1, suppress_ids=(4,))])[0]
    assert old.text == ""
