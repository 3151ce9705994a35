"""Attention variants: time and peak extra memory of each implementation.

CPU: for every registered variant and length N, the streaming PyTorch path
(backend `torch`, what a CPU evaluation runs) against the dense reference
(skipped when its N x N matrices would not fit; the table says so) and
against `scaled_dot_product_attention`; softmax also through the pure
PyTorch online-softmax loop (`online_softmax_chunked`, the path the
statistics use). Each measurement runs in a fresh subprocess; peak extra
memory is the rise of the process's peak RSS (VmHWM, reset through
/proc/self/clear_refs) over the RSS with the inputs allocated, with glibc's
mmap threshold fixed so freed blocks go back to the OS.

CUDA: Triton kernels against SDPA (flash in bf16; PyTorch's default fp32
kernel in fp32) in bf16 and fp32, FLOP/s and percent of the H100 dense bf16
peak (989.4 TFLOP/s), causal forward FLOPs = 2 * B * H * N^2 * d (softmax
equivalent; diff runs two softmaxes over a 2d-wide value).

The attention is timed alone from `AttentionLayer.attend` (q, k, v, any other
named tensors and the layer input x are captured from one forward pass of a
random layer of the variant), with the variant's output treatment (`finish`).

Usage: python bench/attention.py [--quick] [--device cpu|cuda] [--out DIR]
       [--sizes 1024,4096] [--variants softmax,cog] [--block 1024]"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

H100_BF16_PEAK = 989.4e12
SIZES = (1024, 4096, 16384, 32768)
QUICK_SIZES = (1024, 4096)
PARAMS = {"intg": {"signals": 8}}


def _status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


class _Captured(Exception):
    pass


def core_inputs(variant: str, n: int, heads: int, head_dim: int, device: str, dtype: torch.dtype, block: int):
    """A random layer of the variant and the (q, k, v, ..., x) its `attend` sees."""
    from checkpoints.attention.base import AttentionContext
    from checkpoints.attention.registry import build_attention
    from checkpoints.config import AttentionConfig, ModelConfig
    from checkpoints.rope import Rotary

    config = ModelConfig(hidden_size=heads * head_dim, num_layers=1, num_heads=heads, head_dim=head_dim,
                         intermediate_size=64, vocab_size=256, max_position_embeddings=max(n, 2048),
                         attention=AttentionConfig(variant=variant, params=PARAMS.get(variant, {})))
    torch.manual_seed(0)
    layer = build_attention(config, 0).to(device=device, dtype=dtype).eval()
    rotary = Rotary(config)
    rotary.set_length(n)
    ctx = AttentionContext(rotary=rotary, start=0, backend="torch", block_size=block)
    captured = {}

    def capture(ctx, **t):
        captured.update({name: t_.contiguous() for name, t_ in t.items()})
        raise _Captured

    layer.attend = capture
    x = torch.randn(1, n, config.hidden_size, device=device, dtype=dtype)
    with torch.no_grad():
        try:
            layer(x, ctx, None)
        except _Captured:
            pass
    del layer.attend
    captured["x"] = x
    if "q" not in captured:  # the variant's forward does not route through `attend`: time the whole layer
        captured["whole_layer"] = True
    return layer, captured, ctx


def run_path(path: str, layer, c: dict, ctx):
    """One call of an implementation on the captured inputs."""
    import torch.nn.functional as F

    from checkpoints.attention.backend import Backend
    from checkpoints.attention.softmax.chunked import online_softmax_chunked

    backends = {"chunked": Backend.TORCH, "dense": Backend.REFERENCE, "triton": Backend.TRITON}
    if c.get("whole_layer"):
        ctx.backend = backends[path]
        with torch.no_grad():
            return layer(c["x"], ctx, None)
    q, k, v = c["q"], c["k"], c["v"]
    with torch.no_grad():
        if path == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
        if path == "online":
            return online_softmax_chunked(q, k, v, 0, scale=q.shape[-1] ** -0.5, block=ctx.block_size)[0]
        ctx.backend = backends[path]
        return layer.finish(layer.attend(ctx, **{name: t for name, t in c.items() if name != "x"}), c["x"])


def worker(spec: dict) -> dict:
    """Runs in a fresh process: time and peak extra RSS of one (variant, N, path) on CPU."""
    torch.set_num_threads(spec["threads"])
    layer, c, ctx = core_inputs(spec["variant"], spec["n"], spec["heads"], spec["head_dim"], "cpu",
                                torch.float32, spec["block"])
    if spec["n"] <= 4096:  # warm-up on a short prefix (allocator, thread pool)
        warm = {key: val if key == "whole_layer" else val[:, :256] if key == "x" else val[:, :, :256]
                for key, val in c.items()}
        run_path(spec["path"], layer, warm, ctx)
    base = _status_mib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    t0 = time.perf_counter()
    out = run_path(spec["path"], layer, c, ctx)
    elapsed = time.perf_counter() - t0
    peak = _status_mib("VmHWM")
    assert not torch.isnan(out).any()
    res = {"time_s": elapsed, "peak_extra_mib": peak - base}
    if c.get("whole_layer"):
        res["note"] = "whole layer timed (its forward does not go through attend): projections included"
    return res


def cpu_rows(args) -> list[dict]:
    from checkpoints.attention.registry import available_variants

    variants = args.variants or available_variants()
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "TRITON_INTERPRET": "0"}
    rows = []
    for n in sizes:
        qkvo_mib = 4 * args.heads * n * args.head_dim * 4 / 2**20
        for variant in variants:
            # scores, weights and softmax temporaries; intg's reference keeps one score matrix per signal
            dense_gib = (3 + PARAMS.get(variant, {}).get("signals", 0)) * args.heads * n * n * 4 / 2**30
            paths = ["chunked", "dense"] + (["sdpa", "online"] if variant == "softmax" else [])
            for path in paths:
                row = {"variant": variant, "n": n, "path": path, "dtype": "float32", "qkvo_mib": qkvo_mib}
                skip = None
                if n > 4096 and args.long_variants and variant not in args.long_variants:
                    skip = "skipped: not run above N = 4096 (CPU time budget, --long-variants)"
                elif path == "online" and n > args.max_online_n:
                    skip = f"skipped: online loop not run above N = {args.max_online_n} (--max-online-n)"
                elif path == "dense" and dense_gib > args.dense_limit_gib:
                    skip = f"skipped: dense needs ~{dense_gib:.0f} GiB (> {args.dense_limit_gib} GiB)"
                elif f"{variant}:{n}:{path}" in (args.skip or []):
                    skip = f"skipped: {args.skip_note or 'by --skip'}"
                if skip:
                    if args.record_skips:
                        row["note"] = skip
                        rows.append(row)
                    print({**row, "note": skip}, flush=True)
                    continue
                spec = dict(variant=variant, n=n, path=path, heads=args.heads, head_dim=args.head_dim,
                            block=args.block, threads=args.threads)
                try:
                    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env,
                                          capture_output=True, text=True, cwd=REPO, timeout=args.timeout_s)
                except subprocess.TimeoutExpired:
                    row["note"] = f"skipped: over the {args.timeout_s:.0f} s per-measurement limit (--timeout-s)"
                    rows.append(row)
                    print(row, flush=True)
                    continue
                if proc.returncode:
                    row["note"] = "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
                else:
                    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
                rows.append(row)
                print(row, flush=True)
    return rows


def cuda_rows(args) -> list[dict]:
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from checkpoints.attention.registry import available_variants

    variants = args.variants or available_variants()
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        for n in sizes:
            flops = 2 * args.heads * n * n * args.head_dim
            for variant in [None, *variants]:  # None: the SDPA baseline
                row = {"variant": variant or "softmax", "n": n, "dtype": str(dtype).removeprefix("torch."),
                       "path": "sdpa" if variant is None else "triton"}
                try:
                    layer, c, ctx = core_inputs(variant or "softmax", n, args.heads, args.head_dim, "cuda",
                                                dtype, args.block)
                    if variant is None:
                        q, k, v = c["q"], c["k"], c["v"]
                        backends = [SDPBackend.FLASH_ATTENTION] if dtype != torch.float32 else \
                            [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
                        row["path"] = "sdpa-flash" if dtype != torch.float32 else "sdpa (fp32 default)"
                        fn = lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
                        with sdpa_kernel(backends):
                            fn()
                            torch.cuda.reset_peak_memory_stats()
                            base = torch.cuda.memory_allocated()
                            ms = triton.testing.do_bench(fn)
                    else:
                        fn = lambda layer=layer, c=c, ctx=ctx: run_path("triton", layer, c, ctx)  # noqa: E731
                        fn()
                        torch.cuda.reset_peak_memory_stats()
                        base = torch.cuda.memory_allocated()
                        ms = triton.testing.do_bench(fn)
                    row.update(time_s=ms / 1e3, peak_extra_mib=(torch.cuda.max_memory_allocated() - base) / 2**20,
                               tflops=flops / (ms / 1e3) / 1e12)
                    row["pct_h100_bf16_peak"] = 100 * flops / (ms / 1e3) / H100_BF16_PEAK
                    if c.get("whole_layer"):
                        row["note"] = "whole layer timed (its forward does not go through attend): projections included"
                    del layer, c
                except Exception as e:  # one failing variant must not hide the others
                    row["note"] = f"failed: {type(e).__name__}: {str(e)[:200]}"
                torch.cuda.empty_cache()
                rows.append(row)
                print(row, flush=True)
    return rows


def markdown(rows: list[dict], device: str, info: dict) -> str:
    cols = ["variant", "n", "dtype", "path", "time_s", "peak_extra_mib", "qkvo_mib", "tflops", "pct_h100_bf16_peak", "note"]
    cols = [c for c in cols if any(c in r for r in rows)]
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else ("" if v is None else str(v))  # noqa: E731
    lines = [f"Attention benchmark ({device}; batch 1, {info['heads']} heads, d = {info['head_dim']}, "
             f"block {info['block']}, {info['threads']} threads, torch {info['torch']})", ""]
    if device == "cpu":
        lines += ["Paths: `chunked` = the `torch` backend a CPU evaluation runs (for softmax, ssmax, gated, intg and "
                  "diff without statistics that is PyTorch's fused SDPA kernel), `online` = the pure PyTorch "
                  "online-softmax loop (what runs when statistics are collected), `dense` = the reference. "
                  "`peak_extra_mib` is the rise of peak RSS over the inputs; `qkvo_mib` is Q+K+V+O at "
                  "softmax width (diff's own are twice as wide).", ""]
    notes = [r["note"] for r in info.get("runs", [info]) if r.get("note")]
    lines += [f"- {n}" for n in notes] + ([""] if notes else [])
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="N in 1k, 4k only")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--variants", type=lambda s: s.split(","))
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--dense-limit-gib", type=float, default=4.0)
    p.add_argument("--long-variants", type=lambda s: s.split(","), help="only these variants above N = 4096")
    p.add_argument("--max-online-n", type=int, default=1 << 30, help="skip the softmax online loop above this N")
    p.add_argument("--timeout-s", type=float, help="give up on one measurement after this many seconds (recorded)")
    p.add_argument("--skip", type=lambda s: s.split(","), help="VARIANT:N:PATH entries not to run (recorded)")
    p.add_argument("--skip-note", help="reason recorded for the --skip entries")
    p.add_argument("--no-record-skips", dest="record_skips", action="store_false",
                   help="leave skipped measurements out of the saved results")
    p.add_argument("--note", help="a line saved with this run (machine load, what was skipped and why)")
    p.add_argument("--append", action="store_true", help="merge into existing results (same variant/n/path/dtype replaced)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    args.head_dim = args.head_dim or (64 if args.device == "cpu" else 128)
    rows = cpu_rows(args) if args.device == "cpu" else cuda_rows(args)
    info = {"device": args.device, "cpu": platform.processor() or platform.machine(), "threads": args.threads,
            "torch": torch.__version__, "batch": 1, "heads": args.heads, "head_dim": args.head_dim,
            "block": args.block, "quick": args.quick, "sizes": args.sizes or (QUICK_SIZES if args.quick else SIZES),
            "variants": args.variants, "note": args.note}
    if args.device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    previous = out / f"attention_{args.device}.json"
    if args.append and previous.exists():
        key = lambda r: (r["variant"], r["n"], r["path"], r["dtype"])  # noqa: E731
        new = {key(r) for r in rows}
        old = json.loads(previous.read_text())
        rows = [r for r in old["rows"] if key(r) not in new] + rows
        rows.sort(key=lambda r: (r["dtype"], r["n"], r["variant"]))
        info = {**info, "runs": old["info"].get("runs", [old["info"]]) + [dict(info)]}
    (out / f"attention_{args.device}.json").write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")
    (out / f"attention_{args.device}.md").write_text(markdown(rows, args.device, info))
    print(f"wrote {out}/attention_{args.device}.json and .md")


if __name__ == "__main__":
    main()
