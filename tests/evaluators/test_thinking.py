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
from evaluators.chat import apply_chat_template, render_conversation, thinking_refusal
from evaluators.errors import EvaluatorError
from evaluators.registry import make_evaluator
from evaluators.run import run_evaluator

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


def _always_thinking(tmp: Path) -> Path:
    """The thinking model with a template whose generation prompt opens the block (as
    DeepSeek-R1's does, which also strips `</think>` from earlier turns): whatever it writes
    is thinking until it closes the block or its budget does."""
    import shutil

    r1 = tmp / "r1-like"
    if not r1.exists():
        shutil.copytree(THINKING_MODEL, r1)
        (r1 / "chat_template.jinja").write_text(
            "{% for message in messages %}{{ message.content.split('</think>')[-1] }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '\\n<think>\\n' }}{% endif %}")
    return r1


def _run(tmp: Path, name: str, **options) -> tuple[dict, list[dict]]:
    loaded = load_model(THINKING_MODEL)
    folder = tmp / f"{name}-{options.get('thinking', 'default')}-{options.get('thinking_budget', '')}"
    entry = run_evaluator(make_evaluator({"name": name, **options}), loaded, folder)
    records = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    return entry, records


@pytest.mark.integration  # a dozen passkey trials decoded three times on the thinking model: ~10 s
def test_passkey_scores_the_same_thinking_on_and_off(tmp_path):
    """The thinking model answers after a block of 85 tokens; passkey's answer budget is 10:
    without a budget of its own the block would eat the answer. With it, thinking on scores
    what thinking off scores, and every record says how much it thought."""
    spec = dict(lengths=[256, 264], trials=4, chat_template=True)
    on, on_records = _run(tmp_path, "passkey", thinking="on", **spec)
    off, off_records = _run(tmp_path, "passkey", thinking="off", **spec)
    assert on["result"]["metrics"][0]["value"] == off["result"]["metrics"][0]["value"] > 0.5
    assert all(r["thinking_tokens"] > 40 and not r["thinking_truncated"] for r in on_records)
    assert all(r["thinking_tokens"] == 0 and r["thinking"] is None for r in off_records)
    assert all("</think>" not in r["prediction"] and "<think>" not in r["prediction"] for r in on_records)
    series = {s["name"]: s for s in on["result"]["series"]}
    assert [p["key"] for p in series["thinking_tokens"]["points"]] == [256, 264]
    assert any(p.endswith("thinking_tokens.png") for p in on["plots"])
    assert on["config"] != off["config"]
    # a block out of budget is closed for the model, which then answers with its own budget
    cut, cut_records = _run(tmp_path, "passkey", thinking="on", thinking_budget=12, **spec)
    assert all(r["thinking_truncated"] and r["thinking_tokens"] >= 12 for r in cut_records)
    assert all(r["prediction"].strip() for r in cut_records)
    assert cut["result"]["metrics"][-1]["name"] == "thinking_truncated" and cut["result"]["metrics"][-1]["value"] == 1
    # no room left: prompt + thinking budget + answer budget beyond the model's 352-token context at
    # 264 tokens (264 + 68 + the forced close, the separator and 10 answer tokens), not at 256
    _, roomless = _run(tmp_path, "passkey", thinking="on", thinking_budget=68, **spec)
    assert [r["length"] for r in roomless if r.get("beyond_context")] == [264] * 4


@pytest.mark.integration  # RULER's draw and the thinking model at 1024 tokens: ~10 s
def test_ruler_closes_a_block_that_runs_out_and_answers_after_its_prefix(tmp_path):
    """An always-thinking template (the generation prompt opens the block, as DeepSeek-R1's
    does): every output is thinking until the budget closes it; RULER's answer prefix is then
    written after the block, so the prompt leaves it out, and the answer keeps its own 128
    tokens. `on` is accepted for such a template (it is what it does), `off` refused."""
    loaded = load_model(_always_thinking(tmp_path))
    spec = {"name": "ruler", "tasks": ["niah_single_1"], "lengths": [1024], "samples": 2, "chat_template": True,
            "thinking": "on", "thinking_budget": 8}
    folder = tmp_path / "out"
    run_evaluator(make_evaluator(spec), loaded, folder)
    records = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    force = len(loaded.tokenizer.encode("\n</think>\n\n", add_special_tokens=False))
    for r in records:
        assert r["thinking_truncated"] and r["thinking_tokens"] == 8 + force
        assert r["sample_length"] - r["prompt_tokens"] == 128 and "</think>" not in r["prediction"]
    with pytest.raises(EvaluatorError, match="but no switch"):
        run_evaluator(make_evaluator({**spec, "thinking": "off"}), loaded, tmp_path / "off")


