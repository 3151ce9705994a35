"""Perplexity against length equals exp(mean NLL) of a plain full forward pass."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from evaluators import EvaluatorError, run_task, validate_task
from tests.evaluators.helpers import points, tiny_model, typed


def direct_nll(model, ids: list[int], scored: int) -> float:
    with torch.no_grad():
        logits, _ = model(torch.tensor([ids]))
    logp = torch.log_softmax(logits[0, :-1].float(), -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    return -float(logp[-scored:].sum())


def test_perplexity_windows_and_stride(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    text = tmp_path / "t.txt"
    text.write_text("Long contexts need long texts. " * 20)
    ids = loaded.tokenizer.encode(text.read_text(), add_special_tokens=False)
    r = run_task(loaded, {"name": "perplexity", "lengths": [40], "text_file": str(text), "windows": 2},
                 tmp_path / "a")
    nll = direct_nll(loaded.model, ids[:40], 39) + direct_nll(loaded.model, ids[40:80], 39)
    assert points(r, "perplexity", "length")[40].value == pytest.approx(math.exp(nll / 78), rel=1e-4)
    headline = typed(r).metric("perplexity")
    assert headline.higher_is_better is False and headline.n == 2 and headline.value == points(
        r, "perplexity", "length")[40].value
    r = run_task(loaded, {"name": "perplexity", "lengths": [40], "text_file": str(text), "windows": 2, "stride": 10},
                 tmp_path / "b")
    nll = direct_nll(loaded.model, ids[:40], 39) + direct_nll(loaded.model, ids[10:50], 10)
    assert points(r, "perplexity", "length")[40].value == pytest.approx(math.exp(nll / 49), rel=1e-4)


def test_perplexity_needs_a_text(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="text_file is required"):
        validate_task({"name": "perplexity"})
    loaded = tiny_model(tmp_path / "m")
    with pytest.raises(EvaluatorError, match="not found"):
        run_task(loaded, {"name": "perplexity", "text_file": "nope.txt"}, tmp_path / "o")
