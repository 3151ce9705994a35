"""The `helmet` task's prompts as model_utils.tokenize() makes them (evaluators/helmet/evaluator.py):
the completion prompt with BOS without the chat template, the user template alone as the one
user message with it (cite, longqa, summ only), the context's end dropped once when the input
is over `length - generation_max_length`, the plan per dataset and length; on crafted files."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoints.loading import LoadedModel, load_model
from evaluators.helmet import prompts
from evaluators.registry import make_evaluator
from tests.evaluators.helmet.helmet_files import write_helmet_files
from tests.helpers import chat_checkpoint


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LoadedModel]:
    root = tmp_path_factory.mktemp("helmet-build")
    return write_helmet_files(root / "data", [4096, 8192]), load_model(chat_checkpoint(root / "model"))


def built_of(data: Path, loaded: LoadedModel, **options: object):
    evaluator = make_evaluator({"name": "helmet", "max_test_samples": 2, "book_tokenizer": "model", **options}, data)
    evaluator.prepare(loaded)
    plan = evaluator.plan(loaded)
    return evaluator, plan, [evaluator.build(loaded, s) for s in plan]


def test_completion_prompts_without_the_chat_template(setup) -> None:
    data, loaded = setup
    evaluator, plan, built = built_of(data, loaded, datasets=["kilt_nq", "json_kv"], input_max_length=[8192])
    assert [s.id for s in plan] == ["helmet/json_kv/8192/0", "helmet/json_kv/8192/1"] + \
        [f"helmet/kilt_nq/8192/{i}" for i in range(4)]  # two drawn questions at two depths each
    b = built[2]
    item, templates, _ = b.keep
    assert b.request.prompt_ids[0] == loaded.tokenizer.bos_id
    assert loaded.tokenizer.decode(list(b.request.prompt_ids)) == prompts.completion_prompt(templates, item)
    assert b.request.messages is None and b.request.max_new_tokens == 20 and b.request.stop == ()
    assert b.record["chat_template"] is False and b.record["truncated"] is False
    assert b.record["references"] == item["answers"] and b.record["category"] == "rag"
    stopping = built_of(data, loaded, datasets=["kilt_nq"], input_max_length=[8192], stop_new_line=True)[2][0]
    assert stopping.request.stop == ("\n",)


def test_the_chat_template_for_cite_longqa_and_summ_only(setup) -> None:
    data, loaded = setup
    _, _, built = built_of(data, loaded, datasets=["alce_asqa", "json_kv"], input_max_length=[8192])
    chat = next(b for b in built if b.record["dataset"] == "alce_asqa")
    plain = next(b for b in built if b.record["dataset"] == "json_kv")
    item, templates, _ = chat.keep
    message = prompts.user_message(templates, item)
    assert loaded.tokenizer.decode(list(chat.request.prompt_ids)) == f"<user>{message}</user><assistant>"
    assert chat.request.messages == ({"role": "user", "content": message},) and chat.record["chat_template"]
    assert "Answer:" not in message[-10:]  # the system template is left out of a chat prompt
    assert not plain.record["chat_template"] and plain.request.messages is None
    off = built_of(data, loaded, datasets=["alce_asqa"], input_max_length=[8192], chat_template=False)[2][0]
    assert not off.record["chat_template"]
    assert loaded.tokenizer.decode(list(off.request.prompt_ids)).endswith("\n\nAnswer:")


def test_over_long_input_loses_the_end_of_its_context(setup) -> None:
    """ICL at 4k: 200 demonstrations (~5,600 bytes, a byte a token) over 4096 - 20: the context's
    last tokens go and the prompt is made again, exactly at the budget."""
    data, loaded = setup
    _, _, built = built_of(data, loaded, datasets=["icl_trec_coarse"], input_max_length=[4096])
    b = built[0]
    item, templates, _ = b.keep
    assert b.record["truncated"] is True and b.record["prompt_tokens"] == 4096 - 20
    text = loaded.tokenizer.decode(list(b.request.prompt_ids))
    assert text == prompts.completion_prompt(templates, item)
    assert text.endswith(f"\n\n{item['question']}\nlabel:")  # the question stays; the demonstrations' end went


def test_every_category_builds(setup) -> None:
    data, loaded = setup
    evaluator, plan, built = built_of(data, loaded, input_max_length=[8192], max_test_samples=1)
    assert {b.record["category"] for b in built} == {"recall", "rag", "rerank", "cite", "longqa", "summ", "icl"}
    assert {b.record["dataset"] for b in built} == set(evaluator.options.datasets)
    assert all(b.record["prompt_tokens"] <= 8192 - b.record["max_new_tokens"] for b in built)


def test_the_judge_and_the_nli_model_are_optional_graders(setup) -> None:
    """Without a judge a helmet job is not refused (the no-judge suite); a judge named is checked and
    pinned as every task's judge is; the NLI model is a grader of its own, only for the cite datasets."""
    from evaluators.registry import parse_task

    bare = parse_task({"name": "helmet"})
    assert not bare.needs_judge and bare.graders() == {} and bare.not_judged() == [
        "narrativeqa", "infbench_sum_eng", "multi_lexsum"]
    judged = parse_task({"name": "helmet", "judge": "grader@0123456789ab", "citation_nli": "nli"})
    assert judged.needs_judge and judged.judge_problems() == [] and judged.graders() == {"citation_nli": "nli"}
    assert parse_task({"name": "helmet", "categories": ["rag"], "citation_nli": "nli"}).graders() == {}
    assert judged.judge_max_new_tokens == 4096  # HELMET's scripts let GPT-4o reason before its JSON
    data, _ = setup
    problems = parse_task({"name": "helmet", "input_max_length": [8192], "citation_nli": "nli",
                           "book_tokenizer": "model"}).missing_files(data)
    assert not any("punkt" in line for line in problems)  # the data folder's nltk_data holds the punkt model
