"""evaluators/generation.py and the chat path it stands on (`Evaluator.wrap`, `evaluators.chat`)
without a model: one way to apply a template (exact for a template that trims the message),
what a chat-style server is sent and what counts it, the answer's budget and the rows beyond
the context; and the task contract's `legacy_result` refusing for every task younger than it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from checkpoints.tokenizer import ByteTokenizer
from evaluators.chat import apply_chat_template, user_message
from evaluators.errors import EvaluatorError
from evaluators.generation import chat_prompt, generation, user
from evaluators.registry import evaluator_classes, make_evaluator
from evaluators.task import Sample
from tests.helpers import CHAT_TEMPLATE

TRIMMING = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] | trim }}</{{ m['role'] }}>{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")  # Llama 3's way with a message


def source(template: str | None = CHAT_TEMPLATE, chat_api: bool = False, context: int = 4096) -> SimpleNamespace:
    """A model source as evaluators read one (tokenizer, context, chat_api): no weights needed."""
    return SimpleNamespace(tokenizer=ByteTokenizer(chat_template=template), chat_api=chat_api,
                           config=SimpleNamespace(effective_context=context))


@pytest.mark.parametrize("template", [CHAT_TEMPLATE, TRIMMING])
def test_wrap_renders_exactly_what_the_template_renders(template: str) -> None:
    tok = ByteTokenizer(chat_template=template)
    wrap = user_message(tok, "none", "t")
    for prompt in ("plain", "  padded prompt\n", "\nlines\n\n"):
        assert wrap(prompt) == apply_chat_template(tok, prompt, "none")
    assert user_message(tok, "none", "t")("  x ") == ("<user>x</user><assistant>" if template == TRIMMING
                                                       else "<user>  x </user><assistant>")


def test_one_chat_path_for_the_engine_and_for_a_chat_server() -> None:
    ev = make_evaluator({"name": "graphwalks"})
    on_engine = chat_prompt(ev, source(), user("Q?"))
    assert ByteTokenizer().decode(on_engine.ids) == "<user>Q?</user><assistant>"
    served = chat_prompt(ev, source(template=None, chat_api=True), user("Q?"))  # the server renders its own
    assert served.messages == ({"role": "user", "content": "Q?"},) and ByteTokenizer().decode(served.ids) == "Q?"
    raw = chat_prompt(make_evaluator({"name": "graphwalks", "chat_template": False}), source(), user("Q?"))
    assert ByteTokenizer().decode(raw.ids) == "Q?" and raw.messages == served.messages
    with pytest.raises(EvaluatorError, match="chat_template=true but the checkpoint has no chat template"):
        chat_prompt(ev, source(template=None), user("Q?"))
    conversation = ({"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"})
    with pytest.raises(EvaluatorError, match="set chat_template=true"):
        chat_prompt(make_evaluator({"name": "graphwalks", "chat_template": False}), source(), conversation)


def test_generation_budgets_the_answer_and_counts_rows_beyond_the_context() -> None:
    ev = make_evaluator({"name": "graphwalks", "max_new_tokens": 100})
    prompt_ids = len(ByteTokenizer().encode("<user>Q?</user><assistant>"))
    fits = generation(ev, source(context=prompt_ids + 40), Sample("s"), user("Q?"), "A" * 30, {"k": 1})
    assert fits.request is not None and fits.request.max_new_tokens == 40  # what the context leaves
    assert fits.record == {"k": 1, "prompt_tokens": prompt_ids, "answer_tokens": 30, "context": prompt_ids + 40,
                           "truncated": False, "beyond_context": False, "max_new_tokens": 40}
    assert generation(ev, source(context=4096), Sample("s"), user("Q?"), "A", {}, max_new_tokens=7).request \
        .max_new_tokens == 7
    beyond = generation(ev, source(context=prompt_ids + 29), Sample("s"), user("Q?"), "A" * 30, {})
    assert beyond.request is None and beyond.record["beyond_context"] is True


def test_a_task_without_old_results_refuses_an_entry_without_a_typed_result() -> None:
    younger = [(name, cls) for name, cls in evaluator_classes().items() if "legacy_result" not in vars(cls)]
    assert {"mrcr", "mrcr_v2", "graphwalks", "aa_lcr", "babilong", "longbench_v2"} <= {n for n, _ in younger}
    for name, cls in younger:  # (a task that wrote results before the contract overrides it to read them)
        with pytest.raises(EvaluatorError, match="has no typed result"):
            cls.legacy_result({"task": name, "evaluator_version": "1"})
