"""Attention variants, arranged as flash-linear-attention arranges its ops.

Shared pieces, one module each (none imports a variant):

    backend.py        Backend: the one list of backend names (no torch)
    base.py           AttentionContext, AttentionLayer and its one dispatch
    registry.py       variant name -> layer class; build_attention
    masks.py          the causal (and sliding-window) mask
    gqa.py            grouped-query layouts: expand_kv, group_rows, ...
    position.py       NoPE / ALiBi / NAPE slopes and bias
    stats.py          RowStats from dense weights or streamed block by block
    triton_common.py  helpers shared by every Triton kernel

The KV cache a layer appends to (contiguous `LayerCache`, or a row of the paged
pool) is `checkpoints.kv`'s, a package of its own below this one.

One folder per family, each with `reference.py` (dense: the spec and
oracle, returns weights), `chunked.py` (PyTorch, streams over key blocks,
O(N x block) memory) and `triton.py` (fused prefill and decode; imported
only when the triton backend runs) side by side, and thin layer modules:

    softmax/    online softmax: softmax, ssmax, gated, cog, intg, diff
    softpick/   softpick (rectified softmax, no sink)
    pointwise/  weights final per score: rela, tra, tda (threshold)
    entmax/     alpha-entmax with ASEntmax length scaling

This package imports nothing itself: import what you need from the modules
above (`checkpoints.attention.registry.build_attention`, ...)."""
