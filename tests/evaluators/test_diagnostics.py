"""Attention diagnostics: the row figures on a hand-computed weight matrix, kurtosis,
streaming statistics against the dense oracle, and complete results on a tiny model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from checkpoints.attention.stats import stats_from_weights
from evaluators import run_task
from evaluators.diagnostics import HEAD_FIGURES, Moments, RowAccumulator, causal_visible, kurtosis, measure
from tests.evaluators.helpers import points, tiny_model, typed


def test_row_figures_by_hand() -> None:
    w = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [-0.2, 0.0, 1.2]])  # one head, causal rows
    silent = torch.zeros(3, 3)
    weights = torch.stack([w, silent])[None]  # (1, 2, 3, 3)
    acc = RowAccumulator()
    acc.add(stats_from_weights(weights, causal_visible(3, 3, 0, w.device), 0))
    f = acc.figures()
    assert f["first_weight"][0] == pytest.approx((1 + 0.5 - 0.2) / 3)
    assert f["sink_ratio"][0] == pytest.approx((1 + 0.5 + 1 / 7) / (1 + 0.5 + 1 / 3))
    assert f["sparsity"][0] == pytest.approx(1 / 6)  # one exact zero among six causal entries
    h2 = -(1 / 7 * math.log(1 / 7) + 6 / 7 * math.log(6 / 7))
    assert f["entropy"][0] == pytest.approx((0 + math.log(2) + h2) / 3, rel=1e-5)
    assert f["dispersion"][0] == pytest.approx((1 + h2 / math.log(3)) / 2, rel=1e-5)
    assert f["negative_first"][0] == pytest.approx(1 / 3)
    # The all-zero head: three silent rows, fully sparse, no b-based figures.
    assert f["silent_rows"][1] == 3 and f["sparsity"][1] == 1.0 and f["entropy"][1] == 0.0


def test_kurtosis_by_hand() -> None:
    m = Moments()
    m.add(torch.tensor([1.0, 2.0]))
    m.add(torch.tensor([3.0, 4.0]))
    # mean 2.5; m2 = 1.25, m4 = 2.5625 -> 1.64
    assert kurtosis(m.as_dict()) == pytest.approx(1.64)
    assert m.max == 4.0 and m.min == 1.0


@pytest.mark.parametrize("extra", [{}, {"attention": {"variant": "softpick"}}, {"sliding_window": 40}],
                         ids=["softmax", "softpick", "sliding-window"])
def test_streaming_statistics_match_the_dense_oracle(tmp_path: Path, extra: dict) -> None:
    loaded = tiny_model(tmp_path / "m", **extra)
    ids = torch.randint(0, 256, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    dense = measure(loaded, ids, dense=True, chunk=64)
    streamed = measure(loaded, ids, dense=False, chunk=64)  # three chunks with the KV cache
    assert dense["path"] == "dense" and streamed["path"] == "stats"
    for ld, ls in zip(dense["layers"], streamed["layers"], strict=True):
        for k in HEAD_FIGURES:
            assert ld[k] == pytest.approx(ls[k], abs=1e-4), k
    for md, ms in zip(dense["moments"], streamed["moments"], strict=True):
        assert md["max"] == pytest.approx(ms["max"], rel=1e-4)
        assert kurtosis(md) == pytest.approx(kurtosis(ms), rel=1e-4)


def test_diagnostics_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    task = {"name": "diagnostics", "lengths": [48, 200], "samples": 2, "dense_max": 64, "chunk_size": 64}
    result = run_task(loaded, task, tmp_path / "out")
    lines = (tmp_path / "out" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(x)["prompt_tokens"] in (48, 200) for x in lines)
    detail = typed(result).extra["by_length"]
    short, long = detail["48"], detail["200"]
    assert short["path"] == ["dense"] and long["path"] == ["stats"]
    assert short["stats_vs_dense_max_abs_diff"] < 1e-4
    for entry in (short, long):
        assert 0 <= entry["sink_rate@0.2"] <= 1 and 0 <= entry["sparsity"] <= 1
        assert 0 < entry["dispersion"] <= 1 + 1e-6 and entry["sink_ratio"] > 0
        assert len(entry["per_layer"]) == 2 and len(entry["per_layer"][0]["first_weight"]) == 4
        assert len(entry["massive_activations"]["per_layer"]) == 2
        assert entry["massive_activations"]["max"] >= entry["massive_activations"]["min"]
    assert {m.name for m in typed(result).metrics} >= {"sink_rate@0.3", "sparsity", "kurtosis"}
    assert all(m.higher_is_better is None and m.n == 2 for m in typed(result).metrics)  # measurements
    assert points(result, "sparsity", "length")[200].value == long["sparsity"]
    assert len(list((tmp_path / "out" / "plots").glob("diagnostics_*_len[0-9]*.png"))) == 6
    assert (tmp_path / "out" / "plots" / "diagnostics_vs_length.png").is_file()
