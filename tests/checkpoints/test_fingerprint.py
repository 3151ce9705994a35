"""Checkpoint validation and fingerprint on real saved checkpoints."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from checkpoints.errors import CheckpointError
from checkpoints.fingerprint import inspect_checkpoint
from tests.helpers import tiny_checkpoint


def test_fingerprint_is_stable_and_tracks_weights_and_config(tmp_path: Path) -> None:
    a = tiny_checkpoint(tmp_path / "a", seed=0)
    info = inspect_checkpoint(a)
    assert len(info.fingerprint) == 64 and info.files == ["model.safetensors"]
    assert info.parameters > 0 and info.variant
    shutil.copytree(a, tmp_path / "copy")
    assert inspect_checkpoint(tmp_path / "copy").fingerprint == info.fingerprint  # content, not location
    # same architecture, other weights (the next checkpoint of a training run): another fingerprint
    assert inspect_checkpoint(tiny_checkpoint(tmp_path / "b", seed=1)).fingerprint != info.fingerprint
    cfg = (tmp_path / "copy" / "config.json").read_text()
    (tmp_path / "copy" / "config.json").write_text(cfg.replace("10000", "20000", 1) if "10000" in cfg else cfg + " ")
    assert inspect_checkpoint(tmp_path / "copy").fingerprint != info.fingerprint


def test_pickle_checkpoint_refused(tmp_path: Path) -> None:
    a = tiny_checkpoint(tmp_path / "a")
    (a / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(1)}, a / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickle"):
        inspect_checkpoint(a)


def test_missing_config_and_corrupt_weights_refused(tmp_path: Path) -> None:
    a = tiny_checkpoint(tmp_path / "a")
    (a / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        inspect_checkpoint(a)
    (a / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json"):
        inspect_checkpoint(a)


def test_large_weights_are_sampled_and_a_changed_block_is_seen(tmp_path: Path) -> None:
    from checkpoints import fingerprint
    from checkpoints.config import ModelConfig
    from checkpoints.loading import save_model
    from checkpoints.model import Decoder
    from checkpoints.tokenizer import ByteTokenizer

    model = Decoder(ModelConfig(hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
                                intermediate_size=512, vocab_size=259))
    path = save_model(model, tmp_path / "big", ByteTokenizer())
    weights = path / "model.safetensors"
    assert weights.stat().st_size > 4 * fingerprint.SAMPLES * fingerprint.BLOCK  # the sampling branch
    before = inspect_checkpoint(path).fingerprint
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # inside the last sampled block
    weights.write_bytes(bytes(data))
    assert inspect_checkpoint(path).fingerprint != before
