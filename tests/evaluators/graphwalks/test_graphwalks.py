"""Graphwalks: the sound F1 (the headline) against an independent reading of NeMo-Gym's grader
and the card's literal F1 against an independent reading of the card, on crafted answers
(equal to the last digit); what the card's letter does with the first node and an empty list;
an all-wrong answer set scoring 0; the data checks, one run on a tiny model over crafted
parquet files in the hub's layout (never the real data) and `lctx score graphwalks`."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.main import main
from evaluators.errors import EvaluatorError
from evaluators.graphwalks import protocol
from evaluators.graphwalks.options import GraphwalksOptions
from evaluators.suite import run_task
from tests.helpers import points, tiny_model, typed

TRUTH = ["c9f0f895fb", "d3d9446802", "1679091c5a"]


def card_items(response: str) -> tuple[list[str], bool]:
    """The card's get_list (huggingface.co/datasets/openai/graphwalks, README.md, "Extraction
    and Grading"), read independently with string operations: the text after the last "\\n";
    "Final Answer:" must be on it; the match of `Final Answer: ?\\[.*\\]` runs from the first
    "Final Answer:" followed by an optional space and "[" to the line's last "]"; its two ends
    lose their "[" and "]" characters, the rest splits at "," into stripped, non-empty items."""
    line = response.rsplit("\n", 1)[-1]
    if "Final Answer:" not in line:
        return [], True
    start = 0
    while (start := line.find("Final Answer:", start)) >= 0:
        after = start + len("Final Answer:")
        bracket = after + 1 if line[after:after + 2] == " [" else after if line[after:after + 1] == "[" else -1
        end = line.rfind("]")
        if bracket >= 0 and end > bracket:
            whole = line[start:end + 1]
            while whole and whole[0] in "[]":
                whole = whole[1:]
            while whole and whole[-1] in "[]":
                whole = whole[:-1]
            return [p.strip() for p in whole.split(",") if p.strip()], False
        start += 1
    return [], True


def card_f1(response: str, truth: list[str]) -> float:
    """The card's grading lines: overlap of the item and truth sets; recall and precision 0
    for an empty set; F1 the harmonic mean, and 1 where recall + precision is 0."""
    sampled, gold = set(card_items(response)[0]), set(truth)
    both = len(sampled & gold)
    recall = both / len(gold) if gold else 0
    precision = both / len(sampled) if sampled else 0
    return 2 * recall * precision / (recall + precision) if recall + precision else 1


def sound_items(response: str) -> tuple[list[str], bool]:
    """NeMo-Gym's `_parse_node_list` (resources_servers/graphwalks/app.py), read independently
    with string operations: the response's lines, blank ones dropped; the last one must hold
    "Final Answer:", then any whitespace, "[", and a "]" later on the line (the last one); the
    text between them splits at "," into stripped, non-empty items."""
    lines = [x for x in response.split("\n") if x.strip()]
    if not lines:
        return [], True
    line = lines[-1]
    start = 0
    while (start := line.find("Final Answer:", start)) >= 0:
        after = start + len("Final Answer:")
        while after < len(line) and line[after].isspace():
            after += 1
        end = line.rfind("]")
        if line[after:after + 1] == "[" and end > after:
            return [p.strip() for p in line[after + 1:end].split(",") if p.strip()], False
        start += 1
    return [], True


def sound_ref(response: str, truth: list[str]) -> float:
    """NeMo-Gym's `_f1_score`: a parse failure 0; both sets empty 1; one empty 0; no common
    node 0; else 2PR / (P + R)."""
    items, failed = sound_items(response)
    answer, gold = set(items), set(truth)
    if failed:
        return 0.0
    if not answer and not gold:
        return 1.0
    both = len(answer & gold)
    if not answer or not gold or not both:
        return 0.0
    p, r = both / len(answer), both / len(gold)
    return 2 * p * r / (p + r)


ANSWERS = {
    "right": "Final Answer: [c9f0f895fb, d3d9446802, 1679091c5a]",
    "right, reordered": "Final Answer: [1679091c5a, c9f0f895fb, d3d9446802]",
    "no space after the colon": "Final Answer:[c9f0f895fb, d3d9446802, 1679091c5a]",
    "duplicate nodes": "Final Answer: [c9f0f895fb, d3d9446802, d3d9446802, 1679091c5a, 1679091c5a]",
    "one extra": "Final Answer: [c9f0f895fb, d3d9446802, 1679091c5a, eccbc87e4b]",
    "one right node": "Final Answer: [d3d9446802]",
    "wrong nodes": "Final Answer: [aaaaaaaaaa, bbbbbbbbbb]",
    "empty list": "Final Answer: []",
    "reasoning first": "BFS level 1: ...\nlevel 2: ...\nFinal Answer: [c9f0f895fb, d3d9446802, 1679091c5a]",
    "trailing newline (unparsable)": "Final Answer: [c9f0f895fb, d3d9446802, 1679091c5a]\n",
    "not on the last line (unparsable)": "Final Answer: [c9f0f895fb]\nI hope this helps.",
    "no brackets (unparsable)": "Final Answer: c9f0f895fb, d3d9446802",
    "empty response (unparsable)": "",
    "quoted nodes": "Final Answer: ['c9f0f895fb', 'd3d9446802', '1679091c5a']",
    "two lists on the line": "Final Answer: [c9f0f895fb] or [d3d9446802, 1679091c5a]",
    "think block": "<think>depth 2</think>\nFinal Answer: [c9f0f895fb, d3d9446802, 1679091c5a]",
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_sound_f1_is_nemo_gyms_and_the_literal_one_the_cards(case: str) -> None:
    response = ANSWERS[case]
    graded = protocol.grade(response, TRUTH)
    assert (graded.parsed, graded.parse_error) == sound_items(response)
    assert graded.f1 == sound_ref(response, TRUTH)
    assert (graded.card_parsed, graded.card_parse_error) == card_items(response)
    assert graded.f1_card_literal == card_f1(response, TRUTH)
    for truth in ([], ["d3d9446802"]):  # an empty truth, a single node
        again = protocol.grade(response, truth)
        assert (again.f1, again.f1_card_literal) == (sound_ref(response, truth), card_f1(response, truth))


def test_what_the_cards_letter_does() -> None:
    """The documented table (docs/protocols/mrcr_graphwalks.md): the first item keeps
    "Final Answer: [", so a right answer of three nodes scores 2/3 (2 of 3 found, 2 of 3
    items right), a right single node and every answer sharing nothing score 1 (`else 1`),
    "[]" reads as the item "Final Answer:"."""
    assert protocol.card_list(ANSWERS["right"]) == (["Final Answer: [c9f0f895fb", "d3d9446802", "1679091c5a"], False)
    assert protocol.grade(ANSWERS["right"], TRUTH).f1_card_literal == pytest.approx(2 / 3)
    assert protocol.grade("Final Answer: [c9f0f895fb]", ["c9f0f895fb"]).f1_card_literal == 1  # no overlap: `else 1`
    assert protocol.grade(ANSWERS["wrong nodes"], TRUTH).f1_card_literal == 1
    assert protocol.grade(ANSWERS["empty response (unparsable)"], TRUTH).f1_card_literal == 1
    assert protocol.card_list("Final Answer: []") == (["Final Answer:"], False)
    assert protocol.grade(ANSWERS["one extra"], TRUTH).f1_card_literal == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))


def test_the_sound_f1_on_what_the_card_gets_wrong() -> None:
    """The first node read cleanly, a parse failure 0, no common node 0, the empty truth
    answered empty 1 (and answered anything else 0)."""
    assert protocol.read_list(ANSWERS["right"]) == (TRUTH, False)
    assert protocol.grade(ANSWERS["right"], TRUTH).f1 == 1
    assert protocol.grade("Final Answer: [c9f0f895fb]", ["c9f0f895fb"]).f1 == 1
    assert protocol.grade(ANSWERS["wrong nodes"], TRUTH).f1 == 0
    assert protocol.grade(ANSWERS["empty response (unparsable)"], TRUTH).f1 == 0
    assert protocol.grade(ANSWERS["empty list"], TRUTH).f1 == 0
    assert protocol.read_list("Final Answer: []") == ([], False)
    assert protocol.grade("Final Answer: []", []).f1 == 1
    assert protocol.grade("no list at all", []).f1 == 0 and protocol.grade("no list at all", []).f1_card_literal == 1
    assert protocol.grade("Final Answer: [x]", []).f1 == 0
    assert protocol.grade(ANSWERS["trailing newline (unparsable)"], TRUTH).f1 == 1  # its last non-empty line
    assert protocol.grade(ANSWERS["one extra"], TRUTH).f1 == pytest.approx(6 / 7)


def test_an_all_wrong_answer_set_scores_0_where_the_cards_letter_gives_1() -> None:
    """Every kind of wrong answer at once: the headline is 0, the card's literal F1 1, and the
    counts say why (each row scored 1 by the card and below 1 by the sound F1)."""
    from evaluators.graphwalks.evaluator import typed

    wrong = ["Final Answer: [aaaaaaaaaa, bbbbbbbbbb]", "Final Answer: []", "", "I cannot tell.",
             "Final Answer: c9f0f895fb", "Final Answer: [c9f0f895fb]\nI hope this helps."]
    records = []
    for i, response in enumerate(wrong):
        g = protocol.grade(response, TRUTH)
        records.append({"problem_type": "bfs" if i % 2 else "parents", "bin": "128k_and_shorter", "n_truth": 3,
                        "beyond_context": False, "f1": g.f1, "f1_card_literal": g.f1_card_literal,
                        "parse_error": g.parse_error, "parsed": g.parsed, "overlap": g.overlap})
    result = typed(records)
    assert result.metric("overall").value == 0 and result.metric("overall").n == 6
    assert result.metric("f1_card_literal").value == 1
    assert {m: result.metric(m).value for m in protocol.COUNTS} == {
        "parse_errors": 4, "empty_answers": 1, "no_overlap": 1, "card_scored_1": 6}


# docs/protocols/mrcr_graphwalks.md's table: answer -> (sound F1 (lctx's headline), card F1 (f1_card_literal),
# lm-eval f1, lm-eval flexible_f1), truth [a1, b2, c3]
DOC_TABLE = {
    "Final Answer: [a1, b2, c3]": (1, 2 / 3, 1, 1),
    "Final Answer: [x9, y8]": (0, 1, 0, 0),
    "Final Answer: []": (0, 1, 0, 0),
    "Final Answer: [a1, b2, c3, d4]": (6 / 7, 4 / 7, 6 / 7, 6 / 7),
    "Final Answer: [a1, b2, b2, c3]": (1, 2 / 3, 1, 1),
    "Final Answer: [a1, b2, c3]\n": (1, 1, 1, 1),
    "Final Answer: [a1, b2, c3]\nDone.": (0, 1, 0, 1),
    "Final Answer: a1, b2, c3": (0, 1, 0, 0),
    "": (0, 1, 0, 0),
    "Final Answer: ['a1', 'b2', 'c3']": (0, 1, 1, 1),
    "<think>...</think>\nFinal Answer: [a1, b2, c3]": (1, 2 / 3, 1, 1),
}


def test_the_documented_table_against_lm_evals_port() -> None:
    """lm-eval 0.4.13's graphwalks utils.py (installed) run on the documented answers: its
    capture-group parser and F1 0 without overlap give other numbers than the card's letter."""
    import importlib.util

    import lm_eval

    path = Path(lm_eval.__file__).parent / "tasks" / "graphwalks" / "utils.py"
    spec = importlib.util.spec_from_file_location("lm_eval_graphwalks_utils", path)
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    truth = ["a1", "b2", "c3"]
    for answer, (sound, card, strict, flexible) in DOC_TABLE.items():
        theirs = utils.process_results({"answer_nodes": truth}, [answer])
        ours = protocol.grade(answer, truth)
        assert (ours.f1, ours.f1_card_literal) == pytest.approx((sound, card), abs=1e-12), answer
        assert (theirs["f1"], theirs["flexible_f1"]) == pytest.approx((strict, flexible), abs=1e-12), answer


