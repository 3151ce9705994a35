"""NoLiMa's protocol, matched to adobe-research/NoLiMa at commit 7532e4e: `evaluation/run_tests.py`
(the needle set expanded into tests, DEFAULT_TASK_TEMPLATE, the seeds), `evaluation/async_evaluate.py`
(`NoLiMa_Tester.evaluate`: 26 depths, the character drawn per depth, `_evaluate_response`'s
metrics), `data/book_haystack.py` (`BookHaystack._generate_w_needle_placement` and the
distractor placement), `evaluation/async_api_connector.py` (the system prompt, the tokenizer
calls), `evaluation/model_configs/*.json` (192 new tokens, temperature 0),
`evaluation/run_config/*.yaml` and the README (base score, effective length). Written from
reading them, not copied; see docs/protocols/nolima.md. No torch. lctx ships none of NoLiMa's
data (Adobe Research License): everything here reads the files a user downloads."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluators.nolima.options import DEPTHS, LENGTHS, MAX_NEW_TOKENS  # noqa: F401 - the protocol's own names

DEFAULT_TASK_TEMPLATE = (
    "You will answer a question based on the following book snippet:\n\n{haystack}\n\nUse the information provided "
    "in the book snippet to answer the question. Your answer should be short and based on either explicitly stated "
    "facts or strong, logical inferences.\n\nQuestion: {question}\n\n Return only the final answer with no additional "
    "explanation or reasoning.")
SYSTEM_PROMPT = "You are a helpful assistant"  # APIConnector's default, which generate_response always sends
BASE_LENGTHS = (250, 500, 1000)  # the README's base score
THRESHOLD = 0.85
BASE_SEED = 42
METRICS = ("EM", "contains", "lastline_EM", "lastline_contains")


@dataclass(frozen=True)
class Test:
    """One test of run_tests.py: `<exp id>_<test id>_<question type>` with its filled needle,
    question, distractor (or None), gold answers ("" when the test gives none), character
    set, template and the seed offset `int(exp_id[:4])`."""

    name: str
    question_type: str
    needle: str
    question: str
    distractor: str | None
    gold_answers: list[str] | str
    character_set: list[str] | None
    task_template: str
    seed: int


def expand_tests(needle_set: Any, base_seed: int = BASE_SEED) -> list[Test]:
    """run_tests.py's loop: for each experiment, each question type, each test. Each input
    argument `{i}` is replaced in the needle cumulatively, but in the question (and the
    distractor) from the original text each time, as the code does: a question with two
    placeholders keeps the first unreplaced."""
    if not isinstance(needle_set, list):
        raise ValueError("a needle set is a JSON array of experiments")
    tests = []
    for n, exp in enumerate(needle_set):
        if not isinstance(exp, dict) or not all(k in exp for k in ("id", "needle", "questions", "tests")):
            raise ValueError(f"experiment {n} lacks id, needle, questions or tests")
        exp_id = str(exp["id"])
        try:
            seed = base_seed + int(exp_id[:4])
        except ValueError:
            raise ValueError(f"experiment {n}: id {exp_id!r} does not start with four digits (run_tests.py's seed)")\
                from None
        for qtype, question in exp["questions"].items():
            for test_id, test in exp["tests"].items():
                needle, full_question, distractor = exp["needle"], question, None
                for i, arg in enumerate(test.get("input_args", [])):
                    mark = "{" + str(i + 1) + "}"
                    if mark in question:
                        full_question = question.replace(mark, arg)
                    if mark in needle:
                        needle = needle.replace(mark, arg)
                    dist = exp.get("distractors", {}).get(qtype) if isinstance(exp.get("distractors"), dict) else None
                    if dist is not None and mark in dist:
                        distractor = dist.replace(mark, arg)
                tests.append(Test(f"{exp_id}_{test_id}_{qtype}", qtype, needle, full_question, distractor,
                                  test.get("gold_answers", ""), exp.get("character_set"),
                                  exp.get("task_template", DEFAULT_TASK_TEMPLATE), seed))
    return tests


def depths(intervals: int = DEPTHS, low: float = 0.0, high: float = 100.0) -> list[float]:
    """evaluate's depths: np.linspace(min, max, intervals) / 100."""
    return [float(d) / 100 for d in np.linspace(low, high, intervals)]


@dataclass(frozen=True)
class Draw:
    character: str | None
    distractor_depth: float | None


def draws(test: Test, seed: int, depth_list: list[float], context_length: int) -> list[Draw]:
    """What evaluate draws at each depth from np.random seeded with `seed` (the test's plus
    the haystack's index): the character (`np.random.choice`) when the needle has `{CHAR}`,
    then the distractor's depth (`np.random.uniform`, outside a free zone of 0.2 around the
    needle; fixed for contexts under 500) when the test has a distractor."""
    rng = np.random.RandomState(seed)
    out = []
    for depth in depth_list:
        char = None
        if "{CHAR}" in test.needle:
            if not isinstance(test.character_set, list):
                raise ValueError(f"{test.name}: the needle has {{CHAR}} and no character set")
            char = str(rng.choice(test.character_set))
        dist_depth = None
        if test.distractor is not None:
            zone = 0.2
            left = max(0, depth - 2 * zone)
            right = max(0, 1 - (depth + 2 * zone))
            d = rng.uniform(0, left + right)
            dist_depth = depth + zone + (d - left) if d > left else d + zone
            if context_length < 500:
                dist_depth = 0.7 if depth < 0.6 else (0.6 if depth > 0.75 else 0.5)
        out.append(Draw(char, dist_depth))
    return out


