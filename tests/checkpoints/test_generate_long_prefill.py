"""A 32k-token prefill of a small model never holds an N x N matrix: one fp32
score matrix for a single head would be 4 GiB; the whole run must stay far below."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import resource, sys, tempfile, torch
    from checkpoints.config import ModelConfig
    from checkpoints.generate import greedy_generate
    from checkpoints.loading import load_model, save_model
    from checkpoints.model import Decoder
    from checkpoints.tokenizer import ByteTokenizer
    torch.manual_seed(0)
    d = tempfile.mkdtemp()
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, vocab_size=259,
                      max_position_embeddings=4096, rope_scaling={"rope_type": "yarn", "factor": 8.0})
    save_model(Decoder(cfg), d, ByteTokenizer())
    loaded = load_model(d)
    ids = torch.randint(0, 256, (32768,)).tolist()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = greedy_generate(loaded.model, loaded.tokenizer, ids, 4, stop_at_eos=False, chunk_size=8192)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(len(out.token_ids), grown_mb)
""")


@pytest.mark.integration  # a 32k-token prefill
def test_32k_prefill_stays_far_below_one_score_matrix() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    generated, grown_mb = proc.stdout.split()
    assert int(generated) == 4
    # One (32k x 32k) fp32 matrix is 4096 MiB; activations of this model at 32k are ~100 MiB.
    assert float(grown_mb) < 1024, f"prefill grew the process by {grown_mb} MiB"
