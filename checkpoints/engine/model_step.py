"""The engine's model step (gpt-fast's and vLLM v1's division): the forwards the engine
runs, and nothing about which request runs when (`scheduler`) or which token comes next
(`sampler`). A prefill runs a prompt in chunks into a KV cache (from a cached prefix, when
the engine loaded one); a padded prefill runs short prompts in one right-padded forward;
a decode step runs one token of every row of a ragged batch, a verifying step a row's last
token and its drafted continuation (`checkpoints.engine.prompt_lookup`). The decode step is the
one a CUDA graph captures per batch bucket; its inputs are device tensors made here."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from checkpoints.engine.cuda_graphs import DecodeGraphs, graphs_wanted
from checkpoints.generate import DEFAULT_CHUNK, default_prefill_chunk, prefill, token_logprobs
from checkpoints.kv.cache import KVCache
from checkpoints.kv.paged_batch import PagedBatch
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.lm import Prefilled
from checkpoints.model import Decoder
from checkpoints.sampler import to_device


class ModelStep:
    """`cuda_graphs`: decode steps replayed as CUDA graphs (`checkpoints.engine.cuda_graphs`); None
    (the default) where the model's step can be captured, unless LCTX_CUDA_GRAPHS=0."""

    def __init__(self, model: Decoder, chunk_size: int | None = None, cuda_graphs: bool | None = None) -> None:
        # `chunk_size` for what keeps every position's logits (rolling log-likelihoods), the
        # device's prefill chunk for prompts (None: the defaults; a given size serves both)
        self.model, self.chunk_size = model, chunk_size or DEFAULT_CHUNK
        self.prefill_chunk = chunk_size or default_prefill_chunk(model.device)
        if cuda_graphs is None:
            cuda_graphs = graphs_wanted(model)
        self.graphs = DecodeGraphs(model) if cuda_graphs else None

    @property
    def device(self) -> torch.device:
        return self.model.device

    def prefill(self, ids: Sequence[int], cache: KVCache | PagedSeq, on_prefill: Prefilled | None = None) -> torch.Tensor:
        """`ids` run into `cache` (which may hold a prefix already), chunk by chunk; the
        last position's logits (V,). `on_prefill(tokens)` after each chunk."""
        return prefill(self.model, ids, cache, self.prefill_chunk, on_prefill)

    def prefill_padded(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, KVCache]:
        """Short prompts in one forward, right-padded to the longest, so every real token
        sees only real tokens before it (causal): each prompt's last logits (B, V) and the
        batch's cache (row b keeps its first len(prompts[b]) entries)."""
        ids, last = self.padded(prompts)
        cache = self.model.new_cache()
        logits, _ = self.model(ids, cache, logits_for=last)  # (B, 1, V)
        return logits[:, 0], cache

    def decode(self, tokens: Sequence[int], batch: PagedBatch) -> torch.Tensor:
        """One token of every row of the ragged batch: logits (B, V)."""
        if self.graphs is not None:
            return self.graphs(tokens, batch)
        return self.model.decode_step(to_device(tokens, self.device), batch)

    def verify(self, inputs: Sequence[Sequence[int]], batch: PagedBatch) -> torch.Tensor:
        """Row b's `inputs[b]` (its last token, then a drafted continuation, right-padded: one
        width) after its cached tokens: logits (B, width, V) at every input. The lengths do not
        advance: the engine advances each row by the inputs it keeps."""
        width = len(inputs[0])
        flat = to_device([t for row in inputs for t in row], self.device)
        return self.model.ragged_logits(flat.view(len(inputs), width), batch)

    def decode_alone(self, token: int, cache: KVCache | PagedSeq) -> torch.Tensor:
        """One token of one sequence whose RoPE table follows its length (dynamic NTK,
        LongRoPE: no shared batch): logits (1, V)."""
        logits, _ = self.model(to_device([token], self.device)[None], cache, logits_for="last")
        return logits[:, -1]

    def continuation(self, cache: KVCache | PagedSeq, context: Sequence[int], cont: Sequence[int]) -> torch.Tensor:
        """Logits (len(cont), V) predicting `cont` after `context`, whose all-but-last tokens
        `cache` holds: the last context token and the continuation minus its last token run."""
        tail = torch.tensor([[context[-1], *cont[:-1]]], dtype=torch.long, device=self.device)
        logits, _ = self.model(tail, cache, rope_length=len(context) + len(cont))
        return logits[0]

    def score_padded(self, seqs: Sequence[Sequence[int]], at: torch.Tensor) -> torch.Tensor:
        """Sequences in one right-padded forward without a cache, logits read only at the
        positions `at` (B, k): (B, k, V)."""
        ids, _ = self.padded(seqs)
        logits, _ = self.model(ids, None, logits_for=at.to(ids.device))
        return logits

    def rolling(self, ids: Sequence[int]) -> torch.Tensor:
        """log p(ids[t] | ids[:t]) for t >= 1, streamed over chunks: (len(ids) - 1,) fp32."""
        return token_logprobs(self.model, ids, self.chunk_size)

    def padded(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, width) ids right-padded with token 0, and each row's last position (B,)."""
        width = max(map(len, seqs))
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        for b, seq in enumerate(seqs):
            ids[b, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        last = torch.tensor([len(s) - 1 for s in seqs], dtype=torch.long)
        return ids.to(self.device), last.to(self.device)