def write_data(root: Path) -> None:
    def row(kind: str, nodes: list[str], edges: int) -> dict:
        graph = "\n".join(f"n{i:03d} -> n{i + 1:03d}" for i in range(edges))
        prompt = (f"You will be given a graph as a list of directed edges.\nThe graph has the following edges:\n{graph}"
                  f"\nOperation:\nFind the parents of node n004.\nFinal Answer:")
        return {"prompt": prompt, "answer_nodes": nodes, "problem_type": kind, "prompt_chars": len(prompt),
                "date_added": "04-12-2025"}

    (root / "graphwalks").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row("parents", ["n003"], 3), row("bfs", ["n002", "n003"], 4),
                                         row("parents", [], 2)]),
                   root / "graphwalks" / "graphwalks_128k_and_shorter.parquet")
    pq.write_table(pa.Table.from_pylist([row("bfs", ["n001"], 80)]),
                   root / "graphwalks" / "graphwalks_256k_to_1mil.parquet")


def test_missing_data_names_the_paths(tmp_path: Path) -> None:
    opts = GraphwalksOptions(sets=["256k_to_1mil"])
    [line] = opts.missing_files(tmp_path)
    assert str(tmp_path / "graphwalks" / "graphwalks_256k_to_1mil.parquet") in line
    assert "huggingface.co/datasets/openai/graphwalks" in line
    write_data(tmp_path)
    assert opts.missing_files(tmp_path) == []
    bad = tmp_path / "graphwalks" / "graphwalks_256k_to_1mil.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "answer": ["a"], "problem_type": "bfs", "prompt_chars": 1}]),
                   bad)
    from evaluators.graphwalks.data import read_set

    with pytest.raises(EvaluatorError, match=r"no column\(s\) \['answer_nodes'\]"):
        read_set(bad)


