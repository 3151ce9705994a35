"""`lctx inspect` and `lctx generate` through the real console entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.checkpoints.hf_models import build_hf_model
from tests.helpers import tiny_own

pytestmark = pytest.mark.integration  # transformers builds the Hugging Face checkpoints


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def test_inspect_hf_checkpoint_with_override(tmp_path) -> None:
    build_hf_model(tmp_path, "qwen2", max_position_embeddings=64)
    out = run_cli("inspect", str(tmp_path), "--rope", "yarn:4", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["format"] == "qwen2" and info["architecture"]["qkv_bias"] is True
    assert info["rope"]["scaling"]["rope_type"] == "yarn"
    assert info["rope"]["effective_context"] == 256
    assert info["attention"]["variants_in_use"] == ["softmax"]
    text = run_cli("inspect", str(tmp_path))
    assert "effective 64" in text.stdout and "parameters" in text.stdout


def test_generate_and_clear_error(tmp_path) -> None:
    tiny_own(tmp_path)
    out = run_cli("generate", "--checkpoint", str(tmp_path), "--prompt", "hello", "--max-new-tokens", "4")
    assert out.returncode == 0, out.stderr
    bad = run_cli("generate", "--checkpoint", str(tmp_path / "nope"), "--prompt", "x")
    assert bad.returncode == 2 and "no config.json" in bad.stderr
