"""`open_judge` (evaluators/judges.py), the one way a judge opens, from the target its caller
names: a judge pinned to another model is refused before anything loads, one that cannot be
asked chat messages once it has opened; what the target notes goes into the judge's details."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from checkpoints.fingerprint import inspect_checkpoint
from checkpoints.opening import CheckpointTarget, Opened
from evaluators.errors import EvaluatorError
from evaluators.judges import open_judge
from tests.helpers import chat_checkpoint, tiny_checkpoint


@dataclass
class Watched:
    """A real checkpoint target that notes whether it was opened."""

    target: CheckpointTarget
    opened: int = 0

    @property
    def kind(self) -> str:
        return self.target.kind

    def identity(self) -> str:
        return self.target.identity()

    def open(self) -> Opened:
        self.opened += 1
        return self.target.open()


def test_a_pinned_judge_opens_only_as_that_model(tmp_path: Path) -> None:
    path = chat_checkpoint(tmp_path / "grader")
    identity = inspect_checkpoint(path).fingerprint
    target = Watched(CheckpointTarget(path))
    with pytest.raises(EvaluatorError, match="the judge grader is now another model"):
        open_judge("grader", "grader@000000000000", target)
    assert target.opened == 0  # refused from its fingerprint: the weights never loaded
    judge = open_judge("grader", f"grader@{identity[:12]}", target, {"checkpoint": "grader"})
    assert target.opened == 1
    assert (judge.ref, judge.kind, judge.details, judge.behaviour, judge.served) == \
        (f"grader@{identity[:12]}", "checkpoint", {"checkpoint": "grader"}, "", False)
    assert open_judge("grader", "grader", target).identity == identity  # an unpinned name takes the model as it is


def test_a_judge_that_cannot_take_chat_messages_is_refused_once_open(tmp_path: Path) -> None:
    path = tiny_checkpoint(tmp_path / "plain")  # no chat template
    with pytest.raises(EvaluatorError, match="judge plain: a judge is asked chat messages, and this checkpoint has "
                                             "no chat template"):
        open_judge("plain", "plain", CheckpointTarget(path))
