"""A sample's prompt rebuilt from its record is the prompt the model read: it tokenizes to
the very ids of the sample's request (passkey, and needle with a haystack file), and holds
its needle once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from checkpoints.tokenizer import ByteTokenizer
from evaluators.passkey.evaluator import NeedleEvaluator, PasskeyEvaluator
from service.core.errors import NotFound
from service.prompts import find_record, rebuild_prompt

LOADED = SimpleNamespace(tokenizer=ByteTokenizer())  # build() reads only the tokenizer of the loaded model


def built_records(evaluator) -> list[tuple[dict, tuple[int, ...]]]:
    evaluator.prepare(LOADED)
    out = []
    for sample in evaluator.plan(LOADED):
        built = evaluator.build(LOADED, sample)
        out.append(({"id": sample.id, **built.record}, tuple(built.request.prompt_ids)))
    return out


def test_passkey_prompts_rebuild_to_the_ids_the_model_read() -> None:
    options = PasskeyEvaluator.validate({"lengths": [300, 700], "trials": 3, "seed": 5})
    for record, ids in built_records(PasskeyEvaluator(options)):
        prompt, needle = rebuild_prompt(options.as_spec(), record, None)
        assert tuple(LOADED.tokenizer.encode(prompt)) == ids, record["id"]
        assert prompt.count(needle) == 1 and str(record["key"]) in needle


def test_needle_prompts_with_a_haystack_file_rebuild_to_the_ids_the_model_read(tmp_path: Path) -> None:
    (tmp_path / "story.txt").write_text("Once there was a fox. It ran far! Did it stop? No.\nThe end came late. " * 20)
    options = NeedleEvaluator.validate({"lengths": [400], "depths": [0, 37, 100], "haystack_file": "story.txt"})
    for record, ids in built_records(NeedleEvaluator(options, tmp_path)):
        prompt, needle = rebuild_prompt(options.as_spec(), record, tmp_path)
        assert tuple(LOADED.tokenizer.encode(prompt)) == ids, record["id"]
        assert prompt.count(needle) == 1 and "fox" in prompt


def test_what_cannot_be_rebuilt_is_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="prompts are rebuilt for needle, passkey"):
        rebuild_prompt({"name": "longbench"}, {"id": "x"}, None)
    with pytest.raises(NotFound, match="lacks what its prompt is rebuilt from"):
        rebuild_prompt({"name": "passkey"}, {"id": "x", "key": 7}, None)
    options = NeedleEvaluator.validate({"lengths": [400], "depths": [50], "haystack_file": "gone.txt"})
    with pytest.raises(NotFound, match="gone.txt not found"):
        rebuild_prompt(options.as_spec(), {"id": "x", "key": 7, "haystack_chars": 10, "depth_percent": 50}, tmp_path)


def test_the_newest_record_of_a_sample_is_found(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"id": "a", "key": 1}\n{"id": "b", "key": 2}\n{"id": "a", "key": 3}\n{"id": "a", "ke')
    assert find_record(tmp_path, "a")["key"] == 3
    (tmp_path / "units").mkdir()  # a running unit's own file is read too
    (tmp_path / "units" / "u00000of00002-ab.jsonl").write_text('{"id": "c", "key": 4}\n')
    assert find_record(tmp_path, "c")["key"] == 4
    with pytest.raises(NotFound, match="no sample 'd' recorded"):
        find_record(tmp_path, "d")
