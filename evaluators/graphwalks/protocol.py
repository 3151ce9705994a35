"""Graphwalks' grading (docs/protocols/mrcr_graphwalks.md, "Parser and F1"): the headline is a
sound set F1, and the dataset card's code (huggingface.co/datasets/openai/graphwalks, README.md,
"Extraction and Grading") is kept beside it to the letter, each written from reading its source,
not copied.

The sound F1 follows NeMo-Gym's graphwalks resources server (`resources_servers/graphwalks/app.py`,
Apache-2.0, itself ported from NeMo-Skills' evaluator), whole, not a blend:

- the list is read from the last non-empty line of the stripped response, as the capture group of
  `Final Answer:\\s*\\[(.*)\\]` split at "," into stripped, non-empty items: the first node is read
  cleanly, "Final Answer: []" is the empty list; no such line is a parse failure;
- a parse failure scores 0; an empty truth answered with the empty list 1; an empty answer or an
  empty truth alone 0; an answer sharing no node with the truth 0; else the harmonic mean of
  precision and recall over the two sets.

The card's letter (`card_list`, `card_f1`), kept as `f1_card_literal`: the last line after
splitting at "\\n"; the whole match of `Final Answer: ?\\[.*\\]` with only "[" and "]" stripped
from its ends, so the first item keeps "Final Answer: [" and never equals a node and "[]" reads as
the item "Final Answer:"; F1 1 wherever recall + precision is 0 — a wrong, empty or unparsable
answer scores 1. No torch: `lctx score graphwalks` and the tests use it alone."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_CARD_LIST = re.compile(r"Final Answer: ?\[.*\]")
_LIST = re.compile(r"Final Answer:\s*\[(.*)\]")


def read_list(response: str) -> tuple[list[str], bool]:
    """(items, parse failure) as the sound F1 reads them (NeMo-Gym's `_parse_node_list`): the
    last non-empty line of the stripped response; the bracketed list after "Final Answer:" on
    it, the brackets' content split at ","; "[]" gives ([], False); no list: ([], True)."""
    lines = [line for line in response.strip().split("\n") if line.strip()]
    found = _LIST.search(lines[-1]) if lines else None
    if found is None:
        return [], True
    return [item.strip() for item in found.group(1).split(",") if item.strip()], False


def sound_f1(parsed: list[str], failed: bool, truth: set[str]) -> float:
    """0 for a parse failure; 1 for an empty truth answered empty; 0 where either set is empty
    or they share nothing; else 2PR / (P + R)."""
    answer = set(parsed)
    if failed or not answer or not truth:
        return 1.0 if not failed and not answer and not truth else 0.0
    both = len(answer & truth)
    if both == 0:
        return 0.0
    precision, recall = both / len(answer), both / len(truth)
    return 2 * precision * recall / (precision + recall)


def card_list(response: str) -> tuple[list[str], bool]:
    """The card's `get_list`: (items, parse error). The last line after splitting at "\\n"
    (a response ending in a newline has an empty last line: error); no "Final Answer:" on it,
    or no bracketed list after it: ([], True)."""
    line = response.split("\n")[-1]
    if "Final Answer:" not in line:
        return [], True
    found = _CARD_LIST.search(line)
    if found is None:
        return [], True
    items = (item.strip() for item in found.group(0).strip("[]").split(","))
    return [item for item in items if item], False


def card_f1(items: list[str], truth: set[str]) -> float:
    """The card's grading lines: recall and precision over the sets (0 for an empty one), F1
    their harmonic mean and 1 where recall + precision is 0."""
    sampled = set(items)
    overlap = len(sampled & truth)
    recall = overlap / len(truth) if truth else 0
    precision = overlap / len(sampled) if sampled else 0
    return float(2 * recall * precision / (recall + precision) if recall + precision > 0 else 1)


@dataclass(frozen=True)
class Graded:
    f1: float  # the sound F1: the headline's
    recall: float
    precision: float
    overlap: int
    parsed: list[str]
    parse_error: bool
    empty_answer: bool  # "Final Answer: []" read
    f1_card_literal: float
    card_parsed: list[str]
    card_parse_error: bool


def grade(response: str, answer_nodes: Iterable[str]) -> Graded:
    """The response graded both ways against the truth as a set."""
    truth = set(answer_nodes)
    parsed, failed = read_list(response)
    answer = set(parsed)
    overlap = len(answer & truth)
    card_items, card_error = card_list(response)
    return Graded(sound_f1(parsed, failed, truth), overlap / len(truth) if truth else 0.0,
                  overlap / len(answer) if answer else 0.0, overlap, parsed, failed, not failed and not answer,
                  card_f1(card_items, truth), card_items, card_error)


# What each cell of `table` counts beside its two means: why the card's letter and the sound F1 part.
COUNTS = {
    "parse_errors": "responses whose last non-empty line holds no \"Final Answer: [...]\": scored 0",
    "empty_answers": "answers \"Final Answer: []\": 1 against an empty truth, else 0",
    "no_overlap": "answers sharing no node with a non-empty truth: scored 0",
    "card_scored_1": "rows the card's letter scores 1 that the sound F1 scores below 1 (its `else 1` on a wrong, "
                     "empty or unparsable answer)",
}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def counts(row: dict[str, Any]) -> dict[str, bool]:
    """Which of COUNTS a graded row (a record: f1, f1_card_literal, parse_error, parsed, overlap,
    n_truth) falls in."""
    parsed = not row["parse_error"]
    return {"parse_errors": not parsed,
            "empty_answers": parsed and not row["parsed"],
            "no_overlap": parsed and bool(row["parsed"]) and row["overlap"] == 0 and row["n_truth"] > 0,
            "card_scored_1": row["f1_card_literal"] == 1 and row["f1"] < 1}


def table(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The F1s of graded rows (rows with `beyond_context` counted apart): overall, per problem
    type, per length bin (`bin`: the row's file), per problem type x bin, and per bin of the
    model's own tokens (`own_bin`, where rows carry it). Each cell is {"f1": the sound F1's mean
    or None, "f1_card_literal": the card's, "n", "beyond", and each of COUNTS}."""
    cells: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"f1": [], "f1_card_literal": [], "beyond": 0, **dict.fromkeys(COUNTS, 0)})
    for r in rows:
        keys = [("overall", "all"), ("problem_type", r["problem_type"]), ("bin", r["bin"]),
                (f"problem_type={r['problem_type']}", r["bin"])]
        if r.get("own_bin"):
            keys.append(("own_bin", r["own_bin"]))
        marks = None if r.get("beyond_context") else counts(r)
        for key in keys:
            c = cells[key]
            if marks is None:
                c["beyond"] += 1
                continue
            c["f1"].append(float(r["f1"]))
            c["f1_card_literal"].append(float(r["f1_card_literal"]))
            for name, hit in marks.items():
                c[name] += hit
    out: dict[str, Any] = defaultdict(dict)
    for (group, key), c in sorted(cells.items()):
        out[group][key] = {"f1": _mean(c["f1"]), "f1_card_literal": _mean(c["f1_card_literal"]), "n": len(c["f1"]),
                           "beyond": c["beyond"], **{name: c[name] for name in COUNTS}}
    return dict(out)
