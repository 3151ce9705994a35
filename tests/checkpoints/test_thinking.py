"""Reasoning models in the runtime: think delimiters read from a tokenizer's added tokens
and a template's tags, outputs split into thinking and answer, and the engine's stop rule
giving a think block its own budget (closed by force when it runs out, the answer then
generated with the request's own budget), with batching and prompt lookup changing nothing.

A random model marks no thinking, so the tests take a think format from what it writes by
itself: its first characters open the block, a later pair of characters closes it."""

from __future__ import annotations

import pytest

from checkpoints.engine import Engine, GenerateRequest
from checkpoints.generate import greedy_generate
from checkpoints.sampler import StopRule
from checkpoints.thinking import SEPARATOR_TOKENS, ThinkFormat, ThinkPlan, offered, switches, think_format
from checkpoints.tokenizer import ByteTokenizer
from tests.helpers import variant_model

TOK = ByteTokenizer()

QWEN3_LIKE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
              "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
HARMONY_LIKE = ("<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}<|end|>"
                "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
                "{# channels: analysis, final #}<|start|>assistant")


def test_delimiters_come_from_added_tokens_and_template_tags():
    qwen = think_format(["<|im_start|>", "<|im_end|>", "<think>", "</think>"], None)
    assert (qwen.open, qwen.close, qwen.style) == ("<think>", "</think>", "tags")
    magistral = think_format([], "{{ '[THINK]' }}{{ m.content }}{{ '[/THINK]' }}")
    assert (magistral.open, magistral.close) == ("[THINK]", "[/THINK]")
    harmony = think_format(["<|channel|>", "<|message|>", "<|end|>", "<|start|>"], HARMONY_LIKE)
    assert harmony.style == "harmony" and harmony.close == "<|channel|>final<|message|>"
    # a pair that is not about thinking, and no pair at all: no think format
    assert think_format(["<tool_call>", "</tool_call>"], None) is None
    assert think_format([], "{{ messages[0].content }}") is None


def test_split_keeps_thinking_apart_from_the_answer():
    fmt = ThinkFormat("<think>", "</think>", "\n</think>\n\n")
    assert fmt.split("<think>\nfind it\n</think>\n\n42") == ("find it", "42")
    assert fmt.split("42") == (None, "42")
    assert fmt.split("still thinking", inside=True) == ("still thinking", "")
    assert fmt.inside_after("<|im_start|>assistant\n<think>\n") and not fmt.inside_after("<think>\n\n</think>\n\n")
    harmony = think_format(["<|channel|>", "<|message|>"], HARMONY_LIKE)
    assert harmony.split("<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>7") \
        == ("hmm", "7")


def test_switches_are_read_from_the_template():
    assert switches(QWEN3_LIKE)["enable_thinking"] and offered(QWEN3_LIKE) == ["default", "on", "off"]
    assert switches(HARMONY_LIKE)["reasoning_effort"] and "high" in offered(HARMONY_LIKE)
    assert switches("{% if '/no_think' in m %}{% elif '/think' in m %}{% endif %}")["flag"]
    assert offered("{{ messages[0].content }}") == ["default"]


def _free_text(model, prompt: list[int], n: int = 40) -> str:
    return greedy_generate(model, TOK, prompt, n, stop_at_eos=False).text


def _format_from(text: str) -> ThinkFormat:
    """A think format the model writes by itself: its first two characters open the block,
    the two characters at 10..12 close it (chosen where they do not occur earlier)."""
    opening = text[:2]
    for at in range(10, len(text) - 2):
        close = text[at:at + 2]
        if close not in text[2:at] and close != opening and close.isascii() and close.strip() == close:
            return ThinkFormat(opening, close, f"\n{close}\n\n")
    pytest.skip("the random model's output has no usable closing pair")


def _plan(fmt: ThinkFormat, budget: int, prefix: str = "") -> ThinkPlan:
    return ThinkPlan(fmt, budget, TOK.encode(fmt.force, add_special_tokens=False),
                     prefix_ids=TOK.encode(prefix, add_special_tokens=False))


def test_a_block_that_ends_by_itself_leaves_the_answer_its_whole_budget():
    model = variant_model("softmax", seed=7)
    prompt = TOK.encode("the key is 4417. what is the key?")
    free = _free_text(model, prompt, 60)
    fmt = _format_from(free)
    closed_at = free.index(fmt.close, 2) + len(fmt.close)
    req = GenerateRequest(prompt, max_new_tokens=8, stop_at_eos=False, think=_plan(fmt, 40))
    got = Engine(model, TOK).generate_until([req])[0]
    assert got.thinking == free[len(fmt.open):closed_at - len(fmt.close)].strip()
    assert not got.thinking_truncated and got.stop_reason == "length"
    answer_tokens = len(got.token_ids) - got.thinking_tokens
    assert 8 <= answer_tokens <= 8 + SEPARATOR_TOKENS  # the answer had its own 8 tokens (plus a blank between)
    assert free[closed_at:].lstrip().startswith(got.text)  # the same greedy continuation, answer only
    # without a plan the same budget of 8 tokens would have ended inside the block
    plain = Engine(model, TOK).generate_until([GenerateRequest(prompt, max_new_tokens=8, stop_at_eos=False)])[0]
    assert fmt.close not in plain.text


