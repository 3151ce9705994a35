"""Compile once per machine, not per length (issue #41): the kernels' length arguments are
not specialised, so after one prompt of a length bucket, prompts and caches of other
lengths in that bucket compile nothing; the autotuner keys on the bucket. A CUDA test (the
interpreter compiles nothing): bench/gpu_run.sh runs it."""

from __future__ import annotations

import pytest
import torch

from checkpoints.attention import triton_common as tc


def test_length_buckets_are_powers_of_two_from_1k() -> None:
    assert [tc.length_bucket(n) for n in (1, 700, 1024, 1025, 2048, 131_072, 131_073)] == [10, 10, 10, 11, 11, 17, 18]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiling happens on a GPU (bench/gpu_run.sh runs it)")
def test_new_lengths_in_a_bucket_compile_nothing() -> None:
    import triton

    from checkpoints.attention.softmax import triton as kernels

    compiled: list[str] = []
    previous = triton.knobs.runtime.jit_post_compile_hook
    triton.knobs.runtime.jit_post_compile_hook = lambda *a, **kw: compiled.append(str(kw.get("repr", "")))

    def run(t: int, s: int) -> None:
        q = torch.randn(1, 8, t, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 2, s, 64, device="cuda", dtype=torch.bfloat16)
        kernels.attention(q, k, k, s - t, scale=0.125)

    try:
        run(1000, 1000)  # prefill of bucket 2^10 (autotuned and compiled here)
        run(1, 1000)  # a decode step
        torch.cuda.synchronize()
        compiled.clear()
        for t, s in ((777, 777), (1001, 1001), (999, 1003), (1, 513), (1, 1017), (16, 1024)):
            run(t, s)
        torch.cuda.synchronize()
        assert compiled == [], compiled
    finally:
        triton.knobs.runtime.jit_post_compile_hook = previous
