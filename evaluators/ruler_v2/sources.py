"""The source data RULER v2's generators draw from (docs/protocols/ruler_v2.md, "Generation"),
read from the data directory; nothing is downloaded.

- mk_niah_basic / mv_niah_basic: wonderwords' bundled noun and adjective lists (RULER's
  `niah_words`), no file.
- the MMLU tasks (mk/mv_niah easy..hard): `cais/mmlu` config `all`, its `test` split (the
  needles) and `auxiliary_train` split (the haystack), as JSONL in the dataset's own fields
  (`question`, `choices`: four strings, `answer`: 0-3), in the dataset's order.
- the qa tasks: HotpotQA distractor, the dev file (the needles: RULER's hotpotqa.json) and the
  train file (the haystack), in the files' own layout (`question`, `answer`, `context`:
  [[title, [sentence, ...]], ...], `supporting_facts`: [[title, sentence id], ...]).

Files are looked for in `<data dir>/ruler2/` and then `<data dir>/`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from evaluators.data import first_file, suite_records
from evaluators.errors import EvaluatorError

MMLU_TEST, MMLU_AUX = "mmlu_test.jsonl", "mmlu_auxiliary_train.jsonl"
HOTPOT_DEV, HOTPOT_TRAIN = "hotpotqa.json", "hotpot_train_v1.1.json"
HOWTO = {
    MMLU_TEST: "write cais/mmlu's test split as JSONL: python -c \"import datasets; datasets.load_dataset('cais/mmlu', "
               "'all')['test'].to_json('mmlu_test.jsonl')\"",
    MMLU_AUX: "write cais/mmlu's auxiliary_train split as JSONL: python -c \"import datasets; datasets.load_dataset("
              "'cais/mmlu', 'all')['auxiliary_train'].to_json('mmlu_auxiliary_train.jsonl')\"",
    HOTPOT_DEV: "download HotpotQA dev distractor, http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json, "
                "saved as hotpotqa.json (the file RULER reads)",
    HOTPOT_TRAIN: "download HotpotQA train, http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_train_v1.1.json",
}
FAMILY_FILES = {"niah": (), "mmlu": (MMLU_TEST, MMLU_AUX), "qa": (HOTPOT_DEV, HOTPOT_TRAIN)}
LETTERS = "ABCD"
_SPACES = re.compile(r"\s+")


def candidates(data_dir: Path | None, name: str) -> list[Path]:
    return [] if data_dir is None else [Path(data_dir) / "ruler2" / name, Path(data_dir) / name]


def find(data_dir: Path | None, name: str) -> Path:
    return first_file(candidates(data_dir, name), f"ruler_v2: {name}", HOWTO[name])


# --- MMLU -------------------------------------------------------------------------------

@dataclass(frozen=True)
class McItem:
    """prepare_mmlu's item: the question with its four options on one line (every whitespace
    run one space), the solution shown in few-shot examples and the answer letter."""

    question: str
    solution: str
    answer: str


def _mmlu_item(row: dict[str, Any], where: str) -> McItem:
    q, choices, answer = row.get("question"), row.get("choices"), row.get("answer")
    if not (isinstance(q, str) and isinstance(choices, list) and len(choices) == 4
            and all(isinstance(c, str) for c in choices) and isinstance(answer, int) and not isinstance(answer, bool)
            and 0 <= answer < 4):
        raise EvaluatorError(f"{where}: an MMLU row is {{question: str, choices: [4 strings], answer: 0-3}}; "
                             f"{HOWTO[MMLU_TEST]}")
    text = q + "".join(f"\n{LETTERS[i]}. {c}" for i, c in enumerate(choices))
    letter = LETTERS[answer]
    return McItem(_SPACES.sub(" ", text), " \\boxed{" + letter + "}", letter)


@cache
def mmlu(path: Path) -> tuple[McItem, ...]:
    """An MMLU split's items in file order."""
    return tuple(suite_records(path, HOWTO[MMLU_TEST], _mmlu_item, what="an MMLU row"))


# --- HotpotQA ---------------------------------------------------------------------------

@dataclass(frozen=True)
class QaNeedle:
    """prepare_qa's needle: the question, its answers, the supporting documents (`context`)
    and the question's other documents (`distractor`), each `title\\n` + its sentences joined."""

    question: str
    answers: tuple[str, ...]
    context: tuple[str, ...]
    distractor: tuple[str, ...]


def _hotpot(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EvaluatorError(f"ruler_v2: {path} is not readable JSON ({e}); {HOWTO[HOTPOT_DEV]}") from None
    if not isinstance(data, list):
        raise EvaluatorError(f"ruler_v2: {path} is not a HotpotQA file (a JSON list of questions)")
    return data


def _docs(d: dict[str, Any]) -> list[tuple[str, str]]:
    return [(t, f"{t}\n{''.join(s)}") for t, s in d["context"]]


@cache
def hotpot_haystack(path: Path) -> tuple[str, ...]:
    """Every distinct document of the train file. prepare_qa keeps `list(set(...))`, whose order
    changes with Python's string hash seed from one run to the next; lctx sorts them."""
    try:
        return tuple(sorted({doc for d in _hotpot(path) for _, doc in _docs(d)}))
    except (KeyError, TypeError, ValueError) as e:
        raise EvaluatorError(f"ruler_v2: {path} is not in HotpotQA's layout (context: [[title, [sentence, ...]], "
                             f"...]): {e}; {HOWTO[HOTPOT_TRAIN]}") from None


@cache
def hotpot_needles(path: Path) -> tuple[QaNeedle, ...]:
    """The dev file's questions in file order, documents split by whether their title is a
    supporting fact's (prepare_qa's filter on the answer list keeps every question: the list
    always holds the one answer)."""
    try:
        out = []
        for d in _hotpot(path):
            gold = {t for t, _ in d["supporting_facts"]}
            docs = _docs(d)
            if not (isinstance(d["question"], str) and isinstance(d["answer"], str)):
                raise ValueError("question and answer must be strings")
            out.append(QaNeedle(d["question"], (d["answer"],), tuple(doc for t, doc in docs if t in gold),
                                    tuple(doc for t, doc in docs if t not in gold)))
    except (KeyError, TypeError, ValueError) as e:
        raise EvaluatorError(f"ruler_v2: {path} is not in HotpotQA's layout (question, answer, context, "
                             f"supporting_facts): {e}; {HOWTO[HOTPOT_DEV]}") from None
    return tuple(out)
