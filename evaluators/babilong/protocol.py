"""BABILong's prompts and answer comparison, matched to booydar/babilong (commit 7a6efee):
`babilong/prompts.py` (DEFAULT_TEMPLATE, get_formatted_input, DEFAULT_PROMPTS: their texts
for qa1-qa10 are kept verbatim in prompts.json, as data), `babilong/metrics.py`
(TASK_LABELS, preprocess_output, compare_answers) and `scripts/run_model_on_babilong.py`
(20 new tokens, greedy, the output decoded and stripped). Written from reading them, not
copied. No torch."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

TASK_FILES = {
    "qa1": "qa1_single-supporting-fact", "qa2": "qa2_two-supporting-facts", "qa3": "qa3_three-supporting-facts",
    "qa4": "qa4_two-arg-relations", "qa5": "qa5_three-arg-relations", "qa6": "qa6_yes-no-questions",
    "qa7": "qa7_counting", "qa8": "qa8_lists-sets", "qa9": "qa9_simple-negation",
    "qa10": "qa10_indefinite-knowledge",
}
TASKS = tuple(TASK_FILES)

# metrics.py's TASK_LABELS for qa1-qa10.
_ROOMS = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")
TASK_LABELS: dict[str, tuple[str, ...]] = {
    "qa1": _ROOMS, "qa2": _ROOMS, "qa3": _ROOMS, "qa4": _ROOMS,
    "qa5": ("Bill", "Fred", "Jeff", "Mary", "apple", "football", "milk"),
    "qa6": ("no", "yes"), "qa7": ("none", "one", "three", "two"), "qa8": ("apple", "football", "milk", "nothing"),
    "qa9": ("no", "yes"), "qa10": ("maybe", "no", "yes"),
}

TEMPLATE = ("{instruction}\n\n{examples}\n\n{post_prompt}\n\n"
            "<context>\n{context}\n</context>\n\nQuestion: {question}")
MAX_NEW_TOKENS = 20  # run_model_on_babilong.py's generate_kwargs


@cache
def prompts() -> dict[str, dict[str, str]]:
    """DEFAULT_PROMPTS for qa1-qa10: {task: {instruction, examples, post_prompt}}."""
    return json.loads((Path(__file__).parent / "prompts.json").read_text(encoding="utf-8"))["prompts"]


def format_input(task: str, context: str, question: str, *, instruction: bool, examples: bool,
                 post_prompt: bool) -> str:
    """get_formatted_input with the parts the run keeps (an empty string for the others):
    the template filled with the stripped context, then the whole stripped."""
    p = prompts()[task]
    return TEMPLATE.format(instruction=p["instruction"] if instruction else "",
                           examples=p["examples"] if examples else "",
                           post_prompt=p["post_prompt"] if post_prompt else "",
                           context=context.strip(), question=question).strip()


def preprocess_output(output: str) -> str:
    """metrics.py: lower case, the first sentence, nothing from an example or context tag
    on (its cut at "Question" follows the lowering, so it never cuts)."""
    output = output.lower().split(".")[0]
    for mark in ("<context>", "<example>", "Question"):
        output = output.split(mark)[0]
    return output


def compare_answers(target: str, output: str, question: str, labels: tuple[str, ...]) -> bool:
    """metrics.py's compare_answers: the task's labels found (as substrings) in the
    processed output, less those the question names, must be exactly the target (or, for a
    target with a comma longer than 3 characters, exactly its parts)."""
    output = preprocess_output(output)
    target = target.lower()
    lowered = {label.lower() for label in labels}
    in_question = {label for label in lowered if label in question.lower()}
    in_output = {label for label in lowered if label in output} - in_question
    if "," in target and len(target) > 3:
        parts = target.split(",")
        return all(p in in_output for p in parts) and len(in_output) == len(parts)
    return target in in_output and len(in_output) == 1


def prompt_name(instruction: bool, examples: bool, post_prompt: bool, chat_template: bool,
                system_prompt: bool = False) -> str:
    """run_model_on_babilong.py's file-name part: each prompt option as <name>_yes/_no."""
    parts = {"instruction": instruction, "examples": examples, "post_prompt": post_prompt,
             "chat_template": chat_template, "system_prompt": system_prompt}
    return "_".join(f"{k}_{'yes' if v else 'no'}" for k, v in parts.items())
