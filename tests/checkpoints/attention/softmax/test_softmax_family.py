"""Softmax family (softmax, ssmax, gated, cog, intg, diff): the chunked PyTorch
path against the dense reference, softmax against SDPA, streaming statistics
against statistics of the reference weights."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from checkpoints.attention.masks import causal_mask
from checkpoints.attention.position import alibi_slopes
from checkpoints.attention.softmax.chunked import family_stats_chunked, online_softmax_chunked, softmax_sdpa
from checkpoints.attention.softmax.cog import cog_reference
from checkpoints.attention.softmax.reference import softmax_reference
from checkpoints.attention.stats import stats_from_weights
from tests.checkpoints.attention.softmax_family_cases import (
    VARIANTS,
    assert_close,
    assert_stats_close,
    make_config,
    make_layer,
    run_chunks,
)


def _qkv(t, s, d, hq=4, hkv=1, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    mk = lambda h, n: torch.randn(1, h, n, d, generator=g).to(dtype)  # noqa: E731
    return mk(hq, t), mk(hkv, s), mk(hkv, s)


@pytest.mark.parametrize("n", [1, 63, 130, 300])
@pytest.mark.parametrize("d", [32, 64])
def test_softmax_chunked_matches_reference_and_sdpa(n, d):
    q, k, v = _qkv(n, n, d)
    ref, _ = softmax_reference(q, k, v, 0)
    out = torch.full_like(ref, float("nan"))
    online_softmax_chunked(q, k, v, 0, scale=1 / math.sqrt(d), block=32, out=out)
    assert_close(out, ref)
    sdpa = F.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), is_causal=True)
    assert_close(out, sdpa)
    assert_close(softmax_sdpa(q, k, v, 0), ref)


@pytest.mark.parametrize("t,s", [(1, 1), (1, 70), (5, 130), (64, 130)])
def test_query_offset_is_bottom_right_aligned(t, s):
    q, k, v = _qkv(t, s, 32, seed=1)
    off = s - t
    ref, w = softmax_reference(q, k, v, off)
    # Row i sees exactly keys 0..off+i.
    assert torch.equal(w > 0, causal_mask(t, s, off, q.device).expand_as(w))
    out, _, _ = online_softmax_chunked(q, k, v, off, scale=1 / math.sqrt(32), block=16)
    assert_close(out, ref)
    mask = causal_mask(t, s, off, q.device)
    sdpa = F.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), attn_mask=mask)
    assert_close(out, sdpa)


def test_rows_without_visible_keys_output_zero():
    # Query at absolute position 0 with keys only behind a window that hides it: use an
    # offset so the row's visible range is empty (window 1 and no key at its position).
    q, k, v = _qkv(4, 2, 32, seed=2)
    # q_offset 2 with S = 2: queries at positions 2..5 see keys <= pos, window 1 keeps only
    # key == pos, which does not exist -> no visible key.
    ref, w = softmax_reference(q, k, v, 2, window=1)
    assert torch.equal(ref, torch.zeros_like(ref)) and torch.equal(w, torch.zeros_like(w))
    for signed in (False, True):
        out, _, _ = online_softmax_chunked(q, k, v, 2, scale=0.2, window=1, signed=signed, block=16)
        assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("position", ["alibi", "nape"])
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("window", [None, 9])
def test_streaming_core_with_bias_window_and_sign(position, signed, window):
    q, k, v = _qkv(40, 130, 32, seed=3)
    off, scale = 90, 1 / math.sqrt(32)
    slopes = alibi_slopes(4, position)
    if signed:
        ref, w = cog_reference(q, k, v, off, scale, slopes, window)
    else:
        ref, w = softmax_reference(q, k, v, off, scale, window, slopes)
    out, m, l = online_softmax_chunked(q, k, v, off, scale=scale, slopes=slopes, window=window, signed=signed, block=32)
    assert_close(out, ref)
    got = family_stats_chunked([(1.0, q, k, m, l)], off, 130, scale=scale, slopes=slopes, window=window,
                               signed=signed, block=32, layer=3)
    assert_stats_close(got, stats_from_weights(w, causal_mask(40, 130, off, q.device, window), 3))


@pytest.mark.parametrize("window", [None, 9])
def test_streaming_core_with_a_softcap(window):
    """Gemma 2's `c tanh(z / c)` logits, windowed or not: output and statistics."""
    q, k, v = _qkv(40, 130, 32, seed=6)
    q = q * 3  # logits well beyond the cap, so capping changes the weights
    off, scale, cap = 90, 1 / math.sqrt(32), 2.0
    ref, w = softmax_reference(q, k, v, off, scale, window, None, cap)
    uncapped, _ = softmax_reference(q, k, v, off, scale, window)
    assert (ref - uncapped).abs().max() > 0.1
    out, m, l = online_softmax_chunked(q, k, v, off, scale=scale, window=window, softcap=cap, block=32)
    assert_close(out, ref)
    got = family_stats_chunked([(1.0, q, k, m, l)], off, 130, scale=scale, window=window, softcap=cap, block=32)
    assert_stats_close(got, stats_from_weights(w, causal_mask(40, 130, off, q.device, window), 0))


