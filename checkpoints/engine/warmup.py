"""Compile a loaded model's kernels when it is loaded, not inside the first job's timing
(issue #41: Triton compiling for new lengths was a third of a first run at 16k).

One short prefill and one ragged decode step reach every kernel the model's layers launch
(prefill and decode, of each attention variant it has); lengths are not specialised
(`triton_common.LENGTH_ARGS`), so these compiles serve every later length. The autotuner
tunes the first length bucket here and each later bucket once per machine: its timings
and the compiled kernels live in TRITON_CACHE_DIR (the service's home)."""

from __future__ import annotations

import time

import torch

from checkpoints.attention.backend import Backend
from checkpoints.kv.block_pool import BlockPool
from checkpoints.kv.paged_batch import PagedBatch
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.model import Decoder

WARM_PROMPT = 256  # tokens of the warm-up prompt: a few query tiles, one key bucket


@torch.inference_mode()
def warm_up(model: Decoder, prompt: int = WARM_PROMPT) -> float:
    """Run the model once where its kernels compile (the triton backend); seconds taken,
    0.0 where nothing compiles (the PyTorch paths)."""
    if model.resolved_backend is not Backend.TRITON:
        return 0.0
    start = time.perf_counter()
    ids = torch.zeros(1, prompt, dtype=torch.long, device=model.device)
    pool = BlockPool(len(model.layers), model.device)  # the engine's layout: rows in a paged pool
    first, second = PagedSeq(pool), PagedSeq(pool)
    model(ids, first, logits_for="last")
    model(ids[:, : prompt // 2 + 1], second, logits_for="last")
    if model.rotary.depends_on_length:  # decoded one sequence at a time (engine.py): a one-token forward
        model(ids[:, :1], first, logits_for="last")
    else:
        batch = PagedBatch(pool)
        batch.join(first, reach=prompt + 2)
        batch.join(second, reach=prompt + 2)
        model.decode_step(torch.zeros(2, dtype=torch.long, device=model.device), batch)
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
    return time.perf_counter() - start
