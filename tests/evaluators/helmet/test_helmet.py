"""The `helmet` task end to end on crafted files in HELMET's layouts: every category on a demo
checkpoint through lctx's engine (no judge, no NLI model: the no-judge suite, its absent
metrics named), the judged datasets graded by a tiny local judge (every judgment recorded and
cached), ALCE's citations by a tiny local NLI model, and the same samples through a served
stand-in (a chat-completions server on loopback) answering as the engine does. Plumbing, not
scores: random tiny models answer nonsense."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoints.engine import Engine
from checkpoints.fingerprint import inspect_checkpoint
from checkpoints.loading import load_model
from evaluators.judges import Judge, Judging, JudgmentCache
from evaluators.registry import make_evaluator, parse_task
from evaluators.suite import run_task
from tests.evaluators.helmet.helmet_files import write_helmet_files
from tests.helpers import chat_checkpoint, typed

SMALL = {"name": "helmet", "input_max_length": [4096], "max_test_samples": 1, "book_tokenizer": "model",
         "generation_max_length": 4}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("helmet-e2e")
    return write_helmet_files(root / "data", [4096]), chat_checkpoint(root / "model", max_position_embeddings=4096)


def records_of(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in (json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines())}


def local_judge(path: Path, name: str) -> Judge:
    loaded = load_model(path)
    return Judge(name, inspect_checkpoint(path).fingerprint, "checkpoint", loaded, Engine(loaded.model,
                                                                                            loaded.tokenizer),
                 {"checkpoint": name})


def test_recall_on_a_demo_checkpoint(files, tmp_path: Path) -> None:
    """The light run: the recall category, its columns per length on the leaderboard, its files hashed."""
    data, model = files
    entry = run_task(load_model(model), {**SMALL, "categories": ["recall"]}, tmp_path / "out", data_dir=data)
    records = records_of(tmp_path / "out")
    assert sorted({r["dataset"] for r in records.values()}) == ["json_kv", "ruler_niah_mk_2", "ruler_niah_mk_3",
                                                                 "ruler_niah_mv"]
    r = records["helmet/json_kv/4096/0"]
    assert r["output"] == "Corresponding value:" + r["prediction"]  # eval.py: the prefix back before scoring
    assert set(r["metrics"]) >= {"substring_exact_match", "exact_match", "f1"} and r["references"] == r["item"].get(
        "answer", r["references"])
    result = typed(entry)
    columns = result.columns()
    recall = columns["score.category=recall.length=4096"][0]
    parts = [columns[f"{m}.dataset={d}.length=4096"][0] for d, m in (
        ("json_kv", "substring_exact_match"), ("ruler_niah_mk_2", "ruler_recall"), ("ruler_niah_mk_3", "ruler_recall"),
        ("ruler_niah_mv", "ruler_recall"))]
    assert recall == pytest.approx(sum(parts) / 4)  # custom_avgs' Recall: the mean of its four columns
    assert result.metric("overall").value == pytest.approx(recall) and result.metric("recall").value == recall
    from service.standings import views

    assert {"helmet/recall", "helmet/4096", "helmet/json_kv"} <= set(views({"helmet": entry}))
    assert result.columns("recall") == {"score.length=4096": columns["score.category=recall.length=4096"]}
    read = {f["file"] for f in entry["data"]["files"]}
    assert "helmet/data/json_kv/test_k50_dep6.jsonl" in read
    assert "helmet/data/ruler/niah_multivalue/validation_4096.jsonl" in read


@pytest.mark.integration  # every category: about 40 prompts of up to 4k tokens and scoring's imports (rouge, nltk)
def test_every_category_on_a_demo_checkpoint_without_a_judge(files, tmp_path: Path) -> None:
    data, model = files
    entry = run_task(load_model(model), SMALL, tmp_path / "out", data_dir=data)
    records = records_of(tmp_path / "out")
    assert {r["category"] for r in records.values()} == {"recall", "rag", "rerank", "cite", "longqa", "summ", "icl"}
    result = typed(entry)
    columns = result.columns()
    for category in ("recall", "rag", "rerank", "longqa", "icl"):
        assert f"score.category={category}.length=4096" in columns, category
        assert columns[f"score.category={category}.length=4096"][0] is not None, category
    # without the judge and the NLI model: their datasets left out (collect_results.py drops a dataset lacking a
    # reported metric): no summary and no citation average, LongQA over InfiniteBench QA and MC
    assert columns["score.category=summ.length=4096"][0] is None
    assert columns["score.category=cite.length=4096"][0] is None
    assert columns["str_em.dataset=alce_asqa.length=4096"][0] is not None  # shown all the same
    assert columns["citation_rec.dataset=alce_asqa.length=4096"][0] is None
    assert "narrativeqa@4096" in result.extra["left_out"]
    assert "overall.length=4096" in columns and result.headline == "overall"
    assert "substring_exact_match.dataset=json_kv.length=4096" in columns
    assert result.extra["not_judged"] == ["infbench_sum_eng", "multi_lexsum", "narrativeqa"]
    assert result.extra["citations_not_scored"] == ["alce_asqa", "alce_qampari"]
    assert "not judged (no judge)" in result.summary and "no citation_nli" in result.summary
    for r in records.values():
        if r["dataset"] == "narrativeqa":
            assert r["not_judged"] is True and not any(k.startswith("gpt-4") for k in r["metrics"])
    # `lctx score helmet` on the run's records: every number recomputed equals the recorded one
    from evaluators.helmet.rescore import differences, score_prediction_dir

    rescored = score_prediction_dir(tmp_path / "out")
    assert rescored and differences(rescored) == []
    read = {f["file"] for f in entry["data"]["files"]}  # provenance: each file read, hashed
    assert "helmet/prompts/asqa_revised.json" in read and "helmet/hub/CogComp/trec/default/train/0000.parquet" in read
    assert "helmet/hub/deepmind/narrativeqa/data/test-00000-of-00001.parquet" in read


@pytest.mark.integration  # a model under test, a judge and an NLI model, each a checkpoint on lctx's engine
def test_judged_and_cited_by_local_models(files, tmp_path: Path) -> None:
    data, model = files
    judge = local_judge(chat_checkpoint(tmp_path / "judge", seed=1, max_position_embeddings=8192), "judge")
    nli = local_judge(chat_checkpoint(tmp_path / "nli", seed=2, max_position_embeddings=8192), "nli")
    spec = {**SMALL, "datasets": ["narrativeqa", "alce_asqa"], "judge": judge.ref, "citation_nli": nli.ref,
            "judge_max_new_tokens": 4}
    task = parse_task(spec)
    assert task.needs_judge and task.graders() == {"citation_nli": nli.ref}

    def run(out: Path) -> tuple[dict, dict, Judging]:
        evaluator = make_evaluator(task, data)
        cache = JudgmentCache(tmp_path / "judgments")
        evaluator.judging = Judging.of(judge, cache, task)
        evaluator.attach_grader("citation_nli", Judging(nli, cache, 4, 16))
        entry = run_task(load_model(model), task, out, evaluator=evaluator)
        return entry, records_of(out), evaluator.judging

    entry, records, judging = run(tmp_path / "out")
    nqa = next(r for r in records.values() if r["dataset"] == "narrativeqa")
    assert nqa["judgments"] and all(j["judge"] == judge.ref for j in nqa["judgments"])
    assert "not_judged" not in nqa and judging.asked >= 1
    assert nqa.get("judge_unparsed") or any(k.startswith("gpt-4") for k in nqa["metrics"])
    asqa = next(r for r in records.values() if r["dataset"] == "alce_asqa")
    assert "citations_not_scored" not in asqa
    result = typed(entry)
    assert result.extra["not_judged"] == [] and result.extra["citations_not_scored"] == []
    assert entry["options"]["judge"] == judge.ref and entry["options"]["citation_nli"] == nli.ref
    _, _, again = run(tmp_path / "rerun")
    assert again.asked == 0  # every judgment cached


@pytest.mark.integration  # a loopback server: the chat-style endpoint backend end to end
def test_a_served_standin_answers_as_the_engine(files, tmp_path: Path) -> None:
    from clients.endpoint.engine import EndpointEngine, connect
    from clients.endpoint.options import EndpointSpec
    from evaluators.run import run_evaluator
    from tests.helpers import ThreadServer, reasoning_standin_app

    data, model = files
    spec = {**SMALL, "datasets": ["json_kv", "kilt_nq", "infbench_qa_eng"]}
    engine_entry = run_task(load_model(model), spec, tmp_path / "engine", data_dir=data)
    with ThreadServer(reasoning_standin_app(model, name="tiny")) as server:
        served = connect(EndpointSpec(base_url=f"{server.url}/v1", served_model="tiny", tokenizer=str(model),
                                      context_length=4096, api_style="chat"))
        served_entry = run_evaluator(make_evaluator(spec, data), served, tmp_path / "served",
                                     engine=EndpointEngine(served))
    ours, theirs = records_of(tmp_path / "engine"), records_of(tmp_path / "served")
    assert sorted(ours) == sorted(theirs)
    chat = [k for k, r in ours.items() if r["chat_template"]]
    assert chat  # infbench_qa_eng: the user message, templated by the server as by lctx
    for key in chat:
        assert (theirs[key]["prediction"], theirs[key]["metrics"]) == (ours[key]["prediction"], ours[key]["metrics"])
    assert typed(served_entry).metric("overall").n == typed(engine_entry).metric("overall").n