@pytest.mark.integration  # a loopback server and the thinking model: ~10 s
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", None])
def test_a_served_model_gets_the_switch_and_returns_its_thinking_apart(tmp_path, field):
    """A chat-style endpoint: the request carries the switch (chat_template_kwargs), the
    budget covers thinking and answer, and the server's reasoning field (either name) becomes
    the record's thinking while the answer alone is scored: scores equal thinking on and off.
    A server without a reasoning parser (`field` None) returns the block in its text: split
    by the delimiters of the endpoint's tokenizer folder."""
    from clients.endpoint.engine import EndpointEngine, connect
    from clients.endpoint.options import EndpointSpec
    from tests.helpers import ThreadServer, reasoning_standin_app

    bodies: list[dict] = []
    with ThreadServer(reasoning_standin_app(THINKING_MODEL, field=field, bodies=bodies)) as server:
        spec = EndpointSpec(base_url=f"{server.url}/v1", served_model="standin/thinker",
                            tokenizer=str(THINKING_MODEL), context_length=352, api_style="chat")
        served = connect(spec)
        assert served.capabilities.thinking_switches == ["enable_thinking", "reasoning_effort"]
        scores = {}
        for thinking in ("on", "off"):
            folder = tmp_path / thinking
            entry = run_evaluator(make_evaluator({"name": "passkey", "lengths": [250], "trials": 3, "thinking": thinking,
                                                  "thinking_budget": 90}), served, folder, engine=EndpointEngine(served))
            records = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
            scores[thinking] = entry["result"]["metrics"][0]["value"]
            sent = [b for b in bodies if b.get("max_tokens", 0) > 1][-1]
            assert sent["chat_template_kwargs"] == {"enable_thinking": thinking == "on"}
            if thinking == "on":
                assert sent["max_tokens"] == 10 + 90  # the answer's budget and the thinking budget (in 352 tokens)
                assert all(r["thinking"].startswith("The pass key is hidden") and r["thinking_tokens"] > 40
                           for r in records)
            else:
                assert all(not r["thinking"] for r in records)
        assert scores["on"] == scores["off"] > 0.5


@pytest.mark.integration  # LongBench's and MRCR's crafted rows on the thinking model, on and off: ~15 s
def test_longbench_and_mrcr_score_the_answer_after_the_block(tmp_path):
    """LongBench (per-dataset answer budgets) and MRCR (a conversation in the template): a model
    that always thinks has its block closed at the budget and the scorer sees only what follows
    it; the hybrid model switched off thinks nothing. MRCR's grade reads the answer, as
    lm-eval's port does."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = Path(__file__).parent / "data" / "longbench"
    # passage_count: LongBench's pred.py wraps it in the chat template (trec, samsum and the other
    # few-shot datasets it leaves raw: no generation prompt opens a block there)
    lb = dict(datasets=["passage_count"], max_length=300, chat_template=True)
    turns = [{"role": "user", "content": "write a poem about owls"},
             {"role": "assistant", "content": "owls poem: hoot hoot"},
             {"role": "user", "content": "Prepend aYooSG8CQg to the 1st (1 indexed) poem about owls."}]
    (tmp_path / "d" / "mrcr").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{
        "prompt": json.dumps(turns), "answer": "aYooSG8CQgowls poem: hoot hoot", "random_string_to_prepend":
        "aYooSG8CQg", "n_needles": 2, "desired_msg_index": 1, "total_messages": 3, "n_chars": 23,
        "date_added": "04-12-2025"}]), tmp_path / "d" / "mrcr" / "2needle.parquet")
    hybrid, always = load_model(THINKING_MODEL), load_model(_always_thinking(tmp_path))
    force = len(hybrid.tokenizer.encode("\n</think>\n\n", add_special_tokens=False))
    for loaded, thinking in ((always, "on"), (hybrid, "off")):
        for name, options, data_dir in (("longbench", lb, data), ("mrcr", {"needles": [2], "max_new_tokens": 16},
                                                                  tmp_path / "d")):
            folder = tmp_path / f"{name}-{thinking}"
            run_evaluator(make_evaluator({"name": name, "thinking": thinking, "thinking_budget": 16, **options},
                                         data_dir=data_dir), loaded, folder)
            records = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
            assert records and all("thinking_tokens" in r for r in records)
            for r in records:
                assert "<think>" not in r["prediction"] and "</think>" not in r["prediction"]
                if thinking == "on":  # every block closed at its budget, the answer written after it
                    assert r["thinking_truncated"] and r["thinking_tokens"] == 16 + force, (name, r)
                else:
                    assert r["thinking_tokens"] == 0 and r["thinking"] is None, (name, r)


def test_a_completions_endpoint_takes_the_switch_only_in_the_template():
    """The switch is the template's: a completions-style endpoint needs lctx to render it
    (chat_template=true); a chat-style endpoint's server applies it itself."""
    from evaluators.registry import validate_task
    from evaluators.served import endpoint_refusals

    bare = [validate_task({"name": "passkey", "thinking": "on"})]
    assert "applied through the chat template" in endpoint_refusals(bare, None)[0]
    assert endpoint_refusals(bare, None, api_style="chat") == []
    assert endpoint_refusals([validate_task({"name": "ruler", "thinking": "off", "template": "chat"})], None) == []