def test_a_block_out_of_budget_is_closed_and_answered_as_the_oracle_does():
    model = variant_model("softmax", seed=7)
    prompt = TOK.encode("the key is 4417. what is the key?")
    fmt = _format_from(_free_text(model, prompt, 60))
    plan = _plan(fmt, budget=5)
    req = GenerateRequest(prompt, max_new_tokens=6, stop_at_eos=False, think=plan)
    got = Engine(model, TOK).generate_until([req])[0]
    assert got.thinking_truncated and got.thinking_tokens == 5 + len(plan.force_ids)
    assert got.token_ids[5:5 + len(plan.force_ids)] == list(plan.force_ids)
    assert len(got.token_ids) - got.thinking_tokens == 6  # the answer's own budget, after the forced close
    oracle = greedy_generate(model, TOK, prompt, 6, stop_at_eos=False, think=plan)
    assert (got.text, got.token_ids, got.thinking, got.thinking_tokens) == \
        (oracle.text, oracle.token_ids, oracle.thinking, oracle.thinking_tokens)


def test_an_answer_prefix_follows_the_block_before_the_answer():
    model = variant_model("softmax", seed=7)
    prompt = TOK.encode("the key is 4417. what is the key?")
    fmt = _format_from(_free_text(model, prompt, 60))
    plan = _plan(fmt, budget=40, prefix=" The key is")
    got = Engine(model, TOK).generate_until([GenerateRequest(prompt, max_new_tokens=5, stop_at_eos=False,
                                                              think=plan)])[0]
    thought = got.thinking_tokens
    assert got.token_ids[thought:thought + len(plan.prefix_ids)] == list(plan.prefix_ids)
    oracle = greedy_generate(model, TOK, prompt, 5, stop_at_eos=False, think=plan)
    assert (got.text, got.token_ids) == (oracle.text, oracle.token_ids) and len(got.text) == 5


@pytest.mark.parametrize("draft_tokens", [0, 6])
def test_thinking_rows_batched_and_drafted_equal_the_oracle(draft_tokens):
    """Rows that think, are forced closed, answer without thinking, stop on a string inside the
    answer, decoded in one batch with and without prompt lookup: each equals the oracle."""
    model = variant_model("softmax", seed=7)
    prompts = [TOK.encode(t) for t in ("the key is 4417. what is the key?", "abc abc abc abc", "x", "4417 4417")]
    fmt = _format_from(_free_text(model, prompts[0], 60))
    reqs = []
    for k, p in enumerate(prompts):
        for budget in (3, 40):
            reqs.append(GenerateRequest(p, max_new_tokens=7, stop_at_eos=k % 2 == 0, think=_plan(fmt, budget)))
    reqs.append(GenerateRequest(prompts[0], max_new_tokens=9, stop=(" ",), think=_plan(fmt, 40)))
    got = Engine(model, TOK, max_batch=4, draft_tokens=draft_tokens).generate_until(reqs)
    for req, gen in zip(reqs, got, strict=True):
        oracle = greedy_generate(model, TOK, req.prompt_ids, req.max_new_tokens, stop=req.stop,
                                 stop_at_eos=req.stop_at_eos, think=req.think)
        assert (gen.text, gen.token_ids, gen.stop_reason, gen.thinking_tokens, gen.thinking_truncated) == \
            (oracle.text, oracle.token_ids, oracle.stop_reason, oracle.thinking_tokens, oracle.thinking_truncated)


def test_stop_rule_phases_on_scripted_tokens():
    """The rule alone, on tokens chosen by hand: no stop string or minimum applies inside the
    block; the answer's rules count from its first token; a model that opens no block
    answers with the whole output."""
    fmt = ThinkFormat("<t>", "</t>", "\n</t>\n\n")
    plan = ThinkPlan(fmt, budget=30, force_ids=TOK.encode(fmt.force, add_special_tokens=False))
    rule = StopRule.make([TOK.EOS], 3, stop=("x",), min_new_tokens=2, think=plan)
    out: list[int] = []
    for ch in "<t>x x</t>\n\nab":
        assert rule.blocked_at(len(out)) == () or rule.state.start is not None
        reason, _ = rule.after(out, ord(ch), TOK.decode)
        assert reason is None, ch
    assert rule.answer_text(out, TOK.decode) == "ab"
    assert rule.blocked_at(len(out) - 1) == (TOK.EOS,)  # one answer token: EOS still blocked before two
    assert rule.after(out, ord("c"), TOK.decode) == ("length", None)
    plain = StopRule.make([TOK.EOS], 3, think=plan)
    out = []
    assert plain.after(out, ord("<"), TOK.decode) == (None, None)  # may still become "<t>"
    assert plain.after(out, ord("b"), TOK.decode) == (None, None)  # "<b": not a block: all of it answers
    assert plain.state.start == 0 and plain.after(out, ord("c"), TOK.decode) == ("length", None)
