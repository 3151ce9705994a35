"""BABILong's prompts and answer comparison against prompts.py and metrics.py, and
`lctx score babilong` against collect_results.py on crafted CSV files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from evaluators.babilong import protocol
from evaluators.babilong.scoring import score_prediction_dir
from evaluators.errors import EvaluatorError


def test_prompt_with_and_without_its_parts() -> None:
    p = protocol.prompts()["qa1"]
    full = protocol.format_input("qa1", "\n ctx \n", "Where is Mary?", instruction=True, examples=True,
                                 post_prompt=True)
    assert full == (f"{p['instruction']}\n\n{p['examples']}\n\n{p['post_prompt']}\n\n<context>\nctx\n</context>\n\n"
                    "Question: Where is Mary?")
    bare = protocol.format_input("qa1", "ctx", "Q?", instruction=False, examples=False, post_prompt=False)
    assert bare == "<context>\nctx\n</context>\n\nQuestion: Q?"  # the empty parts' blank lines stripped
    assert protocol.format_input("qa1", "ctx", "Q?", instruction=False, examples=True, post_prompt=False) == \
        f"{p['examples']}\n\n\n\n<context>\nctx\n</context>\n\nQuestion: Q?"


def test_prompt_texts_are_the_official_ones() -> None:
    prompts = protocol.prompts()
    assert set(prompts) == set(protocol.TASKS)
    assert prompts["qa1"]["post_prompt"] == ("Always return your answer in the following format: The most recent "
                                             "location of \u2019person\u2019 is \u2019location\u2019. Do not write "
                                             "anything else after that.")
    assert prompts["qa10"]["examples"].endswith("Answer: yes\n</example>\n<context>\n")  # the official quirk


LABELS = protocol.TASK_LABELS


@pytest.mark.parametrize(("task", "target", "output", "question", "correct"), [
    ("qa1", "kitchen", "The most recent location of Mary is kitchen.", "Where is Mary?", True),
    ("qa1", "kitchen", "Kitchen", "Where is Mary?", True),  # lower-cased
    ("qa1", "kitchen", "kitchen or garden", "Where is Mary?", False),  # two labels
    ("qa1", "kitchen", "She left the garden. Then kitchen", "Where is Mary?", False),  # the first sentence only
    ("qa2", "garden", "The football is in the garden", "Where is the football?", True),
    ("qa3", "office", "Before the kitchen the apple was in the office", "Where was the apple before the kitchen?",
     True),  # "kitchen" is in the question, so it is not counted
    ("qa6", "no", "no", "Is John in the garden?", True),
    ("qa7", "none", "none", "How many objects is Mary carrying?", False),  # "one" is inside "none"
    ("qa7", "two", "two", "How many objects is Sandra carrying?", True),
    ("qa8", "apple,milk", "apple, milk", "What is Daniel carrying?", True),
    ("qa8", "apple,milk", "apple", "What is Daniel carrying?", False),
    ("qa8", "apple,milk", "apple, milk, football", "What is Daniel carrying?", False),
    ("qa10", "maybe", "Maybe", "Is Mary in the school?", True),
    ("qa9", "yes", "", "Is Mary in the kitchen?", False),
    ("qa5", "Fred", "fred", "Who did Mary give the apple to?", True),  # labels lower-cased too
])
def test_compare_answers_as_metrics_py(task: str, target: str, output: str, question: str, correct: bool) -> None:
    assert protocol.compare_answers(target, output, question, LABELS[task]) is correct


def test_qa4_example_above_is_wrong_for_the_right_reason() -> None:
    # "garden<example>kitchen": cut at <example> leaves "garden", the target -> correct
    assert protocol.compare_answers("garden", "garden<example>kitchen", "What is west of the bedroom?", LABELS["qa4"])


def write_csv(path: Path, rows: list[tuple[str, str, str]]) -> None:
    """run_model_on_babilong.py's layout: pandas' index, then target, output, question."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["", "target", "output", "question"])
        for i, row in enumerate(rows):
            w.writerow([i, *row])


CFG = "instruction_yes_examples_yes_post_prompt_yes_chat_template_yes_system_prompt_no"


def test_score_dir_is_collect_results(tmp_path: Path) -> None:
    q = "Where is Mary?"
    write_csv(tmp_path / f"qa1_0k_{CFG}.csv", [("kitchen", "kitchen", q), ("garden", "kitchen", q),
                                               ("office", "The office.", q), ("hallway", "", q)])
    write_csv(tmp_path / f"qa1_1k_{CFG}.csv", [("kitchen", "kitchen", q)])
    # pandas reads an output "None" as missing, so it counts as '' (wrong), as collect_results.py reads it
    write_csv(tmp_path / f"qa7_0k_{CFG}.csv", [("none", "None", "How many objects is Mary carrying?"),
                                               ("two", "two", "How many objects is Mary carrying?")])
    write_csv(tmp_path / "qa1_0k_instruction_no.csv", [("kitchen", "no idea", q)])
    (tmp_path / "qa11_0k_x.csv").write_text("not ours")  # another task: left out as collect_results.py's TASKS
    result = score_prediction_dir(tmp_path)
    assert result[CFG]["accuracy"] == {"qa1": {"0k": 50.0, "1k": 100.0}, "qa7": {"0k": 50.0}}
    assert result[CFG]["average"] == pytest.approx((50 + 100 + 50) / 3)
    assert result["instruction_no"]["accuracy"] == {"qa1": {"0k": 0.0}}
    assert json.loads((tmp_path / "result.json").read_text()) == result
    assert (tmp_path / f"babilong_{CFG}.png").stat().st_size > 0


def test_score_dir_refuses_folders_without_predictions(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="no BABILong prediction files"):
        score_prediction_dir(tmp_path)
    (tmp_path / f"qa1_0k_{CFG}.csv").write_text("a,b\n1,2\n")
    with pytest.raises(EvaluatorError, match="target, output, question"):
        score_prediction_dir(tmp_path)
