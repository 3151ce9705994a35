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
from evaluators.diagnostics.evaluator import (
    DEFAULT_TEXT,
    HEAD_FIGURES,
    DiagnosticsEvaluator,
    Moments,
    RowAccumulator,
    causal_visible,
    kurtosis,
    measure,
    summarise_heads,
)
from tests.helpers import points, tiny_model, typed


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


@pytest.mark.integration  # every diagnostic at every length: seconds of CPU
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
    plots = tmp_path / "out" / "plots"
    assert len(list(plots.glob("diagnostics_*_len[0-9]*.png"))) == 2 * 7  # 6 head heatmaps + activations
    assert (plots / "diagnostics_vs_length.png").is_file()
    for s in typed(result).series:  # every reported series has its plot
        assert (plots / f"diagnostics_{s.name.replace('@', '_at_')}.png").is_file(), s.name


def test_sink_rate_thresholds_each_sample_then_averages() -> None:
    """Gu et al.'s rule on a case where the order matters: one head whose first-key weight is
    0.5 in one sample and 0.0 in the other. Per sample then averaged: 0.5 at both eps; the
    mean first (0.25) thresholded would give 1 at eps 0.2 and 0 at 0.3."""
    def sample(fw: list[list[float]]) -> list[dict[str, list[float]]]:
        return [{k: list(heads) if k == "first_weight" else [0.0] * len(heads) for k in (*HEAD_FIGURES, "silent_rows")}
                for heads in fw]

    samples = [sample([[0.5, 0.1]]), sample([[0.0, 0.1]])]
    out = summarise_heads(samples)
    # Written out: mean over samples, layers and heads of [mean_i a_i0 > eps].
    for eps in (0.2, 0.3):
        want = sum(float(v > eps) for s in samples for layer in s for v in layer["first_weight"]) / 4
        assert out[f"sink_rate@{eps}"] == want == 0.25
    assert out["per_layer"][0]["first_weight"] == [0.25, 0.1]  # the averaged figure stays a figure
    averaged_first = [float(v > 0.2) for v in out["per_layer"][0]["first_weight"]]
    assert sum(averaged_first) / 2 == 0.5 != out["sink_rate@0.2"]


def test_inputs_are_natural_text_each_sample_starting_with_bos(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    opts = DiagnosticsEvaluator.validate({"preset": "gu2024"})
    assert (opts.lengths, opts.samples, opts.inputs) == ([64], 100, "text")
    assert DiagnosticsEvaluator.validate({"preset": "gu2024", "samples": 3}).samples == 3
    ev = DiagnosticsEvaluator(opts)
    ev.prepare(loaded)
    text = loaded.tokenizer.encode(DEFAULT_TEXT.read_text(encoding="utf-8"), add_special_tokens=False)
    assert DEFAULT_TEXT.read_text(encoding="utf-8").startswith("CHAPTER I. Down the Rabbit-Hole")
    windows = [ev.inputs(loaded, 64, i) for i in range(3)]
    for i, ids in enumerate(windows):
        assert len(ids) == 64 and ids[0] == loaded.tokenizer.bos_id
        assert ids[1:] == text[63 * i : 63 * (i + 1)]  # consecutive windows of the text
    from evaluators import EvaluatorError

    with pytest.raises(EvaluatorError, match="inputs=text"):
        DiagnosticsEvaluator.validate({"inputs": "passkey", "text_file": "x.txt"})


def test_hf_hidden_states_are_embeddings_layers_and_the_final_norm(tmp_path: Path) -> None:
    """hidden_states=hf equals transformers' output_hidden_states (what the softpick paper's
    kurtosis is measured on): a tiny Llama saved by transformers, read by our loader."""
    from checkpoints.loading import load_model
    from tests.checkpoints.hf_models import build_hf_model

    hf = build_hf_model(tmp_path / "hf")
    loaded = load_model(tmp_path / "hf")
    ids = [1, *range(5, 34)]  # BOS and 29 tokens (the tiny model's context is 32)
    got = measure(loaded, ids, dense=True, chunk=64, hidden_states="hf")["moments"]
    streamed = measure(loaded, ids, dense=False, chunk=16, hidden_states="hf")["moments"]
    with torch.no_grad():
        want = hf(torch.tensor([ids]), output_hidden_states=True).hidden_states
    assert len(got) == len(streamed) == len(want) == 3
    for g, st, w in zip(got, streamed, want, strict=True):
        w = w.double()
        assert (g["max"], g["min"]) == (pytest.approx(float(w.max()), rel=1e-4), pytest.approx(float(w.min()), rel=1e-4))
        mu, var = w.mean(), w.var(unbiased=False)
        assert kurtosis(g) == pytest.approx(float(((w - mu) ** 4).mean() / var**2), rel=1e-4)
        assert kurtosis(st) == pytest.approx(kurtosis(g), rel=1e-4)
