"""The GPT-4o judge prompts of HELMET's eval_gpt4_longqa.py / eval_gpt4_summ.py filled for one
answer, and the replies turned into the judged metrics (unparsed ones counted, not scored)."""

from __future__ import annotations

import pytest

from evaluators.helmet import judged

SUMM = {"keypoints": ["The case was filed in 2004.", "It settled."], "summary/long": "LONG SUMMARY",
        "answer": ["BOOK SUMMARY"]}


def test_the_prompts_are_the_scripts_texts() -> None:
    p = judged.prompts()
    assert set(p) >= {"longqa", "fluency_prompt", "fluency_prompt_book", "recall_prompt", "recall_prompt_book",
                      "precision_prompt", "precision_prompt_book"}
    assert p["longqa"].startswith("Please act as an impartial judge and evaluate the quality of the provided answer")
    assert p["longqa"].endswith("Answer: {parsed_output}\n")
    assert 'following json format: {{"fluency": 0, "correctness": 1}}.' in p["longqa"]


def test_narrativeqa_prompt_parses_the_answer_and_prints_the_answer_list() -> None:
    [conv] = judged.prompts_for("narrativeqa_130772", "Answer: They go\nto the North Pole",
                                {"question": "Where do they go?", "answer": ["the North Pole", "north"]})
    assert conv[0]["role"] == "user" and len(conv) == 1
    text = conv[0]["content"]
    # newlines become spaces before parsing, so the answer runs past the line end
    assert text.endswith("Question: Where do they go?\nCorrect answers: ['the North Pole', 'north']\n"
                         "Answer: They go to the North Pole\n")
    assert '{"fluency": 0, "correctness": 1}' in text  # the template's doubled braces come out single


def test_summary_prompts_fluency_recall_precision() -> None:
    convs = judged.prompts_for("multi_lexsum_130372", "  The case settled.  ", SUMM)
    texts = [c[0]["content"] for c in convs]
    assert len(texts) == 3
    assert texts[0].endswith('Text: "The case settled."\n')
    assert texts[1].endswith('Key points:\n1. The case was filed in 2004.\n2. It settled.\n\n'
                             'Summary: "The case settled."\n')
    assert texts[2].endswith('Expert summary: "LONG SUMMARY"\n\nProvided summary: "The case settled."\n')
    book = [c[0]["content"] for c in judged.prompts_for("infbench_sum_eng_129672", "x", SUMM)]
    assert book[2].endswith("Expert summary: <start of summary>BOOK SUMMARY<end of summary>\n\n"
                            "Provided summary: <start of summary>x<end of summary>\n")
    assert book[0] != texts[0].replace("The case settled.", "x")  # the _book fluency examples differ


def test_narrativeqa_reply_fluency_times_correctness() -> None:
    got = judged.scores_from("narrativeqa", ['Reasoning... {"fluency": 1, "correctness": 3}'], {})
    assert got == {"gpt-4-score": 3.0, "gpt-4-fluency": 1.0, "gpt-4-correctness": 3.0}
    # the LAST {...} is read
    got = judged.scores_from("narrativeqa", ['{"fluency": 0, "correctness": 1} then {"fluency": 1, '
                                             '"correctness": 2}'], {})
    assert got is not None and got["gpt-4-score"] == 2.0


@pytest.mark.parametrize("reply", ["no json at all", '{"fluency": 1, "correctness": 2', '{"fluency": 1}',
                                   '{"fluency": 1, "correctness": 2} and {"note": 1}',
                                   '{"fluency": "1", "correctness": 2}'])
def test_narrativeqa_unparsed_replies(reply: str) -> None:
    assert judged.scores_from("narrativeqa", [reply], {}) is None


def test_summary_recall_precision_f1() -> None:
    replies = ['{"fluency": 1}', '```json\n{"recall": 1}\n```', 'blah {"precision": 5, "sentence_count": 10}']
    got = judged.scores_from("multi_lexsum", replies, SUMM)
    # recall 1/2 key points, precision 5/10, f1 = 1 * 2 * 0.25 / 1.0
    assert got == {"gpt-4-f1": 0.5, "gpt-4-recall": 0.5, "gpt-4-precision": 0.5, "gpt-4-fluency": 1.0}
    got = judged.scores_from("infbench_sum", ['{"fluency": 0}', '{"recall": 2}', '{"precision": 3, '
                                              '"sentence_count": 4}'], SUMM)
    assert got is not None and got["gpt-4-f1"] == 0.0 and got["gpt-4-recall"] == 1.0


def test_summary_fenced_fallback_zero_denominators_and_unparsed() -> None:
    # the last {...} (non-greedy) is cut inside the nested object: the ```json block is read instead
    nested = '```json\n{"precision": 2, "sentence_count": 4, "x": {"y": 1}}\n```'
    got = judged.scores_from("multi_lexsum", ['{"fluency": 1}', '{"recall": 2}', nested], SUMM)
    assert got is not None and got["gpt-4-precision"] == 0.5 and got["gpt-4-f1"] == pytest.approx(2 / 3)
    got = judged.scores_from("multi_lexsum", ['{"fluency": 1}', '{"recall": 0}', '{"precision": 0, '
                                              '"sentence_count": 0}'], {"keypoints": []})
    assert got == {"gpt-4-f1": 0.0, "gpt-4-recall": 0.0, "gpt-4-precision": 0.0, "gpt-4-fluency": 1.0}
    assert judged.scores_from("multi_lexsum", ['{"fluency": 1}', 'no', '{"precision": 1, "sentence_count": 1}'],
                              SUMM) is None
    assert judged.scores_from("multi_lexsum", ['{"fluency": 1}', '{"recall": 1}', '{"precision": 1}'], SUMM) is None
    with pytest.raises(ValueError, match="3 prompts"):
        judged.scores_from("multi_lexsum", ['{"fluency": 1}'], SUMM)


def test_judge_settings_and_unknown_dataset() -> None:
    assert judged.max_new_tokens("narrativeqa_130772") == 2048
    assert judged.max_new_tokens("multi_lexsum_130372") == 4096
    with pytest.raises(ValueError, match="judges"):
        judged.prompts_for("kilt_nq", "x", {})