def test_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    """The 80-edge graph (about 1100 bytes) does not fit in a 512-token byte model: counted
    beyond the context. The rest go through the chat template, greedy, graded raw."""
    write_data(tmp_path / "data")
    loaded = tiny_model(tmp_path / "m", max_position_embeddings=512)
    loaded.tokenizer.chat_template = "{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}<a>"
    entry = run_task(loaded, {"name": "graphwalks", "max_new_tokens": 8}, tmp_path / "out", data_dir=tmp_path / "data")
    recs = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in recs) == ["graphwalks/128k_and_shorter/0", "graphwalks/128k_and_shorter/1",
                                            "graphwalks/128k_and_shorter/2", "graphwalks/256k_to_1mil/0"]
    far = next(r for r in recs if r["set"] == "256k_to_1mil")
    assert far["beyond_context"] and far["score"] is None
    ran = [r for r in recs if not r["beyond_context"]]
    truth = {0: ["n003"], 1: ["n002", "n003"], 2: []}
    for r in ran:
        assert r["f1"] == sound_ref(r["prediction"], truth[r["index"]])
        assert r["f1_card_literal"] == card_f1(r["prediction"], truth[r["index"]])
    result = typed(entry)
    assert entry["evaluator_version"] == "2"
    assert result.metric("overall").value == sum(r["f1"] for r in ran) / 3 and result.metric("overall").n == 3
    assert result.metric("f1_card_literal").value == sum(r["f1_card_literal"] for r in ran) / 3
    assert result.metric("beyond_context").value == 1 and result.metric("parents").n == 2
    assert points(entry, "f1", "bucket", problem_type="bfs")["128k_and_shorter"].n == 1
    assert points(entry, "beyond_context", "bucket")["256k_to_1mil"].value == 1
    assert [f["file"] for f in entry["data"]["files"]] == ["graphwalks/graphwalks_128k_and_shorter.parquet",
                                                           "graphwalks/graphwalks_256k_to_1mil.parquet"]
    assert entry["data"]["warnings"] == []


