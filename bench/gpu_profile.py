"""Where a long prefill's and a decode step's GPU time goes (issue #41 item 2): torch.profiler
over one lctx prefill of --n tokens (the engine's chunk size and --chunk) and over decode
steps of a batch (eager and as a CUDA graph), on a checkpoint bench/gpu_model.py built; the
kernels by total CUDA time go to --out (text), with each run's wall time.

Usage: python bench/gpu_profile.py --checkpoint DIR [--n 32768] [--chunk 32768] [--out FILE]"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def table(prof, rows: int = 22) -> str:
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=60)


def main() -> None:
    from checkpoints.engine.cuda_graphs import DecodeGraphs
    from checkpoints.generate import DEFAULT_CHUNK, prefill
    from checkpoints.kv.block_pool import BlockPool
    from checkpoints.kv.paged_batch import PagedBatch
    from checkpoints.kv.paged_seq import PagedSeq
    from checkpoints.loading import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--chunk", type=int, default=32768)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--cache", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu_profile.txt")
    args = ap.parse_args()
    model = load_model(args.checkpoint, dtype="bfloat16", device="cuda", backend="triton").model
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (args.n,), generator=torch.Generator().manual_seed(0)).tolist()
    report = []
    with torch.inference_mode():
        for chunk in dict.fromkeys([DEFAULT_CHUNK, args.chunk]):
            prefill(model, ids[:2048], model.new_cache(), chunk)  # compiled and tuned outside the profile
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                t0 = time.perf_counter()
                prefill(model, ids, model.new_cache(), chunk)
                torch.cuda.synchronize()
                wall = time.perf_counter() - t0
            report.append(f"## prefill of {args.n} tokens in chunks of {chunk}: {wall:.3f} s wall (profiled)\n"
                          + table(prof))
        pool = BlockPool(len(model.layers), model.device)
        seqs = []
        for b in range(args.batch):
            seq = PagedSeq(pool)
            prefill(model, ids[b : b + args.cache], seq, DEFAULT_CHUNK)
            seqs.append(seq)
        tokens = list(range(5, 5 + args.batch))
        for graphed in (False, True):
            batch = PagedBatch(pool)
            for seq in seqs:
                batch.join(seq.fork(), reach=args.cache + 64)
            graphs = DecodeGraphs(model)

            def step(graphs=graphs, batch=batch, graphed=graphed):
                if graphed:
                    return graphs(tokens, batch)
                return model.decode_step(torch.tensor(tokens, device="cuda"), batch)

            for _ in range(3):
                step()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                t0 = time.perf_counter()
                for _ in range(10):
                    step()
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t0) / 10
            report.append(f"## decode step, batch {args.batch}, cache {args.cache}, "
                          f"{'CUDA graph' if graphed else 'eager'}: {1e3 * wall:.2f} ms wall per step (profiled)\n"
                          + table(prof))
    args.out.write_text("\n\n".join(report) + "\n")
    print("\n\n".join(report))


if __name__ == "__main__":
    main()
