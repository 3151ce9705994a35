"""Graphwalks' protocol as the dataset card (huggingface.co/datasets/openai/graphwalks,
README.md, "Extraction and Grading") gives it: the prompt supplied as a user message, the
answer list read by its `get_list` from the response's last line, and the set F1 of its
grading lines. Written from reading the card, not copied, and kept to its letter where the
letter is surprising (docs/protocols/mrcr_graphwalks.md shows it on crafted answers):

- the list is `re.search(r"Final Answer: ?\\[.*\\]", line).group(0)` — the whole match,
  "Final Answer: [" included — with only "[" and "]" stripped from its two ends, split at
  ","; so the first item keeps "Final Answer: [" in front of it and never equals a node, and
  an empty list "Final Answer: []" reads as the one item "Final Answer:";
- F1 is `2 * recall * precision / (recall + precision)`, and 1 where recall + precision is 0:
  an answer sharing no node with the truth, an empty one and an unparsable one all score 1.
No torch: `lctx score graphwalks` and the tests use it alone."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_LIST = re.compile(r"Final Answer: ?\[.*\]")


def get_list(response: str) -> tuple[list[str], bool]:
    """The card's `get_list`: (items, parse error). The last line after splitting at "\\n"
    (a response ending in a newline has an empty last line: error); no "Final Answer:" on it,
    or no bracketed list after it: ([], True)."""
    line = response.split("\n")[-1]
    if "Final Answer:" not in line:
        return [], True
    found = _LIST.search(line)
    if found is None:
        return [], True
    items = (item.strip() for item in found.group(0).strip("[]").split(","))
    return [item for item in items if item], False


@dataclass(frozen=True)
class Graded:
    f1: float
    recall: float
    precision: float
    overlap: int
    parsed: list[str]
    parse_error: bool


def grade(response: str, answer_nodes: Iterable[str]) -> Graded:
    """The card's grading lines on `get_list`'s items as a set against the truth as a set."""
    parsed, error = get_list(response)
    sampled, truth = set(parsed), set(answer_nodes)
    overlap = len(sampled & truth)
    recall = overlap / len(truth) if len(truth) > 0 else 0
    precision = overlap / len(sampled) if len(sampled) > 0 else 0
    f1 = 2 * (recall * precision) / (recall + precision) if recall + precision > 0 else 1
    return Graded(float(f1), float(recall), float(precision), overlap, parsed, error)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def table(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """F1 of graded rows (`f1` a float; rows with `beyond_context` counted apart): overall,
    per problem type, per length bin (`bin`: the row's file), per problem type x bin, and per
    bin of the model's own tokens (`own_bin`, where rows carry it). Each cell is {"f1": mean or
    None, "n", "beyond", "parse_errors", "no_overlap_scored_1"}: the last counts parsed answers
    sharing no node with a non-empty truth, which the card's `else 1` scores 1 (unparsable
    ones, scored 1 the same way, are the parse errors)."""
    cells: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"f1": [], "beyond": 0, "parse_errors": 0, "no_overlap_scored_1": 0})
    for r in rows:
        keys = [("overall", "all"), ("problem_type", r["problem_type"]), ("bin", r["bin"]),
                (f"problem_type={r['problem_type']}", r["bin"])]
        if r.get("own_bin"):
            keys.append(("own_bin", r["own_bin"]))
        for key in keys:
            c = cells[key]
            if r.get("beyond_context"):
                c["beyond"] += 1
                continue
            c["f1"].append(float(r["f1"]))
            c["parse_errors"] += bool(r["parse_error"])
            c["no_overlap_scored_1"] += bool(not r["parse_error"] and r["overlap"] == 0 and r["n_truth"] > 0)
    out: dict[str, Any] = defaultdict(dict)
    for (group, key), c in sorted(cells.items()):
        out[group][key] = {"f1": _mean(c["f1"]), "n": len(c["f1"]), "beyond": c["beyond"],
                           "parse_errors": c["parse_errors"], "no_overlap_scored_1": c["no_overlap_scored_1"]}
    return dict(out)
