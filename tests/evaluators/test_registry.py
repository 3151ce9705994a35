"""The configuration hash is the identity of recorded samples (a rerun skips the samples
recorded under the same hash), so it must not move when the code around it changes: these
values were computed before options became typed end to end (#39 item 1) and pin it for
every task, with its defaults and with options that change it (or, being selection only,
do not)."""

from __future__ import annotations

from typing import Any

import pytest

from evaluators.registry import make_evaluator, task_names, validate_task

MODEL = {"checkpoint": "demo", "rope": {"type": "yarn", "factor": 4.0}, "variant": "softmax"}

PINNED: list[tuple[dict[str, Any], str]] = [
    ({"name": "aa_lcr"}, "8a7a283d2324927c"),
    ({"name": "babilong"}, "c0aa206e0e0a61bc"),
    ({"name": "diagnostics"}, "aa99f3c880ca8cc0"),
    ({"name": "graphwalks"}, "1d05f7a26259ba83"),  # version 2: the sound F1
    ({"name": "helmet"}, "713ef0e5c4832024"),
    # categories, lengths and samples only select; the judge and the chat template score
    ({"name": "helmet", "categories": ["recall"], "input_max_length": [8192], "max_test_samples": 5},
     "713ef0e5c4832024"),
    ({"name": "helmet", "judge": "grader@0123456789ab", "chat_template": False, "shots": 1}, "24c06ae6fec3d904"),
    ({"name": "longbench"}, "12e3d672c27dd5af"),
    ({"name": "longbench_v2"}, "7a642ad63daedc28"),
    ({"name": "mrcr"}, "bb8f4b5db8d9c5d6"),
    ({"name": "mrcr_v2"}, "acc65ee8d1081e82"),
    ({"name": "passkey"}, "5a2bd737e2b04b2f"),
    ({"name": "needle"}, "cc705039f6e6848f"),
    ({"name": "perplexity", "text_file": "/tmp/t.txt"}, "9a8d09a2e5f59d86"),
    ({"name": "ruler"}, "01d578077aa44193"),
    ({"name": "scrolls"}, "cf90c08f5ac6f4f8"),
    ({"name": "passkey", "lengths": [256, 512], "seed": 3}, "e5173354aafb2c29"),
    # selection only (lengths, trials, the search): the default's hash
    ({"name": "passkey", "lengths": [256, 512, 1024], "search": "sequential", "trials": 20}, "5a2bd737e2b04b2f"),
    ({"name": "passkey", "chat_template": True, "max_new_tokens": 5, "stop_when_decided": True}, "8bb794170d58b88f"),
    ({"name": "needle", "depths": [0, 50], "haystack_file": "h.txt", "lengths": [1000, 2000], "seed": 7},
     "7ad77f7dceb2791b"),
    ({"name": "needle", "search": "sequential", "search_lengths": "doubling", "search_min": 1024,
      "search_max": 8192, "trials": 10}, "cc705039f6e6848f"),
    ({"name": "ruler", "lengths": [4096], "samples": 10, "seed": 1, "tasks": ["niah_single_1", "vt"]},
     "341c065abba5eb98"),
    ({"name": "ruler", "datasets": "niah_single_1,cwe", "lengths": [4096, 8192], "samples": 20,
      "search": "sequential", "search_rule": "relative"}, "01d578077aa44193"),
    ({"name": "ruler", "bootstrap": 0, "template": "chat", "threshold": 50.0}, "d904ff0f9c244efc"),
    ({"name": "longbench", "datasets": ["qasper"], "e": False, "max_length": 4096, "seed": 5}, "13bf012ebe1af596"),
    ({"name": "longbench", "chat_template": True, "e": True}, "bd42bfbad73a4013"),
    ({"name": "scrolls", "datasets": ["qasper"], "max_new_tokens": 64, "prompt": "official"}, "2bf0e4beca3a79aa"),
    ({"name": "babilong", "lengths": [0, 4096], "samples": 5, "seed": 1, "tasks": ["qa1", "qa2"]}, "f3ad4c984fbadf64"),
    ({"name": "longbench_v2", "cot": True, "limit": 5}, "2699e81ae1740514"),
    ({"name": "longbench_v2", "chat_template": True, "rag": 3}, "f3de8045f2c387c5"),
    ({"name": "mrcr", "max_new_tokens": 100, "needles": [2]}, "64d08503615ecfa0"),
    ({"name": "graphwalks", "chat_template": False, "problem_types": ["bfs"]}, "80cd350b51cf9c77"),
    # selection only (needle counts, files, limit): the default's hash
    ({"name": "mrcr_v2", "needles": [2, 4], "lengths": ["8K"], "limit": 3}, "acc65ee8d1081e82"),
    ({"name": "mrcr_v2", "chat_template": False, "max_new_tokens": 100}, "21e675e580954725"),
    # the judge is part of the configuration; repeats and limit only select
    ({"name": "aa_lcr", "judge": "grader@0123456789ab", "repeats": 1, "limit": 3}, "2fad3ff345a7b398"),
    ({"name": "aa_lcr", "judge": "grader@0123456789ab", "judge_prompt": "v1.0", "max_new_tokens": 64},
     "b70b45f443296770"),
    # selection only (tasks, limit): the default's hash
    ({"name": "infinitebench", "tasks": "passkey", "limit": 2}, "29e784936e9662e6"),
    ({"name": "infinitebench", "prompts": "gpt4", "chat_template": True, "max_new_tokens": 64}, "41b9fe6b8b5ea44a"),
    ({"name": "ruler_v2", "source": "prepared", "setups": "llama_32768", "limit": 2}, "fdcaac4af47703e7"),
    ({"name": "ruler_v2", "source": "prepared", "setups": "a_4096", "chat_template": False, "max_new_tokens": 128},
     "cd2ee2f800fdbefa"),
    # selection only (lengths, samples, tasks): the default's hash; the seed draws other samples
    ({"name": "ruler_v2", "lengths": [4096, 32768], "samples": 10, "tasks": "qa_easy"}, "321489c70d837d81"),
    ({"name": "ruler_v2", "lengths": [4096], "seed": 7}, "ee4d1bd61af36668"),
    ({"name": "nolima", "lengths": [1000], "limit": 2, "books": 1}, "b8fa50c4679a9be4"),
    ({"name": "nolima", "needle_set": "needle_set_hard", "metric": "EM", "depths": 5}, "9f1a5fd4922e1847"),
    ({"name": "zero_scrolls", "datasets": "quality", "limit": 2}, "017243979ce83a4a"),
    ({"name": "zero_scrolls", "split": "test", "chat_template": False, "max_length": 8192}, "06b9bbd5a7bd8bb5"),
    ({"name": "perplexity", "lengths": [64, 128], "stride": 32, "text_file": "/tmp/t.txt"}, "b0ede7b146b02566"),
    ({"name": "diagnostics", "hidden_states": "hf", "inputs": "passkey", "lengths": [64], "preset": "gu2024"},
     "a7090edd982b07ef"),
]


def test_every_task_is_pinned() -> None:
    assert {spec["name"] for spec, _ in PINNED} == set(task_names())


@pytest.mark.parametrize(("spec", "pinned"), PINNED, ids=lambda v: v.get("name") if isinstance(v, dict) else None)
def test_config_hash_is_pinned(spec: dict[str, Any], pinned: str) -> None:
    assert make_evaluator(spec).config_hash(MODEL) == pinned
    # a stored spec (every option filled in) made again by a worker: the same samples
    assert make_evaluator(validate_task(spec)).config_hash(MODEL) == pinned


def test_config_hash_without_a_model() -> None:
    assert make_evaluator({"name": "passkey"}).config_hash(None) == "a35221cfe44dd4fe"
    assert make_evaluator({"name": "ruler", "template": "chat", "threshold": 50.0, "bootstrap": 0}
                          ).config_hash(None) == "0595d6ad79e52e7a"