class Haystack:
    """BookHaystack with the model's tokenizer: the book's token ids (no special tokens) and
    the token positions whose decoded text holds a newline (position 0 first)."""

    def __init__(self, text: str, encode: Callable[[str], list[int]], decode: Callable[[list[int]], str]) -> None:
        self.ids = encode(text)
        self.decode = decode
        self.valid = np.array([0] + [i for i, t in enumerate(self.ids) if "\n" in decode([t])])

    def place(self, needle: str, context_length: int, depth: float, shift: int = 0) -> str:
        """_generate_w_needle_placement without a static depth: the first newline position
        at or past `depth` of the context, the window of `context_length` tokens that puts it
        at round(context_length x depth), the text before it cut at its last newline, then
        " " + needle + "\\n" + the rest of the window."""
        delta = (self.valid - shift) / (context_length + 1) - depth
        delta[delta < 0] = np.inf
        at = int(self.valid[int(np.argmin(delta))])
        start = at - int(np.round(context_length * depth))
        end = start + context_length
        if start < 0 or end > len(self.ids):
            raise ValueError(f"the book is too short for {context_length} tokens at depth {depth:.3f} "
                             "(book_haystack asserts it)")
        pre = self.decode(self.ids[start:at + 1])
        pre = pre[:max(pre.rfind("\n"), 0)]
        return pre + " " + needle + "\n" + self.decode(self.ids[at + 1:end])

    def place_with_distractor(self, needle: str, distractor: str, context_length: int, depth: float,
                              dist_depth: float, shift: int = 0) -> str:
        """generate_w_needle_placement with a distractor: the distractor placed alone at its
        depth, the 49 characters before it (23 under 500 tokens) found in the needle's text,
        the distractor inserted there followed by a newline."""
        with_dist = self.place(distractor, context_length, dist_depth, shift)
        pos = with_dist.index(distractor)
        span = (max(pos - 25, 0), pos - 1) if context_length < 500 else (max(pos - 50, 0), pos - 1)
        text = self.place(needle, context_length, depth, shift)
        anchor = with_dist[span[0]:span[1]]
        if text.count(anchor) > 1:
            raise ValueError("Multiple spans found with same pre-distractor text (book_haystack raises IndexError)")
        loc = text.index(anchor) + (49 if context_length >= 500 else 23)
        return text[:loc] + " " + distractor + "\n" + text[loc:]


def fill(test: Test, haystack: str, character: str | None) -> str:
    """evaluate: the needle's and question's `{CHAR}` replaced, the template filled (str.format)."""
    question = test.question.replace("{CHAR}", character) if character is not None else test.question
    return test.task_template.format(haystack=haystack, question=question)


def needle_text(test: Test, character: str | None) -> str:
    return test.needle.replace("{CHAR}", character) if character is not None else test.needle


def gold(test: Test, character: str | None) -> list[str] | str:
    """The answers a response is checked against: [the drawn character] when the needle has
    {CHAR}, else the test's gold answers."""
    return [character] if character is not None else test.gold_answers


def evaluate_response(response: str, gold_answers: list[str] | str, metric: str = "contains") -> int:
    """_evaluate_response: EM (the stripped response is one of the answers), contains (an
    answer occurs in the response, case-sensitive), lastline_EM, lastline_contains (the same
    on the stripped response's last line). Gold answers given as a string are tested as the
    code tests them (`in` on the string)."""
    if metric == "EM":
        return int(response.strip() in gold_answers)
    if metric == "contains":
        return int(any(g in response for g in gold_answers))
    last = response.strip().split("\n")[-1]
    if metric == "lastline_EM":
        return int(last in gold_answers)
    if metric == "lastline_contains":
        return int(any(g in last for g in gold_answers))
    raise ValueError(f"Invalid metric: {metric}")


def summarize(scores: dict[int, float]) -> tuple[float | None, float | None, int | None]:
    """(base score, threshold, effective length) from each length's score (percent): the base
    is the mean of the 250, 500 and 1K scores that exist, the threshold 0.85 x base, the
    effective length the longest length whose score is at or above it (None without a base)."""
    base_values = [scores[n] for n in BASE_LENGTHS if n in scores and scores[n] is not None]
    if not base_values:
        return None, None, None
    base = sum(base_values) / len(base_values)
    threshold = THRESHOLD * base
    above = [n for n, v in scores.items() if v is not None and v >= threshold]
    return base, threshold, max(above) if above else None


def read_needle_set(text: str) -> list[Test]:
    return expand_tests(json.loads(text))
