"""The judgment cache read as data (evaluators/judges.py): an entry whose answer is a number or
an object, a field missing, more thinking tokens than the budget, or a line that is not UTF-8
is skipped with a warning and its prompt asked again; a judged run on such a cache completes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from checkpoints.engine import Engine
from checkpoints.fingerprint import inspect_checkpoint
from checkpoints.loading import load_model
from evaluators.judges import JUDGMENTS_DIR, Judge, Judging, JudgmentCache, reply_problem
from evaluators.registry import make_evaluator, parse_task
from evaluators.suite import run_task
from tests.helpers import aa_lcr_files, chat_checkpoint

GOOD = {"answer": "CORRECT", "thinking": None, "thinking_tokens": 0, "stop_reason": "eos"}


@pytest.mark.parametrize(("reply", "why"), [
    ({**GOOD, "answer": 123}, "answer is int"),
    ({**GOOD, "answer": {"verdict": "CORRECT"}}, "answer is dict"),
    ({"thinking": None, "stop_reason": "eos"}, "no answer"),
    ({**GOOD, "thinking_tokens": True}, "thinking_tokens is bool"),
    ({**GOOD, "thinking_tokens": -1}, "outside"),
    ({**GOOD, "judge": "someone else"}, "unknown field"),
    ([GOOD], "not an object"),
])
def test_a_reply_that_is_not_one_is_named(reply: object, why: str) -> None:
    assert why in (reply_problem(reply) or "")


def test_thinking_beyond_the_budget_is_not_a_reply() -> None:
    assert reply_problem({**GOOD, "thinking": "x", "thinking_tokens": 52_428_800}, 2048) is not None
    assert reply_problem({**GOOD, "thinking": "x", "thinking_tokens": 2048}, 2048) is None
    assert "thinking is 52,428,800 characters" in reply_problem({**GOOD, "thinking": "x" * (50 << 20)}, 2048, 16)
    assert "answer is" in reply_problem({**GOOD, "answer": "CORRECT" * 100_000}, 2048, 16)


def judged(judge: Judge, model: Path, data: Path, out: Path, cache: Path) -> tuple[dict, dict, Judging]:
    task = parse_task({"name": "aa_lcr", "judge": judge.ref, "max_new_tokens": 6, "judge_max_new_tokens": 6,
                       "limit": 1, "repeats": 1})
    evaluator = make_evaluator(task, data)
    evaluator.judging = Judging.of(judge, JudgmentCache(cache), task)
    entry = run_task(load_model(model), task, out, evaluator=evaluator)
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return entry, records[0], evaluator.judging


@pytest.mark.parametrize("bad", [123, {"verdict": "CORRECT"}, None])
def test_a_judged_run_on_a_poisoned_cache_asks_again_and_completes(tmp_path: Path, bad: object,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    aa_lcr_files(tmp_path / "data")
    model = chat_checkpoint(tmp_path / "model", max_position_embeddings=512)
    path = chat_checkpoint(tmp_path / "judge", seed=1)
    loaded = load_model(path)
    judge = Judge("judge", inspect_checkpoint(path).fingerprint, "checkpoint", loaded,
                  Engine(loaded.model, loaded.tokenizer), {"checkpoint": "judge"})
    cache = tmp_path / JUDGMENTS_DIR
    _, first, judging = judged(judge, model, tmp_path / "data", tmp_path / "one", cache)
    assert judging.asked == 1
    (written,) = cache.glob("*.jsonl")
    entry = json.loads(written.read_text())
    entry["reply"] = {**entry["reply"], "answer": bad} if bad is not None else {"stop_reason": "eos"}
    # the poisoned entry, then a line that is not UTF-8 (a torn character) in another file
    written.write_text(json.dumps(entry) + "\n")
    (cache / "torn.jsonl").write_bytes(b'{"key": "' + entry["key"].encode() + b'", "reply": {"answer": "\xe2\x80"}}\n')
    with caplog.at_level(logging.WARNING):
        result, again, judging = judged(judge, model, tmp_path / "data", tmp_path / "two", cache)
    assert judging.asked == 1 and again["judgment"]["cached"] is False  # asked again, not trusted
    assert again["judgment"]["answer"] == first["judgment"]["answer"] and again["verdict"] == first["verdict"]
    assert result["result"]["metrics"]  # the job completed
    warned = caplog.text
    assert "not a judge reply" in warned and "not UTF-8" in warned and "torn.jsonl:1" in warned
