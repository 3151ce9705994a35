"""No host synchronisation inside a forward pass (issue #41): on a GPU every `.item()`,
`.tolist()`, `.cpu()`, `torch.equal` or truth test of a device tensor makes the host wait
for the device. Here (CPU) the calls themselves are counted, by patching them, for a
prefill chunk and a ragged decode step of a model of every attention variant, and for
the engine's decoding loop: none inside a forward, whatever the number of layers, and at
most two per decode step of the engine (the step's tokens are read back once)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

import checkpoints
from checkpoints import hostsync
from checkpoints.attention.registry import available_variants
from checkpoints.engine import Engine, GenerateRequest
from checkpoints.kv.block_pool import BlockPool
from checkpoints.kv.paged_batch import PagedBatch
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.sampler import pick
from checkpoints.tokenizer import ByteTokenizer
from tests.helpers import variant_model

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


OURS = str(Path(checkpoints.__file__).parent)


def _ours(depth: int = 2) -> bool:
    """Whether the call `depth` frames up comes from lctx's runtime (not Triton's interpreter,
    which reads its CPU tensors as it runs a kernel)."""
    return sys._getframe(depth).f_code.co_filename.startswith(OURS)


@contextmanager
def counting_reads() -> Iterator[Counter]:
    """Count every call of lctx's runtime that reads a tensor's value back to the host."""
    counts: Counter = Counter()
    originals = {name: getattr(torch.Tensor, name) for name in READS}
    equal = torch.equal

    def wrap(name: str, original):
        def counted(self, *args, **kwargs):
            if _ours():
                counts[name] += 1
            return original(self, *args, **kwargs)
        return counted

    def counted_equal(*args, **kwargs):
        if _ours():
            counts["torch.equal"] += 1
        return equal(*args, **kwargs)

    for name, original in originals.items():
        setattr(torch.Tensor, name, wrap(name, original))
    torch.equal = counted_equal
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
        torch.equal = equal


@pytest.fixture
def on_an_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths that read back only where it is free (a CPU tensor) behave as on a GPU."""
    monkeypatch.setattr(hostsync, "reads_are_free", lambda tensor: False)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("variant", available_variants())
@torch.inference_mode()
def test_a_forward_pass_reads_nothing_back(variant: str, backend: str, on_an_accelerator: None) -> None:
    """Both backends: the PyTorch paths and the Triton launchers (their kernels run in
    Triton's interpreter here, compiled on a GPU)."""
    for layers in (1, 3) if backend == "torch" else (1,):  # whatever the number of layers
        model = variant_model(variant, num_layers=layers)
        model.backend = backend
        pool = BlockPool(len(model.layers), block_size=8)  # the engine's rows: a paged pool
        cache = PagedSeq(pool)
        ids = torch.randint(0, 259, (1, 37))
        with counting_reads() as prefill:
            model(ids[:, :20], cache, logits_for="last")  # the first chunk
            model(ids[:, 20:], cache, logits_for="last")  # a later one, after cached tokens
        assert not prefill, (variant, layers, dict(prefill))

        batch = PagedBatch(pool)
        batch.join(cache, reach=48)
        other = PagedSeq(pool)
        model(ids[:, :9], other)
        batch.join(other, reach=48)  # two rows of different lengths
        with counting_reads() as decode:
            for _ in range(3):
                logits = model.decode_step(torch.tensor([5, 7]), batch)
            model.ragged_logits(torch.tensor([[5, 6, 7], [7, 8, 9]]), batch)  # a drafted continuation verified
            batch.advance([3, 1])
        assert not decode, (variant, layers, dict(decode))
        with counting_reads() as chosen:
            pick(logits, [(), (3, 4)])
        assert chosen == Counter(tolist=1)


@torch.inference_mode()
def test_the_engine_reads_each_decode_step_back_once() -> None:
    """The syncs the engine adds per decode step, measured as the difference between two
    runs that differ only in their number of decode steps."""
    model = variant_model("softmax", num_layers=3)
    engine = Engine(model, ByteTokenizer(), max_batch=4, prefix_cache=False, batch_prefill_tokens=0)
    prompts = [tuple(range(5, 5 + n)) for n in (11, 17, 23)]

    def reads(new_tokens: int) -> int:
        requests = [GenerateRequest(p, max_new_tokens=new_tokens, stop_at_eos=False) for p in prompts]
        with counting_reads() as counts:
            out = engine.generate_until(requests)
        assert all(len(g.token_ids) == new_tokens for g in out)
        return sum(counts.values())

    extra_steps = 8
    per_step = (reads(4 + extra_steps) - reads(4)) / extra_steps
    assert per_step <= 2, per_step


@torch.inference_mode()
def test_a_verifying_step_reads_back_once() -> None:
    """Steps that verify drafted tokens (prompt lookup) read the step's choices back once,
    like a decode step: prompts that repeat themselves draft at every step."""
    model = variant_model("softmax", num_layers=2)
    engine = Engine(model, ByteTokenizer(), max_batch=4, prefix_cache=False, batch_prefill_tokens=0, draft_tokens=4)
    prompts = [tuple(range(5, 5 + n)) * 3 for n in (11, 17, 23)]
    requests = [GenerateRequest(p, max_new_tokens=24, stop_at_eos=False) for p in prompts]
    with counting_reads() as counts:
        engine.generate_until(requests)
    assert engine.clock.drafted_tokens > 0
    assert sum(counts.values()) <= 2 * engine.clock.decode_steps + len(prompts), dict(counts)


@torch.inference_mode()
def test_entmax_without_its_early_exit_gives_the_same_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an accelerator the Newton search runs all its iterations instead of stopping when
    it has converged: the iterates no longer move, so the output is the same."""
    model = variant_model("entmax", num_layers=2)
    ids = torch.randint(0, 259, (1, 40))
    early, _ = model(ids)
    monkeypatch.setattr(hostsync, "reads_are_free", lambda tensor: False)
    full, _ = model(ids)
    torch.testing.assert_close(full, early, rtol=1e-5, atol=1e-5)


@pytest.mark.integration  # on a GPU the first call of each variant compiles its Triton kernels (5-20 s)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA device's own sync check (bench/gpu_run.sh runs it)")
@pytest.mark.parametrize("variant", ["softmax", "diff", "softpick", "entmax"])
@torch.inference_mode()
def test_a_cuda_decode_step_passes_the_sync_debug_mode(variant: str) -> None:
    """CUDA's own check: a decode step (Triton kernels) with synchronising calls made errors."""
    model = variant_model(variant, num_layers=2).cuda()
    model.backend = "triton"
    cache = PagedSeq(BlockPool(len(model.layers), "cuda"))
    model(torch.randint(0, 259, (1, 37), device="cuda"), cache)
    batch = PagedBatch(cache.pool)
    batch.join(cache, reach=48)
    tokens = torch.tensor([5], device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        model.decode_step(tokens, batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
