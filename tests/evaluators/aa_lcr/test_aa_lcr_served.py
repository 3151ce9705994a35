"""AA-LCR through the endpoint backend, chat style, judged by a served judge. With the
session's `transformers serve` of the real SmolLM2 (tests/conftest.py) as both the model under
test and the judge: one question, one repeat, so one answer and one judge call; plumbing, not
verdicts (SmolLM2 is a weak judge): the record keeps the judgment with the judge's URL and
model and no key, the result names the judge by identity, and `lctx score aa-lcr` given the
run's cache of judgments asks the judge nothing. With a stand-in of a server with a reasoning
parser as both: the model's think block is recorded and never shown to the judge, whose
verdict is read from its answer after its own think block."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastapi import FastAPI, Request

from cli.main import main
from evaluators.judges import JUDGMENTS_DIR
from evaluators.suite import RESULTS_FILE
from tests.helpers import aa_lcr_files

pytestmark = pytest.mark.integration  # transformers serve on loopback, the real model


def test_aa_lcr_on_a_chat_endpoint_judged_by_a_served_judge(transformers_server, real_model, tmp_path, monkeypatch):
    data = tmp_path / "data"
    aa_lcr_files(data)
    secret = "sk-judge-" + "7" * 24  # sent as the judge's bearer key (transformers serve ignores it)
    monkeypatch.setenv("LCTX_ENDPOINT_KEY_JUDGE", secret)
    out = tmp_path / "out"
    served = ["--served-model", transformers_server.name, "--tokenizer", str(real_model)]
    judge = ["--judge", transformers_server.url, "--judge-served-model", transformers_server.name,
             "--judge-tokenizer", str(real_model), "--judge-api-key-env", "LCTX_ENDPOINT_KEY_JUDGE",
             "--judge-max-new-tokens", "8", "--judge-thinking-budget", "8"]
    assert main(["eval", "--endpoint", transformers_server.url, *served, "--api-style", "chat", "--task", "aa_lcr",
                 "--data-dir", str(data), "--categories", "Legal", "--repeats", "1", "--max-new-tokens", "16",
                 *judge, "--out", str(out), "-q"]) == 0
    (record,) = [json.loads(line) for line in (out / "aa_lcr" / "samples.jsonl").read_text().splitlines()]
    judgment = record["judgment"]
    assert record["id"] == "aa_lcr/7/r0" and record["beyond_context"] is False and isinstance(record["prediction"], str)
    assert judgment["judge"].startswith(transformers_server.url + "@") and judgment["cached"] is False
    assert {k: judgment["settings"][k] for k in ("kind", "url", "served_model", "api_style")} == {
        "kind": "endpoint", "url": transformers_server.url, "served_model": transformers_server.name,
        "api_style": "chat"}
    assert isinstance(judgment["answer"], str) and record["verdict"] == judgment["verdict"]
    document = json.loads((out / RESULTS_FILE).read_text())
    entry = document["results"]["aa_lcr"]
    assert entry["options"]["judge"] == judgment["judge"] and entry["result"]["extra"]["judge"] == judgment["judge"]
    assert document["model"]["api_style"] == "chat"

    # The record judged elsewhere by the same judge, with the run's cache: nothing is asked.
    pred = tmp_path / "pred"
    pred.mkdir()
    (pred / "smollm2.jsonl").write_text(json.dumps(record) + "\n")
    shutil.copytree(out / JUDGMENTS_DIR, pred / JUDGMENTS_DIR)
    assert main(["score", "aa-lcr", "--pred-dir", str(pred), *judge]) == 0
    (judged,) = [json.loads(line) for line in (pred / "judged" / "smollm2.jsonl").read_text().splitlines()]
    assert judged["judgment"]["cached"] is True and judged["judgment"]["answer"] == judgment["answer"]
    assert judged["judgment"]["prompt_sha256"] == judgment["prompt_sha256"]
    for folder in (out, pred):
        for path in Path(folder).rglob("*"):
            if path.is_file():
                assert secret not in path.read_text(errors="replace"), path


def reasoning_server(bodies: list[dict]) -> FastAPI:
    """A chat-completions server with a reasoning parser (vLLM's and SGLang's response shape:
    the think block in `reasoning_content`, the answer in `content`), with fixed replies: to the
    card's question prompt a model's answer, to the card's judge prompt a judge's JSON verdict.
    It stands in for a served reasoning model and a served reasoning judge; no model runs."""
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": "thinker", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        body = await request.json()
        bodies.append(body)
        asked = body["messages"][-1]["content"]
        if "CANDIDATE ANSWER" in asked:
            reasoning, content = "I compare both answers. JUDGE-THOUGHT", '{"verdict": "CORRECT"}'
        else:
            reasoning, content = "Document 1 has the fee. MODEL-THOUGHT", "Ada pays 7 euros."
        return {"id": "x", "object": "chat.completion", "model": "thinker",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content, "reasoning_content": reasoning}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 9}}

    return app


def test_a_reasoning_model_and_a_reasoning_judge_through_chat_endpoints(tmp_path):
    """AA-LCR on a served reasoning model, judged by a served reasoning judge (a stand-in
    server for both): the record keeps the model's think block, the judge is sent the answer
    alone, and the verdict is read from the judge's answer while its think block is recorded."""
    from clients.endpoint.engine import EndpointEngine, connect, served_identity
    from clients.endpoint.options import EndpointSpec
    from evaluators.judges import Judge, Judging, JudgmentCache
    from evaluators.registry import make_evaluator, parse_task
    from evaluators.suite import run_task
    from tests.helpers import ThreadServer, chat_checkpoint

    aa_lcr_files(tmp_path / "data")
    tokenizer = chat_checkpoint(tmp_path / "tok")
    bodies: list[dict] = []
    with ThreadServer(reasoning_server(bodies)) as server:
        def served(name: str) -> object:
            spec = EndpointSpec(base_url=f"{server.url}/v1", served_model=name, tokenizer=str(tokenizer),
                                context_length=100_000, api_style="chat")
            return connect(spec)

        model, judged_by = served("thinker"), served("thinker")
        judge = Judge("thinker-judge", served_identity(judged_by.spec.base_url, "thinker"), "endpoint", judged_by,
                      EndpointEngine(judged_by), {"url": judged_by.spec.base_url, "served_model": "thinker",
                                                  "api_style": "chat"})
        task = parse_task({"name": "aa_lcr", "judge": judge.ref, "categories": ["Legal"], "repeats": 1,
                           "thinking": "on", "thinking_budget": 64, "max_new_tokens": 32, "judge_thinking_budget": 64})
        evaluator = make_evaluator(task, tmp_path / "data")
        evaluator.judging = Judging.of(judge, JudgmentCache(tmp_path / "judgments"), task)
        entry = run_task(model, task, tmp_path / "out", engine=EndpointEngine(model), evaluator=evaluator)
    (record,) = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert record["prediction"] == "Ada pays 7 euros." and record["thinking"] == "Document 1 has the fee. MODEL-THOUGHT"
    judge_requests = [b for b in bodies if "CANDIDATE ANSWER" in b["messages"][-1]["content"]]
    assert len(judge_requests) == 1 and [m["role"] for m in judge_requests[0]["messages"]] == ["system", "user"]
    assert "Ada pays 7 euros." in judge_requests[0]["messages"][1]["content"]
    assert "MODEL-THOUGHT" not in json.dumps(judge_requests[0])
    judgment = record["judgment"]
    assert judgment["answer"] == '{"verdict": "CORRECT"}' and judgment["thinking"] == "I compare both answers. JUDGE-THOUGHT"
    assert record["verdict"] == "CORRECT" and record["score"] == 1.0
    assert judgment["settings"]["think_format"] == {"open": "<think>", "close": "</think>", "style": "tags"}
    assert entry["result"]["metrics"][0]["value"] == 1.0
