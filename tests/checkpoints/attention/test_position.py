"""Positional options: NoPE, ALiBi (slopes 2^(-8h/H)) and NAPE (half NoPE, half ALiBi)."""

from __future__ import annotations

import pytest
import torch

from checkpoints.attention.position import alibi_bias, alibi_slopes
from checkpoints.config import AttentionConfig, ModelConfig
from checkpoints.config_reader import load_config
from checkpoints.errors import ConfigError
from tests.checkpoints.attention.softmax_family_cases import make_config, make_layer, run_chunks


def test_slopes():
    assert torch.equal(alibi_slopes(8, "alibi"), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))
    assert torch.allclose(alibi_slopes(4, "alibi"), torch.tensor([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]))
    assert torch.allclose(alibi_slopes(4, "nape"), torch.tensor([0.0, 0.0, 2 ** -4, 2 ** -8]))
    assert alibi_slopes(4, "rope") is None and alibi_slopes(4, "nope") is None


def test_bias_is_bottom_right_aligned_distance():
    b = alibi_bias(torch.tensor([0.5]), 2, 5, 3)  # queries at positions 3, 4
    assert torch.equal(b[0, 0], 0.5 * torch.tensor([-3.0, -2, -1, 0, 1]))
    assert torch.equal(b[0, 1], 0.5 * torch.tensor([-4.0, -3, -2, -1, 0]))


def test_unknown_position_is_a_config_error():
    with pytest.raises(ConfigError, match="position"):
        AttentionConfig(position="xpos")


def _last_row(position: str, x: torch.Tensor) -> torch.Tensor:
    config = make_config("softmax", position=position)
    out, _ = run_chunks(make_layer(config), config, x, [x.shape[1]], "torch")
    return out[:, -1]


@pytest.mark.parametrize("position,invariant", [("nope", True), ("alibi", False), ("nape", False), ("rope", False)])
def test_only_nope_ignores_the_order_of_earlier_tokens(position, invariant):
    x = torch.randn(1, 12, 64, generator=torch.Generator().manual_seed(0))
    perm = torch.cat([torch.randperm(11, generator=torch.Generator().manual_seed(1)), torch.tensor([11])])
    a, b = _last_row(position, x), _last_row(position, x[:, perm])
    assert torch.allclose(a, b, atol=1e-5) == invariant


def test_model_config_round_trips_position(tmp_path):
    c = ModelConfig(hidden_size=64, num_layers=1, num_heads=4, intermediate_size=64, vocab_size=259,
                    attention=AttentionConfig(position="nape"))
    c.save(tmp_path / "config.json")
    assert load_config(tmp_path).attention.position == "nape"
