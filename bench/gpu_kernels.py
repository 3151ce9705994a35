"""Triton attention kernels against PyTorch's SDPA on a CUDA GPU: prefill
TFLOP/s and decode memory bandwidth (issue #30; docs/protocols/attention.md).

Prefill: every kernel of the package (the softmax family with a window, a
softcap and the signed cog form; softpick and rectified softmax — scalable
softpick runs softpick's kernel on scaled queries, ssmax/gated/intg/diff the
softmax kernel; pointwise rela/tra/tda; 1.5-entmax) at N in --sizes, causal,
batch = --tokens // N so every size fills the GPU alike, Hq = 32 query heads
over 8 key/value heads (GQA 4). FLOPs are the issue's convention, causal
forward = 2 B H N^2 d (the softmax-equivalent count: pointwise and entmax do
more per score). Baselines: SDPA's flash backend in bf16/fp16 (keys
repeated to the query heads outside the timed call where flash refuses
GQA), PyTorch's own fp32 choice in fp32.

Decode: one query token per row over a cache of S keys, B rows; achieved
bandwidth = K + V bytes read / time, against the copy bandwidth measured
at the start (bytes read + written) and the datasheet figure.

Autotuning: the kernels' tile choice is cached per key (not per length);
the cache is cleared before each new (N, d, dtype) so every length is tuned
for itself, as a fresh process would. Rows are written to --out as they come.

Usage: python bench/gpu_kernels.py [--sizes 4096,16384,32768] [--out bench/results/gpu_kernels.json]
       [--warm-only --variants softmax,softpick]   (compile and tune only, small N: a cache warm-up)"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_model import DATASHEET  # noqa: E402 - dense bf16 FLOP/s, HBM bytes/s

from checkpoints.attention.entmax import triton as te  # noqa: E402
from checkpoints.attention.pointwise import triton as tp  # noqa: E402
from checkpoints.attention.pointwise.threshold import rms_normalize  # noqa: E402
from checkpoints.attention.softmax import triton as tk  # noqa: E402
from checkpoints.attention.softpick import triton as ts  # noqa: E402

HQ, HKV = 32, 8
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: TRITON_INTERPRET=1 and --smoke only


def kernels(d: int) -> dict:
    """name -> fn(q, k, v, q_offset) over the package's Triton entry points."""
    scale = 1 / math.sqrt(d)
    beta = torch.full((HQ,), 0.8, device=DEVICE)
    return {
        "softmax": lambda q, k, v, o: tk.attention(q, k, v, o, scale=scale),
        "softmax+window4096": lambda q, k, v, o: tk.attention(q, k, v, o, scale=scale, window=4096),
        "softmax+softcap50": lambda q, k, v, o: tk.attention(q, k, v, o, scale=scale, softcap=50.0),
        "cog (signed)": lambda q, k, v, o: tk.attention(q, k, v, o, scale=scale, signed=True),
        "softpick": lambda q, k, v, o: ts.softpick_attention(q, k, v, o),
        "rectified_softmax": lambda q, k, v, o: ts.softpick_attention(q, k, v, o, denominator="exp"),
        "rela": lambda q, k, v, o: tp.rela_attention(q, k, v, o),
        "tra": lambda q, k, v, o: tp.threshold_attention([q], [k], v, o, beta, 2.0),
        "tda": lambda q, k, v, o: tp.threshold_attention([q, q], [k, k], v, o, beta, 2.0, 0.5),
        "entmax15": lambda q, k, v, o: te.entmax_attention(q, k, v, o, 1.5),
    }


NORMALISED = {"tra", "tda"}  # take RMS-normalised q and k, as the layer gives them


def clear_autotune() -> None:
    import triton

    for mod in (tk, ts, tp, te):
        for obj in vars(mod).values():
            if isinstance(obj, triton.runtime.autotuner.Autotuner):
                obj.cache.clear()


def bench_ms(fn) -> float:
    import triton.testing

    if DEVICE == "cpu":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return triton.testing.do_bench(fn, warmup=10, rep=60)


