"""Batched prefill of short prompts: one right-padded forward over several prompts
against one forward per prompt, on this machine, through the engine
(`Engine(batch_prefill_tokens=...)`), with identical outputs checked.

Workloads per prompt length: `--prompts` prompts of about that many tokens (random
lengths in [n/2, n], so padding costs what it costs) generating 1 token, and as
many log-likelihood requests (the same contexts, 4-token continuations). The
engine's CPU default (`CPU_BATCH_PREFILL_TOKENS`) is set from this table.

Usage: python bench/batched_prefill.py [--checkpoint /work/smollm2-hf] [--lengths 32,128,512,2048]"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed(fn, rounds: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=str(REPO / "var" / "models" / "smollm2-135m-instruct"))
    ap.add_argument("--lengths", default="32,128,512,2048")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from checkpoints.engine import Engine, GenerateRequest, LoglikelihoodRequest
    from checkpoints.loading import load_model

    loaded = load_model(args.checkpoint, device=args.device)
    vocab = loaded.config.vocab_size
    rng = random.Random(0)
    rows = []
    for n in map(int, args.lengths.split(",")):
        prompts = [[rng.randrange(100, vocab) for _ in range(rng.randint(n // 2, n))] for _ in range(args.prompts)]
        gen = [GenerateRequest(p, max_new_tokens=1, stop_at_eos=False) for p in prompts]
        ll = [LoglikelihoodRequest(p, tuple(rng.randrange(100, vocab) for _ in range(4))) for p in prompts]
        entry: dict = {"max_tokens": n, "prompts": args.prompts}
        for kind, run in (("generate", lambda e, gen=gen: [g.token_ids for g in e.generate_until(gen)]),
                          ("loglikelihood", lambda e, ll=ll: e.loglikelihood(ll))):
            single = Engine(loaded.model, loaded.tokenizer, prefix_cache=False, batch_prefill_tokens=0)
            batched = Engine(loaded.model, loaded.tokenizer, prefix_cache=False, batch_prefill_tokens=n + 8)
            run(single)  # warm-up
            t_single, out_single = timed(lambda single=single, run=run: run(single), args.rounds)
            t_batched, out_batched = timed(lambda batched=batched, run=run: run(batched), args.rounds)
            if kind == "generate":
                same = out_single == out_batched
            else:
                same = all(a[1] == b[1] and abs(a[0] - b[0]) < 1e-3 for a, b in zip(out_single, out_batched,
                                                                                   strict=True))
            entry[kind] = {"one_at_a_time_s": t_single, "batched_s": t_batched, "speedup": t_single / t_batched,
                           "identical": same}
            print(f"<= {n} tokens {kind}: one at a time {t_single:.2f} s, batched {t_batched:.2f} s, "
                  f"x{t_single / t_batched:.2f}, identical {same}", flush=True)
        rows.append(entry)
    report = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
                          "device": args.device, "torch": torch.__version__,
                          "load_average": os.getloadavg()},
              "checkpoint": Path(args.checkpoint).name, "rounds": args.rounds, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "batched_prefill" if args.device == "cpu" else f"batched_prefill_{args.device}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# Batched prefill of short prompts ({args.device}, {args.threads} threads)", "",
             f"{Path(args.checkpoint).name}, fp32, {args.prompts} prompts of random length in [n/2, n], medians of "
             f"{args.rounds} rounds; speedup = one-at-a-time time / batched time (> 1: batching is faster).", "",
             "| n (max tokens) | generate 1-by-1 s | batched s | speedup | identical | loglik 1-by-1 s | batched s | "
             "speedup | identical |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g, ll = r["generate"], r["loglikelihood"]
        lines.append(f"| {r['max_tokens']} | {g['one_at_a_time_s']:.2f} | {g['batched_s']:.2f} | {g['speedup']:.2f}x | "
                     f"{g['identical']} | {ll['one_at_a_time_s']:.2f} | {ll['batched_s']:.2f} | {ll['speedup']:.2f}x | "
                     f"{ll['identical']} |")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
