"""The passkey protocol's text (TDA paper appendix C, the landmark-attention protocol; see
`docs/protocols/protocols.md`, "Passkey retrieval"), written once: the passkey and needle
evaluators build their prompts from it, and the demo checkpoints are trained on it
(`training.synthetic`). It sits in `checkpoints` because dependencies point one way
(`evaluators -> checkpoints`, `training -> checkpoints`) and both need it; plain strings, no imports."""

from __future__ import annotations

INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. "
    "Find it and memorize them. I will quiz you about the important information there."
)
GARBAGE_SENTENCE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = "What is the pass key? The pass key is"
KEY_RANGE = (1, 50000)


def needle_text(key: int) -> str:
    return f"The pass key is {key}. Remember it. {key} is the pass key."


def repeated(unit: str, length: int, sep: str = " ") -> str:
    """The first `length` characters of `unit` repeated, joined with `sep`."""
    if length <= 0:
        return ""
    reps = length // (len(unit) + len(sep)) + 1
    return sep.join([unit] * reps)[:length]


def garbage(length: int) -> str:
    """The first `length` characters of the endlessly repeated garbage buffer."""
    return repeated(GARBAGE_SENTENCE, length)


def passkey_prompt(key: int, garbage_len: int, depth: int) -> str:
    """The protocol's five blocks joined with newlines: intro, garbage[:p], needle,
    garbage[:G - p], question (`depth` = p characters of garbage before the needle)."""
    if not 0 <= depth <= garbage_len:
        raise ValueError(f"depth {depth} must lie in [0, garbage_len={garbage_len}]")
    return "\n".join([INTRO, garbage(depth), needle_text(key), garbage(garbage_len - depth), QUESTION])


def answer_text(key: int) -> str:
    """What the model should write after the question (the demo checkpoints' training target)."""
    return f" {key}."