def copy_bandwidth() -> float:
    n = 2 * 1024**3 if DEVICE == "cuda" else 1 << 20
    x = torch.empty(n, dtype=torch.uint8, device=DEVICE)
    y = torch.empty_like(x)
    ms = bench_ms(lambda: y.copy_(x))
    return 2 * n / (ms / 1e3)


def sdpa(q, k, v, causal: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if q.dtype == torch.float32:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True), "sdpa (fp32 default)"
    kr, vr = k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        try:
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            keys = (k, v, True)
        except RuntimeError:
            keys = (kr, vr, False)

    def run():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, keys[0], keys[1], is_causal=causal, enable_gqa=keys[2])

    return run, "sdpa-flash" + ("" if keys[2] else " (keys repeated)")


def sdpa_cudnn(q, k, v, causal: bool):
    """SDPA's cuDNN backend (on Hopper, cuDNN's FlashAttention-3-class kernels): what a
    Hopper-class prefill path for plain softmax could call, measured beside the Triton kernel
    before any is wired in (issue #41 item 2). Keys repeated where it refuses GQA."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        try:
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            keys = (k, v, True)
        except RuntimeError:
            keys = (k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1), False)

    def run():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, keys[0], keys[1], is_causal=causal, enable_gqa=keys[2])

    return run, "sdpa-cudnn" + ("" if keys[2] else " (keys repeated)")


def inputs(b: int, t: int, s: int, d: int, dtype: torch.dtype, name: str):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    q = torch.randn(b, HQ, t, d, device=DEVICE, dtype=dtype, generator=g)
    k = torch.randn(b, HKV, s, d, device=DEVICE, dtype=dtype, generator=g)
    v = torch.randn(b, HKV, s, d, device=DEVICE, dtype=dtype, generator=g)
    if name in NORMALISED:
        q, k = rms_normalize(q, None, 1e-6), rms_normalize(k, None, 1e-6)
    return q, k, v


class Saver:
    def __init__(self, path: Path, info: dict) -> None:
        """Rows of an earlier run into the same file are kept (one run per dtype/d, say)."""
        self.path, self.doc = path, {"info": [info], "prefill": [], "decode": []}
        if path.exists():
            old = json.loads(path.read_text())
            self.doc = {**old, "info": [*old["info"], info]}

    def add(self, part: str, row: dict) -> None:
        self.doc[part].append(row)
        print(part, row, flush=True)
        self.path.write_text(json.dumps(self.doc, indent=1) + "\n")


def prefill_rows(args, save: Saver, peak_flops: float) -> None:
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for d in args.head_dims:
            for n in args.sizes:
                if dtype == torch.float32 and n > args.fp32_max_n:
                    continue
                b = max(1, args.tokens // n)
                flops = 2 * b * HQ * n * n * d
                clear_autotune()
                table = kernels(d)
                names = [x for x in table if (not args.variants or x in args.variants)
                         and (d == 128 or x in args.d64_variants) and (dtype != torch.float32 or x in args.fp32_variants)]
                # cuDNN last: a slow first plan must not push the Triton rows past the stage's time limit
                baselines = [None] if dtype == torch.float32 else [None, "cudnn"]
                for name in [None, *names, *baselines[1:]]:
                    row = {"variant": "softmax" if name in baselines else name, "path": "triton", "dtype": dtype_name,
                           "d": d, "n": n, "batch": b, "hq": HQ, "hkv": HKV}
                    try:
                        q, k, v = inputs(b, n, n, d, dtype, row["variant"])
                        if name is None:
                            fn, row["path"] = sdpa(q, k, v, True)
                        elif name == "cudnn":
                            row["path"] = "sdpa-cudnn"  # named before the call: a refusal is recorded as its row
                            fn, row["path"] = sdpa_cudnn(q, k, v, True)
                        else:
                            kern = table[name]
                            fn = lambda kern=kern, q=q, k=k, v=v: kern(q, k, v, 0)  # noqa: E731
                        fn()
                        sync()
                        ms = bench_ms(fn)
                        row.update(ms=ms, tflops=flops / (ms / 1e3) / 1e12, pct_peak=100 * flops / (ms / 1e3) / peak_flops)
                    except Exception as e:  # one failing kernel must not hide the others
                        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                    save.add("prefill", row)
                    sync()


def decode_rows(args, save: Saver, copy_bw: float, sheet_bw: float) -> None:
    d, dtype = 128, torch.bfloat16
    for s in args.caches:
        b = max(1, args.decode_tokens // s)
        nbytes = 2 * b * HKV * s * d * 2
        clear_autotune()
        table = kernels(d)
        for name in [None, "softmax", "softpick", "rela", "entmax15"]:
            row = {"variant": name or "softmax", "path": "triton", "dtype": "bfloat16", "d": d, "cache": s, "batch": b}
            try:
                q, k, v = inputs(b, 1, s, d, dtype, name or "softmax")
                if name is None:
                    fn, row["path"] = sdpa(q, k, v, False)
                else:
                    kern = table[name]
                    fn = lambda kern=kern, q=q, k=k, v=v, s=s: kern(q, k, v, s - 1)  # noqa: E731
                fn()
                sync()
                ms = bench_ms(fn)
                bw = nbytes / (ms / 1e3)
                row.update(ms=ms, gb_s=bw / 1e9, pct_copy_bw=100 * bw / copy_bw, pct_datasheet_bw=100 * bw / sheet_bw)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            save.add("decode", row)
            sync()


def warm(args) -> None:
    """Compile and tune each selected kernel at a small N (fills Triton's on-disk cache)."""
    for dtype_name in args.dtypes:
        for d in args.head_dims:
            for name, kern in kernels(d).items():
                if args.variants and name not in args.variants:
                    continue
                dtype = getattr(torch, dtype_name)
                for t in (256, 1):
                    q, k, v = inputs(1, t, 256, d, dtype, name)
                    kern(q, k, v, 256 - t)
    sync()


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def main() -> None:
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    names = lambda s: s.split(",")  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=ints, default=[4096, 16384, 32768])
    p.add_argument("--caches", type=ints, default=[8192, 32768, 131072])
    p.add_argument("--dtypes", type=names, default=["bfloat16", "float32"])
    p.add_argument("--head-dims", type=ints, default=[128, 64])
    p.add_argument("--tokens", type=int, default=65536, help="batch = tokens // N")
    p.add_argument("--decode-tokens", type=int, default=1 << 20, help="decode batch = decode-tokens // cache")
    p.add_argument("--variants", type=names)
    p.add_argument("--d64-variants", type=names, default=["softmax", "softpick", "rela", "entmax15"])
    p.add_argument("--fp32-variants", type=names, default=["softmax", "softpick", "rela", "entmax15"])
    p.add_argument("--fp32-max-n", type=int, default=16384)
    p.add_argument("--no-decode", action="store_true")
    p.add_argument("--no-prefill", action="store_true")
    p.add_argument("--warm-only", action="store_true")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "gpu_kernels.json"))
    args = p.parse_args()
    if args.warm_only:
        warm(args)
        return
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter smoke run)"
    peak_flops, sheet_bw = next((v for k, v in DATASHEET.items() if k in gpu), DATASHEET["H100"])
    copy_bw = copy_bandwidth()
    info = {"gpu": gpu, "torch": torch.__version__, "triton": __import__("triton").__version__,
            "cuda": torch.version.cuda, "peak_bf16_flops": peak_flops, "datasheet_bw": sheet_bw,
            "copy_bw_measured": copy_bw, "hq": HQ, "hkv": HKV, "args": vars(args), "started": time.time()}
    save = Saver(Path(args.out), info)
    if not args.no_prefill:
        prefill_rows(args, save, peak_flops)
    if not args.no_decode:
        decode_rows(args, save, copy_bw, sheet_bw)


if __name__ == "__main__":
    main()
