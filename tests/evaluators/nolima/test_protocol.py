"""NoLiMa against an independent reading of its code (adobe-research/NoLiMa 7532e4e) on a
crafted needle set and crafted books (none of NoLiMa's data, which is under the Adobe
Research License): run_tests.py's expansion, evaluate's draws, book_haystack's placement, every
metric of _evaluate_response, the base score and effective length, and `lctx score nolima`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli.main import main
from evaluators.nolima import protocol

NEEDLE_SET = [{
    "id": "0401_x", "system_prompt": "ignored", "character_set": ["Yuki", "Stuart", "Katie"],
    "needle": "Actually, {CHAR} lives next to the {1}.",
    "questions": {"onehop": "Which character has been to {2}?", "twohop": "Who was near {1} and {2}?"},
    "tests": {"T01": {"input_args": ["Kiasma museum", "Helsinki"]}},
    "distractors": {"onehop": "There was an {1} in the text.", "twohop": "Near {2} we stood."},
}, {
    "id": "0502", "needle": "The code is {1}.", "questions": {"direct": "What is the code?"},
    "tests": {"T01": {"input_args": ["swordfish"], "gold_answers": ["swordfish"]}},
}]


def test_expansion_as_run_tests() -> None:
    tests = protocol.expand_tests(NEEDLE_SET)
    assert [t.name for t in tests] == ["0401_x_T01_onehop", "0401_x_T01_twohop", "0502_T01_direct"]
    one, two, direct = tests
    assert one.needle == "Actually, {CHAR} lives next to the Kiasma museum."
    assert one.question == "Which character has been to Helsinki?"
    # BUG (followed): each placeholder is replaced in the original question, so only the last one sticks
    assert two.question == "Who was near {1} and Helsinki?"
    assert one.distractor == "There was an Kiasma museum in the text." and two.distractor == "Near Helsinki we stood."
    assert one.seed == 42 + 401 and direct.seed == 42 + 502 and direct.gold_answers == ["swordfish"]
    assert one.gold_answers == "" and direct.character_set is None
    assert one.task_template == protocol.DEFAULT_TASK_TEMPLATE
    with pytest.raises(ValueError, match="four digits"):
        protocol.expand_tests([{**NEEDLE_SET[1], "id": "ab"}])


def test_draws_replay_evaluates_numpy_stream() -> None:
    test = protocol.expand_tests(NEEDLE_SET)[0]
    depth_list = [float(d) / 100 for d in np.linspace(0, 100, 26)]
    assert protocol.depths() == depth_list
    got = protocol.draws(test, 443 + 2, depth_list, 1000)
    np.random.seed(445)  # the reading: evaluate seeds the global stream, then per depth choice then uniform
    for depth, d in zip(depth_list, got, strict=True):
        assert d.character == str(np.random.choice(["Yuki", "Stuart", "Katie"]))
        u = np.random.uniform(0, max(0, depth - 0.4) + max(0, 1 - (depth + 0.4)))
        left = max(0, depth - 0.4)
        assert d.distractor_depth == pytest.approx(depth + 0.2 + (u - left) if u > left else u + 0.2)
    short = protocol.draws(test, 445, depth_list, 250)
    assert [d.distractor_depth for d in short[:3]] == [0.7, 0.7, 0.7] and short[-1].distractor_depth == 0.6
    assert [d.character for d in short] == [d.character for d in got]  # the stream does not depend on the length


def char_haystack(text: str) -> protocol.Haystack:
    return protocol.Haystack(text, lambda s: [ord(c) for c in s], lambda ids: "".join(chr(i) for i in ids))


def test_placement_as_book_haystack() -> None:
    book = "aaaa\nbbbb\ncccc\ndddd\neeee\nffff\n"  # newlines at 4, 9, 14, 19, 24, 29
    hay = char_haystack(book)
    assert list(hay.valid) == [0, 4, 9, 14, 19, 24, 29]
    # depth 0.5 of 10 tokens: the first newline with pos/11 >= 0.5 is 9; start 9 - 5 = 4, end 14
    # pre = book[4:10] = "\nbbbb\n" cut at its last newline -> "\nbbbb"; post = book[10:14] = "cccc"
    assert hay.place("NEEDLE", 10, 0.5) == "\nbbbb NEEDLE\ncccc"
    # depth 0: position 0, start 0; pre = book[0:1] = "a" has no newline -> "" (rfind -1 -> 0), post =
    # book[1:10]: the book's first character is dropped (position 0 is taken for a newline)
    assert hay.place("N", 10, 0.0) == " N\naaa\nbbbb\n"
    with pytest.raises(ValueError, match="too short"):
        hay.place("N", 100, 0.5)


def test_distractor_is_inserted_49_characters_after_its_anchor() -> None:
    lines = [f"line number {i:03d} of the crafted book" for i in range(60)]
    hay = char_haystack("\n".join(lines) + "\n")
    text = hay.place_with_distractor("NEEDLE", "DISTRACTOR", 600, 0.2, 0.8)
    plain = hay.place("NEEDLE", 600, 0.2)
    alone = hay.place("DISTRACTOR", 600, 0.8)
    pos = alone.index("DISTRACTOR")
    anchor = alone[pos - 50:pos - 1]
    loc = plain.index(anchor) + 49
    assert text == plain[:loc] + " DISTRACTOR\n" + plain[loc:]


@pytest.mark.parametrize(("response", "gold", "metric", "want"), [
    ("Yuki", ["Yuki"], "EM", 1), ("  Yuki \n", ["Yuki"], "EM", 1), ("It is Yuki", ["Yuki"], "EM", 0),
    ("It is Yuki.", ["Yuki"], "contains", 1), ("it is yuki", ["Yuki"], "contains", 0),
    ("Thinking...\nYuki", ["Yuki"], "lastline_EM", 1), ("Yuki\nno idea", ["Yuki"], "lastline_EM", 0),
    ("Hmm\nSo: Yuki.", ["Yuki"], "lastline_contains", 1), ("Yuki\nSo: none", ["Yuki"], "lastline_contains", 0),
    ("anything", "", "contains", 0),  # a test without gold answers: "" as the code keeps it
])
def test_every_metric(response: str, gold, metric: str, want: int) -> None:
    assert protocol.evaluate_response(response, gold, metric) == want


def test_base_score_and_effective_length() -> None:
    scores = {250: 100.0, 500: 90.0, 1000: 80.0, 2000: 80.0, 4000: 60.0, 8000: 77.0, 16000: 10.0}
    base, threshold, effective = protocol.summarize(scores)
    assert base == pytest.approx(90.0) and threshold == pytest.approx(76.5) and effective == 8000
    assert protocol.summarize({2000: 50.0}) == (None, None, None)


def test_lctx_score_gathers_the_result_files(tmp_path: Path) -> None:
    def write(name: str, length: int, responses: list[str], needle: str = "{CHAR} lives there", **extra) -> None:
        results = [{"response": r, "selected_character": "Yuki", "metric": 1} for r in responses]
        folder = tmp_path / "CL" / name.split("_book_")[1][:12]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps({"context_length": length, "metric": "contains",
                                                         "needle": needle, "gold_answers": "", "results": results,
                                                         **extra}))

    write("m_book_0401_T01_onehop_1", 250, ["Yuki", "Yuki"])
    write("m_book_0401_T01_twohop_1", 250, ["Yuki", "no"])
    write("m_book_0401_T01_onehop_2", 1000, ["Yuki", "no", "no"])
    write("m_book_0502_T01_direct_1", 1000, ["x"], needle="code", gold_answers=["x"])
    assert main(["score", "nolima", "--pred-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    # per file the mean rounded to 4 decimals (1/3 -> 0.3333), per length the mean over files, in percent
    assert result["accuracy"] == {"250": 75.0, "1000": pytest.approx(33.33)}
    assert result["base_score"] == pytest.approx((75.0 + 33.33) / 2) and result["effective_length"] == 250
    assert result["stored_metric_differs"] == 3  # the stored 1s of the "no" answers are scored again
    assert main(["score", "nolima", "--pred-dir", str(tmp_path), "--include-direct"]) == 0
    assert json.loads((tmp_path / "result.json").read_text())["accuracy"]["1000"] == pytest.approx((33.33 + 100) / 2)
