"""`lctx eval`'s task-option flags: a flag several tasks share names, for each of its
descriptions, the tasks it belongs to."""

from __future__ import annotations

import argparse

from cli.main import build_parser
from evaluators.registry import task_options


def eval_flag_help(flag: str) -> str:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return next(a.help for a in sub.choices["eval"]._actions if flag in a.option_strings) or ""


def test_a_shared_flag_says_whose_each_description_is() -> None:
    text = eval_flag_help("--stop-when-decided")
    for task in ("passkey", "ruler", "longbench_v2"):
        own = task_options()[task].model_fields["stop_when_decided"].description
        assert own and own in text
    assert "passkey, needle: " + task_options()["passkey"].model_fields["stop_when_decided"].description in text
    assert "ruler: " + task_options()["ruler"].model_fields["stop_when_decided"].description in text
    assert eval_flag_help("--needles").startswith("mrcr: ")