def test_problem_types_and_limit_select_rows(tmp_path: Path) -> None:
    from evaluators.graphwalks.evaluator import GraphwalksEvaluator
    from evaluators.registry import make_evaluator

    write_data(tmp_path / "data")
    ev = make_evaluator({"name": "graphwalks", "problem_types": "parents", "limit": 1}, data_dir=tmp_path / "data")
    assert isinstance(ev, GraphwalksEvaluator)
    ev.prepare(None)  # reading the files needs no model
    assert [s.id for s in ev.plan(None)] == ["graphwalks/128k_and_shorter/0"]  # the 1M file holds no parents row


def test_lctx_score_graphwalks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pred = tmp_path / "pred"
    pred.mkdir()
    cases = sorted(ANSWERS.items())
    lines = [json.dumps({"answer_nodes": TRUTH, "problem_type": "bfs" if i % 2 else "parents",
                         "data_file": "graphwalks_128k_and_shorter.parquet", "response": response})
             for i, (_, response) in enumerate(cases)]
    lines.append(json.dumps({"answer_nodes": TRUTH, "problem_type": "bfs", "beyond_context": True,
                             "data_file": "graphwalks_256k_to_1mil.parquet"}))
    (pred / "m.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["score", "graphwalks", "--pred-dir", str(pred)]) == 0
    table = json.loads((pred / "result.json").read_text())["m"]
    expected = [sound_ref(r, TRUTH) for _, r in cases]
    literal = [card_f1(r, TRUTH) for _, r in cases]
    assert table["overall"]["all"]["f1"] == sum(expected) / len(expected)
    assert table["overall"]["all"]["f1_card_literal"] == sum(literal) / len(literal)
    assert table["overall"]["all"]["parse_errors"] == sum(sound_items(r)[1] for _, r in cases) == 3
    assert table["overall"]["all"]["card_scored_1"] == sum(c == 1 and s < 1 for s, c in zip(expected, literal, strict=True))
    assert table["bin"]["256k_to_1mil"] == {"f1": None, "f1_card_literal": None, "n": 0, "beyond": 1,
                                           "parse_errors": 0, "empty_answers": 0, "no_overlap": 0,
                                           "card_scored_1": 0}
    bfs = [e for i, e in enumerate(expected) if i % 2]
    assert table["problem_type"]["bfs"]["f1"] == sum(bfs) / len(bfs)


HEADER = ("You will be given a graph as a list of directed edges. If asked for a breadth-first search (BFS), only "
          "return the nodes that are reachable at {depth}, do not return the starting node.\n"
          "Example 2:\nOperation:\nFind the parents of node abcd.\nFinal Answer: []\n"
          "The graph has the following edges:\nn001 -> n002\nn002 -> n002\nOperation:\n")


def release(old: bool) -> list[dict]:
    """A BFS row in the first release's wording or the fix's, and a parents row whose truth
    holds the node it asks about (first release) or not (fixed)."""
    depth = "that depth" if old else "exactly that depth (not nodes at intermediate depths)"
    ask = "Perform a BFS from node n001 with depth 1." if old else \
        "Perform a BFS from node n001 and return only the nodes at exactly depth 1."
    bfs = HEADER.format(depth=depth) + ask
    parents = HEADER.format(depth=depth) + "Find the parents of node n002."
    return [{"prompt": bfs, "answer_nodes": ["n002"], "problem_type": "bfs", "prompt_chars": len(bfs)},
            {"prompt": parents, "answer_nodes": ["n001", "n002"] if old else ["n001"], "problem_type": "parents",
             "prompt_chars": len(parents)}]


def test_files_from_before_the_fix_are_told_by_what_it_changed(tmp_path: Path) -> None:
    """The old BFS wording is warned of at submission (the first BFS prompt read) and in the
    result, with the parents rows whose truth holds the node asked about; the fixed files
    raise nothing, and the two are different data revisions."""
    from evaluators.data import read_files
    from evaluators.provenance import data_record
    from evaluators.registry import make_evaluator
    from evaluators.run import planned_samples

    records, submitted = {}, {}
    for name in ("old", "fixed"):
        root = tmp_path / name
        (root / "graphwalks").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(release(name == "old")),
                       root / "graphwalks" / "graphwalks_128k_and_shorter.parquet")
        options = GraphwalksOptions(sets=["128k_and_shorter"])
        submitted[name] = options.data_warnings(root)
        ev = make_evaluator({"name": "graphwalks", "sets": ["128k_and_shorter"]}, data_dir=root)
        planned_samples(ev, None)  # reading the files needs no model
        records[name] = data_record(ev.options, root, ev.data_log, read_files(ev.options, root))
    [word] = submitted["old"]
    assert word.startswith("graphwalks_128k_and_shorter.parquet: its bfs prompts ask for the nodes at \"depth N\" "
                           "without \"exactly\"") and "2026-02-27" in word
    bfs, parents = records["old"]["warnings"]
    assert bfs.startswith("graphwalks_128k_and_shorter.parquet: 1 of 1 bfs prompts ask for the nodes at")
    assert parents.startswith("graphwalks_128k_and_shorter.parquet: 1 parents rows have the node they ask about in "
                              "their truth (first: row 1)")
    assert submitted["fixed"] == [] and records["fixed"]["warnings"] == []
    assert records["old"]["revision"] != records["fixed"]["revision"]
