"""Crafted source data for RULER v2's generators in the layouts `sources` reads (never MMLU's
or HotpotQA's own text) and RULER's word-level tokenizer (one token per word or punctuation run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.evaluators.ruler.conftest import word_tokenizer  # noqa: F401 - the shared session fixture


def mmlu_rows(n: int, start: int) -> list[dict]:
    return [{"question": f"What is {i} times\n two?", "subject": "math", "answer": i % 4,
             "choices": [f"{2 * i}", f"{2 * i + 1}", f"{2 * i + 2}", f"{i}  apples"]} for i in range(start, start + n)]


def hotpot(n: int, tag: str) -> list[dict]:
    """HotpotQA's file layout: ten documents per question, two of them supporting."""
    return [{"_id": f"{tag}{q}", "question": f"Which town has bridge {tag}{q}?", "answer": f"Town{q}", "type": "bridge",
             "level": "easy", "supporting_facts": [[f"{tag} {q}-1", 0], [f"{tag} {q}-4", 1], [f"{tag} {q}-4", 0]],
             "context": [[f"{tag} {q}-{k}", [f"Sentence one of {tag} {q}-{k}. ", f"Bridge {q} is in Town{q + k}."]]
                         for k in range(10)]} for q in range(n)]


@pytest.fixture(scope="session")
def source_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ruler2-sources")
    (d / "ruler2").mkdir()
    (d / "ruler2" / "mmlu_test.jsonl").write_text("\n".join(json.dumps(r) for r in mmlu_rows(12, 0)) + "\n")
    (d / "ruler2" / "mmlu_auxiliary_train.jsonl").write_text("\n".join(json.dumps(r) for r in mmlu_rows(150, 100)))
    (d / "hotpotqa.json").write_text(json.dumps(hotpot(6, "Dev")))  # beside RULER's, in the data directory itself
    (d / "ruler2" / "hotpot_train_v1.1.json").write_text(json.dumps(hotpot(40, "Train")))
    return d