def test_streaming_stats_count_exact_zeros():
    """Large logits make many weights underflow to exactly 0; the count must match."""
    q, k, v = _qkv(70, 70, 32, seed=4)
    q = q * 40
    ref, w = softmax_reference(q, k, v, 0)
    _, m, l = online_softmax_chunked(q, k, v, 0, scale=1 / math.sqrt(32), block=32)
    got = family_stats_chunked([(1.0, q, k, m, l)], 0, 70, scale=1 / math.sqrt(32), block=32)
    want = stats_from_weights(w, causal_mask(70, 70, 0, q.device), 0)
    assert want.zeros.sum() > 100
    assert_stats_close(got, want)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("d", [32, 64])
@pytest.mark.parametrize("n", [1, 63, 130])
def test_layer_torch_matches_reference(variant, d, n):
    config = make_config(variant, head_dim=d)
    layer = make_layer(config)
    x = torch.randn(1, n, 64, generator=torch.Generator().manual_seed(n))
    ref, ref_stats = run_chunks(layer, config, x, [n], "reference", collect_stats=True)
    out, stats = run_chunks(layer, config, x, [n], "torch", collect_stats=True)
    assert_close(out, ref)
    assert_stats_close(stats[0], ref_stats[0])
    # Without statistics, plain-softmax variants take the fused SDPA path.
    fast, _ = run_chunks(layer, config, x, [n], "torch")
    assert_close(fast, ref)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("position", ["rope", "nope", "alibi", "nape"])
def test_layer_prefill_in_chunks_and_decode(variant, position):
    config = make_config(variant, position=position)
    layer = make_layer(config)
    x = torch.randn(1, 75, 64, generator=torch.Generator().manual_seed(7))
    ref, ref_stats = run_chunks(layer, config, x, [75], "reference", collect_stats=True)
    out, stats = run_chunks(layer, config, x, [40, 32, 1, 1, 1], "torch", collect_stats=True)
    assert_close(out, ref)
    fast, _ = run_chunks(layer, config, x, [40, 32, 1, 1, 1], "torch")
    assert_close(fast, ref)
    # Stats of the chunks are the rows of the full pass.
    for f in ("abs_sum", "first", "entropy", "visible"):
        got = torch.cat([getattr(s, f) for s in stats], dim=2)
        assert (got - getattr(ref_stats[0], f)).abs().max() <= 1e-5, f


@pytest.mark.integration  # many blocks of every variant: seconds each on a CPU
@pytest.mark.parametrize("variant,position", [(v, "rope") for v in VARIANTS] + [("cog", "alibi")])
def test_long_prefill_many_blocks(variant, position):
    """One larger case per variant: 700 tokens over blocks of 64 (11 query x 11
    key blocks), on the streaming loop (statistics asked) and the fused path."""
    config = make_config(variant, head_dim=32, position=position)
    layer = make_layer(config)
    x = torch.randn(1, 700, 64, generator=torch.Generator().manual_seed(8))
    ref, ref_stats = run_chunks(layer, config, x, [700], "reference", collect_stats=True)
    out, stats = run_chunks(layer, config, x, [700], "torch", block=64, collect_stats=True)
    assert_close(out, ref)
    assert_stats_close(stats[0], ref_stats[0])
    fast, _ = run_chunks(layer, config, x, [700], "torch", block=64)
    assert_close(fast, ref)


def test_ssmax_length_term_is_log_of_the_keys_a_row_sees():
    """Scalable-Softmax's n is the number of keys row i sees, i + 1 (0-based): log_offset 1 by
    default, as the paper; another offset is a setting (a checkpoint trained with i + 2)."""
    from checkpoints.attention.softmax.ssmax import ssmax_reference

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 7, 16, generator=g) for _ in range(3))
    s = torch.tensor([0.5, 1.2])
    for offset, layer_params in ((1.0, {}), (2.0, {"log_offset": 2.0})):
        config = make_config("ssmax", head_dim=16, heads=2, kv_heads=2)
        config.attention.params.update(layer_params)
        layer = make_layer(config)
        assert layer.params["log_offset"] == offset
        with torch.no_grad():
            layer.ssmax_s.copy_(s)
        _, w = layer.reference(0, q, k, v)
        n = torch.arange(7.0) + offset
        z = (s[:, None] * torch.log(n))[None, :, :, None] * (q @ k.transpose(-1, -2)) / 4.0
        want = torch.softmax(z.masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf")), -1)
        torch.testing.assert_close(w, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ssmax_reference(q, k, v, 0, s, offset)[1], want, rtol=1e-5, atol=1e-6)
