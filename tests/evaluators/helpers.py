"""A tiny random decoder saved in our own format, shared by the evaluator tests."""

from __future__ import annotations

from pathlib import Path

import torch

from checkpoints.config import ModelConfig
from checkpoints.loading import LoadedModel, load_model, save_model
from checkpoints.model import Decoder
from checkpoints.tokenizer import ByteTokenizer
from evaluators.results import TaskResult


def tiny_model(path: Path, seed: int = 0, **config: object) -> LoadedModel:
    torch.manual_seed(seed)
    fields = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
                  vocab_size=259)
    fields.update(config)
    save_model(Decoder(ModelConfig(**fields)), path, ByteTokenizer())
    return load_model(path)


def typed(entry: dict) -> TaskResult:
    """The typed result of a task entry (run_task's return value)."""
    return TaskResult.model_validate(entry["result"])


def points(entry: dict, name: str, axis: str, **at: object) -> dict:
    """{key: Point} of the series `name` along `axis` (fixed at `at`)."""
    result = typed(entry)
    found = [s for s in result.series if s.name == name and s.axis == axis and s.at == at]
    assert len(found) == 1, (name, axis, at, [(s.name, s.axis, s.at) for s in result.series])
    return {p.key: p for p in found[0].points}
