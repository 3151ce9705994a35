"""The decode step as a CUDA graph (issue #41 item 3; gpt-fast's and vLLM's way of
decoding): a step of a 16-layer model launches some 600 kernels, and launching them from
Python costs more than running them at batch 8, so the step is captured once and then
replayed as one launch.

A graph replays fixed addresses and shapes. The batch is made `full_width` (the attention
reads every row's `capacity` keys; keys past a row's length are never read), its `lengths`
advance in place, a row's new blocks are written into its block table in place before the
step (`PagedBatch.prepare`: the slots are computed in the graph from the table), the RoPE
tables and ALiBi slopes already live on the device, and the step's tokens are copied into a
buffer the graph reads. What is left to change is the batch's `layout` (a row joining or
leaving rebuilds the table, the pool growing moves its tensors): a new layout runs
one step eagerly, which compiles and tunes whatever it reaches (a capture cannot), and
captures on its next step; a graph is replayed only on the layout it was captured on.

Only where the step is the same work every time (`Decoder.graphable_decode`): a CUDA
device, RoPE that does not follow the length, and every layer's ragged step one call.
Elsewhere the eager step runs. LCTX_CUDA_GRAPHS=0 turns graphs off (to compare)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from checkpoints.kv.paged_batch import PagedBatch
from checkpoints.model import Decoder
from checkpoints.sampler import to_device


def graphs_wanted(model: Decoder) -> bool:
    """Whether this model's decode steps run as CUDA graphs (unless LCTX_CUDA_GRAPHS=0)."""
    if os.environ.get("LCTX_CUDA_GRAPHS", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return model.device.type == "cuda" and model.graphable_decode()


class DecodeGraphs:
    """Decode steps of one model, each either eager (a new layout) or a replay of the graph
    captured on the current layout. `captures` and `replays` count what ran."""

    def __init__(self, model: Decoder) -> None:
        if not model.graphable_decode():
            raise ValueError("this model's decode step cannot be captured (length-dependent RoPE, or a "
                             "layer whose ragged step runs row by row): decode it eagerly")
        self.model = model
        self.captures = self.replays = self.eager_steps = 0
        self._layout: tuple | None = None
        self._graph: torch.cuda.CUDAGraph | None = None
        self._tokens: torch.Tensor | None = None
        self._logits: torch.Tensor | None = None

    def __call__(self, tokens: Sequence[int], cache: PagedBatch) -> torch.Tensor:
        """Logits (B, V) of one step of every row; the cache advances."""
        cache.full_width = True
        cache.prepare(1)  # blocks for this step's token, on the host, before any replay
        layout = cache.layout()
        if layout != self._layout:
            self.release()
            self._layout = layout
            self.eager_steps += 1
            return self.model.decode_step(to_device(tokens, self.model.device), cache)
        if self._graph is None:
            self._capture(tokens, cache)
        else:
            self._tokens.copy_(to_device(tokens, self.model.device), non_blocking=True)
        self._graph.replay()
        self.replays += 1
        cache.advance()
        return self._logits.clone()

    def _capture(self, tokens: Sequence[int], cache: PagedBatch) -> None:
        """Capture the step on this layout, reading `self._tokens` (set to `tokens`)."""
        self._tokens = to_device(tokens, self.model.device).clone()
        graph = torch.cuda.CUDAGraph()
        # A private pool per graph (one shared handle outlives the graph that made it: PyTorch
        # frees the pool with its last graph and then refuses a capture into it). thread_local:
        # only this thread must stay off unsafe CUDA calls while capturing (the prompt-building
        # thread runs beside it).
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self._logits = self.model.decode_logits(self._tokens, cache)
        self._graph = graph
        self.captures += 1

    def release(self) -> None:
        """Drop the graph (its private pool, the intermediate tensors, goes back to the allocator)."""
        self._graph = self._logits = self._tokens = None
        self._layout = None
