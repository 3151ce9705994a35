"""The model's CPU hot path for plain softmax (fused SDPA + log-sum-exp merge)
against the dense reference: chunked prefill offsets, decode, a verifying step's few queries
(one masked call), GQA."""

from __future__ import annotations

import pytest
import torch

from checkpoints.attention.softmax.chunked import softmax_sdpa_streaming
from checkpoints.attention.softmax.reference import softmax_reference


@pytest.mark.parametrize("t, s", [(1, 1), (1, 130), (5, 130), (17, 17), (17, 40), (63, 63), (37, 130), (64, 200)])
@pytest.mark.parametrize("gqa", [1, 4])
def test_fast_path_matches_reference(t: int, s: int, gqa: int) -> None:
    g = torch.Generator().manual_seed(t * 1000 + s)
    q = torch.randn(1, 4, t, 32, generator=g)
    k = torch.randn(1, 4 // gqa, s, 32, generator=g)
    v = torch.randn(1, 4 // gqa, s, 32, generator=g)
    ref, _ = softmax_reference(q, k, v, s - t)
    out = torch.full_like(ref, float("nan"))
    out[:] = softmax_sdpa_streaming(q, k, v, s - t)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5 * ref.abs().max().item())
