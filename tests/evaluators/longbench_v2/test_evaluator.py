"""LongBench v2 through the run path on a tiny model: data.json from the data directory,
zero-shot batched and CoT in two steps, the budget and the typed result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators.errors import EvaluatorError
from evaluators.longbench_v2 import protocol
from evaluators.longbench_v2.options import LongBenchV2Options
from evaluators.registry import validate_task
from evaluators.suite import run_task
from tests.helpers import tiny_model, typed


def write_data(folder: Path) -> Path:
    rows = []
    for i, (difficulty, length) in enumerate([("easy", "short"), ("hard", "medium"), ("hard", "long"),
                                              ("easy", "long")]):
        rows.append({"_id": f"q{i}", "domain": "Single-Document QA" if i % 2 else "Code", "sub_domain": "s",
                     "difficulty": difficulty, "length": length, "question": f"Question {i}?",
                     "choice_A": "yes", "choice_B": "no", "choice_C": "maybe", "choice_D": "never",
                     "answer": "ABCD"[i], "context": f"Document {i}. " + "Some long text. " * 60})
    path = folder / "LongBench-v2" / "data.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rows))
    return path


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]


def test_missing_data_is_refused_with_the_paths(tmp_path: Path) -> None:
    opts = LongBenchV2Options()
    [line] = opts.missing_files(tmp_path)
    assert str(tmp_path / "LongBench-v2" / "data.json") in line and str(tmp_path / "data.json") in line
    assert "huggingface.co/datasets/THUDM/LongBench-v2" in line
    assert "no data directory" in opts.missing_files(None)[0]
    write_data(tmp_path)
    assert opts.missing_files(tmp_path) == []


def test_options_refuse_mixed_modes() -> None:
    with pytest.raises(EvaluatorError, match="cot runs on the full document"):
        validate_task({"name": "longbench_v2", "cot": True, "no_context": True})
    with pytest.raises(EvaluatorError, match="choose one"):
        validate_task({"name": "longbench_v2", "rag": 3, "no_context": True})
    with pytest.raises(EvaluatorError, match="buckets"):
        validate_task({"name": "longbench_v2", "buckets": "tiny"})


def test_zero_shot_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    """The default budget: 512 x 120000/131072 = 468, capped at 512 - 128 new tokens = 384."""
    write_data(tmp_path / "data")
    loaded = tiny_model(tmp_path / "m", max_position_embeddings=512)
    task = {"name": "longbench_v2", "buckets": "short,long"}
    result = run_task(loaded, task, tmp_path / "out", data_dir=tmp_path / "data")
    recs = records(tmp_path / "out")
    assert [r["_id"] for r in recs] == ["q0", "q2", "q3"]  # medium left out
    for r in recs:
        assert r["max_length"] == protocol.default_budget(512, protocol.ANSWER_TOKENS) == 384
        assert r["truncated"] and r["prompt_tokens"] <= 384 + 1  # the budget, and BOS added back when encoded
        assert r["pred"] == protocol.extract_answer(r["response"]) and r["judge"] == (r["pred"] == r["answer"])
    res = typed(result)
    row = protocol.result_row(recs)
    assert res.headline == "overall" and res.metric("overall").value == row.overall
    assert res.metric("long").n == 2 and res.metric("medium").value is None and res.metric("easy").n == 2


def test_cot_runs_two_queries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pred.py's 1024 and 128 new tokens would take a minute on a shared CPU
    monkeypatch.setattr(protocol, "COT_TOKENS", 16)
    monkeypatch.setattr(protocol, "ANSWER_TOKENS", 8)
    write_data(tmp_path / "data")
    loaded = tiny_model(tmp_path / "m")
    task = {"name": "longbench_v2", "max_length": 200, "cot": True, "limit": 1}
    run_task(loaded, task, tmp_path / "out", data_dir=tmp_path / "data")
    [r] = records(tmp_path / "out")
    assert "response_cot" in r and r["answer_prompt_tokens"] > 0 and r["max_length"] == 200



def test_cot_on_a_chat_endpoint_sends_the_two_queries_as_pred_py_does(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 62's defect 2: `lctx eval --endpoint ... --api-style chat --task longbench_v2 --cot`
    ended in "AttributeError: 'ServedModel' object has no attribute 'model'" (CoT built an
    Engine of its own). pred.py --cot runs on an OpenAI-compatible API: so does lctx, each
    question two chat requests on the served model (a chat-completions stand-in on the tiny
    chat checkpoint), the second quoting the first's answer, batched per turn."""
    from cli.main import main
    from tests.helpers import ThreadServer, chat_checkpoint, reasoning_standin_app

    monkeypatch.setattr(protocol, "COT_TOKENS", 8)
    monkeypatch.setattr(protocol, "ANSWER_TOKENS", 4)
    write_data(tmp_path / "data")
    checkpoint = chat_checkpoint(tmp_path / "m")
    bodies: list[dict] = []
    out = tmp_path / "out"
    with ThreadServer(reasoning_standin_app(checkpoint, name="standin/chat", field=None, bodies=bodies)) as server:
        assert main(["eval", "--endpoint", f"{server.url}/v1", "--served-model", "standin/chat", "--tokenizer",
                     str(checkpoint), "--api-style", "chat", "--task", "longbench_v2", "--cot", "--max-length", "1000",
                     "--option", "limit=2", "--data-dir", str(tmp_path / "data"), "--out", str(out), "-q"]) == 0
    recs = records(out / "longbench_v2")
    rows = {r["_id"]: r for r in json.loads((tmp_path / "data" / "LongBench-v2" / "data.json").read_text())}
    asked = [b for b in bodies if "answer the questions below" in b["messages"][0]["content"]]  # not the probe's
    assert [r["_id"] for r in recs] == ["q0", "q1"] and len(asked) == 4
    reasoning_turns, answer_turns = asked[:2], asked[2:]  # each turn of the two questions batched together
    for body in asked:
        assert [m["role"] for m in body["messages"]] == ["user"] and "<user>" not in body["messages"][0]["content"]
    assert all(b["max_tokens"] == 8 for b in reasoning_turns) and all(b["max_tokens"] == 4 for b in answer_turns)
    for r in recs:
        item = rows[r["_id"]]
        assert r["truncated"] and r["max_length"] == 1000 and r["answer_prompt_tokens"] > 0
        quoted = [b["messages"][0]["content"] for b in answer_turns]
        assert protocol.answer_prompt(item, r["response_cot"]) in quoted  # the second query quotes the first answer
        assert r["pred"] == protocol.extract_answer(r["response"]) and r["judge"] == (r["pred"] == r["answer"])
