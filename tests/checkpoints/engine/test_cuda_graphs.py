"""Decode steps as CUDA graphs (issue #41 item 3). On the CPU: what a graph relies on,
checked on the eager step it captures (the full-width paged batch gives the same logits,
lengths advance in place, a new block goes into the table in place, a layout changes
exactly when a row joins or leaves, which
models can be captured). On a GPU: the engine's greedy generations with graphs equal
those without, for every capturable variant, rows leaving at different steps included,
and a replayed step passes CUDA's sync check."""

from __future__ import annotations

import pytest
import torch

from checkpoints.attention.registry import available_variants
from checkpoints.engine import Engine, GenerateRequest
from checkpoints.engine.cuda_graphs import DecodeGraphs, graphs_wanted
from checkpoints.kv.block_pool import BlockPool
from checkpoints.kv.paged_batch import PagedBatch
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.tokenizer import ByteTokenizer
from tests.helpers import variant_model

CUDA = torch.cuda.is_available()
# On a GPU the first call of each variant compiles its Triton kernels (5-20 s on a fresh machine).
ON_GPU = pytest.mark.integration
# the softmax family's one-call ragged step (ssmax rescales each row's queries: row by row)
CAPTURABLE = {"softmax", "cog", "diff", "gated", "intg"}


def _batch(model, lengths: list[int], full_width: bool, seed: int = 0) -> PagedBatch:
    """The engine's decoding batch (a paged pool of 8-token blocks) of rows prefilled with
    random prompts of `lengths`."""
    gen = torch.Generator().manual_seed(seed)
    batch = PagedBatch(BlockPool(len(model.layers), model.device, block_size=8))
    for n in lengths:
        seq = PagedSeq(batch.pool)
        model(torch.randint(0, 259, (1, n), generator=gen).to(model.device), seq)
        batch.join(seq, reach=max(lengths) + 8)
    batch.full_width = full_width
    return batch


@pytest.mark.parametrize("variant", ["softmax", "diff", "cog", "gated"])
@torch.inference_mode()
def test_a_full_width_batch_decodes_as_the_trimmed_one(variant: str) -> None:
    """The whole buffers (what a graph reads) give the logits the trimmed views give, step
    after step: keys past a row's length are never read."""
    model = variant_model(variant)
    model.backend = "torch"
    trimmed, full = _batch(model, [5, 17, 9], False), _batch(model, [5, 17, 9], True)
    for step in range(4):
        tokens = torch.tensor([3 + step, 7, 11])
        torch.testing.assert_close(model.decode_step(tokens, full), model.decode_step(tokens, trimmed),
                                   rtol=1e-5, atol=1e-5)
    assert full.host_lengths == trimmed.host_lengths == [9, 21, 13]


@torch.inference_mode()
def test_lengths_advance_in_place_and_the_layout_changes_only_with_the_rows() -> None:
    model = variant_model("softmax")
    batch = _batch(model, [4, 7], True)
    lengths, layout = batch.lengths, batch.layout()
    model.decode_step(torch.tensor([1, 2]), batch)
    assert batch.lengths is lengths and lengths.tolist() == [5, 8]
    assert batch.layout() == layout  # a step changes nothing a graph holds
    model.decode_step(torch.tensor([1, 2]), batch)  # row 1 takes a new block: written into the table in place
    assert batch.layout() == layout and len(batch.tables[1].blocks) == 2
    batch.keep([1])
    assert batch.layout() != layout
    layout = batch.layout()
    seq = PagedSeq(batch.pool)
    model(torch.randint(0, 259, (1, 3)), seq)
    batch.join(seq, reach=20)
    assert batch.layout() != layout


@pytest.mark.parametrize("variant", available_variants())
def test_which_models_can_be_captured(variant: str) -> None:
    model = variant_model(variant)
    model.backend = "triton"
    assert model.graphable_decode() == (variant in CAPTURABLE)
    if variant not in CAPTURABLE:
        with pytest.raises(ValueError, match="cannot be captured"):
            DecodeGraphs(model)


def test_length_dependent_rope_is_never_captured_and_the_cpu_never_graphs(monkeypatch) -> None:
    model = variant_model("softmax", rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    model.backend = "triton"
    assert not model.graphable_decode()
    plain = variant_model("softmax")
    assert plain.graphable_decode() and not graphs_wanted(plain)  # CPU
    assert Engine(plain, ByteTokenizer()).step.graphs is None


def _requests(lengths: list[int], new: list[int]) -> list[GenerateRequest]:
    gen = torch.Generator().manual_seed(1)
    return [GenerateRequest(prompt_ids=torch.randint(1, 255, (n,), generator=gen).tolist(), max_new_tokens=m,
                            stop_at_eos=False) for n, m in zip(lengths, new, strict=True)]


@ON_GPU
@pytest.mark.skipif(not CUDA, reason="CUDA graphs need a CUDA device (bench/gpu_run.sh runs these)")
@pytest.mark.parametrize("variant", sorted(CAPTURABLE))
def test_graphed_generations_equal_eager_ones(variant: str) -> None:
    """Rows of different lengths leaving at different steps (new layouts, new captures); fp32,
    where the eager step's narrower key splits cannot flip a greedy choice."""
    model = variant_model(variant, num_layers=3).to("cuda")
    model.backend = "triton"
    requests = _requests([37, 80, 5, 130, 64], [24, 9, 40, 17, 33])
    eager = Engine(model, ByteTokenizer(), cuda_graphs=False, prefix_cache=False).generate_until(requests)
    graphed_engine = Engine(model, ByteTokenizer(), cuda_graphs=True, prefix_cache=False)
    graphed = graphed_engine.generate_until(requests)
    assert [g.token_ids for g in graphed] == [g.token_ids for g in eager]
    graphs = graphed_engine.step.graphs
    assert graphs.replays > 3 * graphs.captures > 0
    assert graphs.captures <= graphs.eager_steps


@ON_GPU
@pytest.mark.skipif(not CUDA, reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("variant", sorted(CAPTURABLE))
@torch.inference_mode()
def test_a_replay_computes_what_the_eager_full_width_step_computes_in_bf16(variant: str) -> None:
    """The same kernels on the same shapes: a replayed step's logits are the eager step's, bit
    for bit, step after step."""
    model = variant_model(variant, num_layers=3).to("cuda", torch.bfloat16)
    model.backend = "triton"
    graphs = DecodeGraphs(model)
    graphed, eager = _batch(model, [9, 40, 23], True), _batch(model, [9, 40, 23], True)
    for step in range(6):
        tokens = [3 + step, 50 + step, 100 + step]
        ours = graphs(tokens, graphed)
        theirs = model.decode_step(torch.tensor(tokens, device="cuda"), eager)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert graphs.replays == 5 and graphs.captures == 1


@ON_GPU
@pytest.mark.skipif(not CUDA, reason="a CUDA device's own sync check")
@torch.inference_mode()
def test_a_replayed_step_passes_the_sync_debug_mode() -> None:
    model = variant_model("softmax", num_layers=2).cuda()
    model.backend = "triton"
    graphs = DecodeGraphs(model)
    batch = _batch(model, [12, 30], True)
    graphs([1, 2], batch)  # eager: a new layout
    graphs([3, 4], batch)  # captured and replayed
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        graphs([5, 6], batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert graphs.replays == 2 and graphs.captures == 1 and batch.host_lengths == [15, 33]
