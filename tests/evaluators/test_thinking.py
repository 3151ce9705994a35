"""Reasoning models in the evaluators: the thinking switch applied through each template's
own switch (Qwen3's enable_thinking, SmolLM3's /think and /no_think system flag, harmony's
reasoning_effort), refused where a template has none, and a model that thinks evaluated with
thinking on and off: every record says how much it thought, its answer is never the block's,
and a block out of budget is closed and answered.

The templates below are written here in the logic of the real ones (Qwen3's generation
prompt and empty block, SmolLM3's system flag, gpt-oss's reasoning line), not copied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoints.loading import load_model
from checkpoints.tokenizer import ByteTokenizer
from evaluators.base import run_evaluator
from evaluators.chat import apply_chat_template, render_conversation, thinking_refusal
from evaluators.errors import EvaluatorError
from evaluators.registry import make_evaluator

THINKING_MODEL = Path(__file__).resolve().parents[2] / "demo" / "thinking"

QWEN3_LIKE = ("{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
              "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined "
              "and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
SMOLLM3_LIKE = ("{% set mode = '/think' %}{% if messages[0].role == 'system' %}{% if '/no_think' in "
                "messages[0].content %}{% set mode = '/no_think' %}{% elif '/think' in messages[0].content %}"
                "{% set mode = '/think' %}{% endif %}{% endif %}<|im_start|>system\nReasoning Mode: {{ mode }}"
                "<|im_end|>\n{% for message in messages %}{% if message.role != 'system' %}<|im_start|>"
                "{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% if mode == '/no_think' %}"
                "<think>\n\n</think>\n{% endif %}{% endif %}")
HARMONY_LIKE = ("<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}<|end|>"
                "{% for message in messages %}<|start|>{{ message.role }}<|message|>{{ message.content }}<|end|>"
                "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}")
R1_LIKE = ("{% for message in messages %}<｜User｜>{{ message.content }}{% endfor %}"
           "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}{# strips </think> of history #}")
PLAIN = "{% for message in messages %}{{ message.content }}{% endfor %}"


def _tok(template: str) -> ByteTokenizer:
    return ByteTokenizer(chat_template=template, chat_template_source="chat_template.jinja")


@pytest.mark.integration  # transformers' renderer is the oracle (its import takes seconds)
def test_thinking_off_renders_what_the_model_card_renders():
    from transformers.utils.chat_template_utils import render_jinja_template

    messages = [{"role": "user", "content": "What is the pass key?"}]
    for thinking, kwargs in (("off", {"enable_thinking": False}), ("on", {"enable_thinking": True}),
                             ("default", {})):
        want = render_jinja_template([messages], chat_template=QWEN3_LIKE, add_generation_prompt=True, **kwargs)
        want = want[0][0] if isinstance(want, tuple) else want
        want = want[0] if isinstance(want, list) else want
        assert apply_chat_template(_tok(QWEN3_LIKE), messages[0]["content"], "no template", thinking) == want


def test_each_switch_style_is_applied_by_the_template():
    off = apply_chat_template(_tok(QWEN3_LIKE), "q", "none", "off")
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert apply_chat_template(_tok(QWEN3_LIKE), "q", "none", "on").endswith("<|im_start|>assistant\n")
    smol_off = apply_chat_template(_tok(SMOLLM3_LIKE), "q", "none", "off")
    assert "Reasoning Mode: /no_think" in smol_off and smol_off.endswith("<think>\n\n</think>\n")
    assert "Reasoning Mode: /think" in apply_chat_template(_tok(SMOLLM3_LIKE), "q", "none", "on")
    # a conversation's own system message keeps its text, the flag added to it
    conv = render_conversation(_tok(SMOLLM3_LIKE), [{"role": "system", "content": "be brief"},
                                                     {"role": "user", "content": "q"}], "none", "off")
    assert "Reasoning Mode: /no_think" in conv
    assert "Reasoning: high" in apply_chat_template(_tok(HARMONY_LIKE), "q", "none", "high")
    assert "Reasoning: medium" in apply_chat_template(_tok(HARMONY_LIKE), "q", "none", "default")


def test_a_template_without_the_switch_is_refused_naming_what_it_offers():
    why = thinking_refusal(PLAIN, [], "off", "checkpoint base-model")
    assert "base-model" in why and "no thinking switch" in why and "thinking=default" in why
    assert thinking_refusal(HARMONY_LIKE, ["<|channel|>", "<|message|>"], "off", "gpt") is not None
    assert thinking_refusal(HARMONY_LIKE, [], "low", "gpt") is None
    assert thinking_refusal(QWEN3_LIKE, ["<think>", "</think>"], "off", "qwen") is None
    # always thinks: its generation prompt opens the block; `on` is what it does, `off` it cannot
    assert thinking_refusal(R1_LIKE, ["<think>", "</think>"], "on", "r1") is None
    assert "but no switch" in thinking_refusal(R1_LIKE, ["<think>", "</think>"], "off", "r1")
    with pytest.raises(EvaluatorError, match="offers thinking=default"):
        apply_chat_template(_tok(PLAIN), "q", "none", "on")


def _run(tmp: Path, name: str, **options) -> tuple[dict, list[dict]]:
    loaded = load_model(THINKING_MODEL)
    folder = tmp / f"{name}-{options.get('thinking', 'default')}-{options.get('thinking_budget', '')}"
    entry = run_evaluator(make_evaluator({"name": name, **options}), loaded, folder)
    records = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    return entry, records


@pytest.mark.integration  # a dozen passkey trials decoded three times on the thinking model: ~10 s
def test_passkey_scores_the_same_thinking_on_and_off(tmp_path):
    """The thinking model answers after a block of ~70 tokens; passkey's answer budget is 10:
    without a budget of its own the block would eat the answer. With it, thinking on scores
    what thinking off scores, and every record says how much it thought."""
    spec = dict(lengths=[150, 250], trials=6, chat_template=True)
    on, on_records = _run(tmp_path, "passkey", thinking="on", **spec)
    off, off_records = _run(tmp_path, "passkey", thinking="off", **spec)
    assert on["result"]["metrics"][0]["value"] == off["result"]["metrics"][0]["value"] > 0.5
    assert all(r["thinking_tokens"] > 40 and not r["thinking_truncated"] for r in on_records)
    assert all(r["thinking_tokens"] == 0 and r["thinking"] is None for r in off_records)
    assert all("</think>" not in r["prediction"] and "<think>" not in r["prediction"] for r in on_records)
    series = {s["name"]: s for s in on["result"]["series"]}
    assert [p["key"] for p in series["thinking_tokens"]["points"]] == [150, 250]
    assert any(p.endswith("thinking_tokens.png") for p in on["plots"])
    assert on["config"] != off["config"]
    # a block out of budget is closed for the model, which then answers with its own budget
    cut, cut_records = _run(tmp_path, "passkey", thinking="on", thinking_budget=12, **spec)
    assert all(r["thinking_truncated"] and r["thinking_tokens"] >= 12 for r in cut_records)
    assert all(r["prediction"].strip() for r in cut_records)


@pytest.mark.integration  # RULER's draw and the thinking model: ~10 s
def test_ruler_writes_its_answer_prefix_after_the_block(tmp_path):
    spec = dict(tasks=["niah_single_1"], lengths=[300], samples=3, chat_template=True)
    on, on_records = _run(tmp_path, "ruler", thinking="on", **spec)
    off, off_records = _run(tmp_path, "ruler", thinking="off", **spec)
    for r in on_records:
        assert r["thinking_tokens"] > 0 and not r["thinking_truncated"]
        assert r["prompt_tokens"] < r["sample_length"] and "</think>" not in r["prediction"]
    assert all(r["thinking_tokens"] == 0 for r in off_records)
    # off: the prefix ends the prompt, as RULER writes it; on: it follows the block
    assert off_records[0]["prompt_tokens"] > on_records[0]["prompt_tokens"]


@pytest.mark.integration  # a loopback server and the thinking model: ~10 s
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_served_model_gets_the_switch_and_returns_its_thinking_apart(tmp_path, field):
    """A chat-style endpoint: the request carries the switch (chat_template_kwargs), the
    budget covers thinking and answer, and the server's reasoning field (either name) becomes
    the record's thinking while the answer alone is scored: scores equal thinking on and off."""
    from clients.endpoint import EndpointEngine, EndpointSpec, connect
    from tests.helpers import ThreadServer, reasoning_standin_app

    bodies: list[dict] = []
    with ThreadServer(reasoning_standin_app(THINKING_MODEL, field=field, bodies=bodies)) as server:
        spec = EndpointSpec(base_url=f"{server.url}/v1", served_model="standin/thinker",
                            tokenizer=str(THINKING_MODEL), context_length=384, api_style="chat")
        served = connect(spec)
        assert served.capabilities.thinking_switches == ["enable_thinking", "reasoning_effort"]
        scores = {}
        for thinking in ("on", "off"):
            folder = tmp_path / thinking
            entry = run_evaluator(make_evaluator({"name": "passkey", "lengths": [200], "trials": 4,
                                                 "thinking": thinking}), served, folder, engine=EndpointEngine(served))
            records = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
            scores[thinking] = entry["result"]["metrics"][0]["value"]
            sent = [b for b in bodies if b.get("max_tokens", 0) > 1][-1]
            assert sent["chat_template_kwargs"] == {"enable_thinking": thinking == "on"}
            if thinking == "on":
                assert sent["max_tokens"] == 10 + 2048  # the answer's budget and the thinking budget
                assert all(r["thinking"].startswith("The pass key is hidden") and r["thinking_tokens"] > 40
                           for r in records)
            else:
                assert all(not r["thinking"] for r in records)
        assert scores["on"] == scores["off"] > 0.5
