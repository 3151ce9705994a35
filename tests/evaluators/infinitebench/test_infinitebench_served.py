"""InfiniteBench on a chat-style endpoint (the session's `transformers serve` of the real
SmolLM2): prompts=gpt4 sends create_msgs' conversation (system message, then the truncated
prompt) through the shared chat path, and the answer is scored by compute_scores' scorer.
Plumbing, not accuracy."""

from __future__ import annotations

import json

import pytest

from cli.main import main
from evaluators.infinitebench import protocol
from tests.evaluators.infinitebench.test_evaluator import write_data

pytestmark = pytest.mark.integration  # transformers serve on loopback, the real model


def test_gpt4_messages_on_a_chat_endpoint(transformers_server, real_model, tmp_path) -> None:
    write_data(tmp_path / "data")
    out = tmp_path / "out"
    served = ["--served-model", transformers_server.name, "--tokenizer", str(real_model)]
    options = ["--option", 'tasks=["passkey"]', "--option", 'prompts="gpt4"', "--chat-template"]
    assert main(["eval", "--endpoint", transformers_server.url, *served, "--api-style", "chat", "--task",
                 "infinitebench", *options, "--max-new-tokens", "6", "--data-dir", str(tmp_path / "data"),
                 "--out", str(out), "-q"]) == 0
    (record,) = [json.loads(x) for x in (out / "infinitebench" / "samples.jsonl").read_text().splitlines()]
    assert record["subtask"] == "passkey" and isinstance(record["prediction"], str)
    assert record["score"] == protocol.score_one("passkey", record["prediction"], ["71432"]).literal
