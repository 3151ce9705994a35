"""Prefill throughput and peak memory: lctx against transformers on the same
random checkpoint (CPU, float32, same thread count), Llama-shaped or
Gemma-2-shaped (`--family gemma2`: alternating 4096-token sliding windows and
global layers, attention and final logit softcapping). Gemma 2's softcap
rules out SDPA in transformers: it runs its exact implementations, `eager`
(dense scores; skipped where they would not fit in memory) and
`flex_attention` (compiled by torch.compile in the warm-up).

Peak memory: each (implementation, length) runs in a fresh subprocess: a
warm-up prefill, then the peak RSS mark is reset and a second prefill's own
growth above the loaded, warmed-up model is recorded. Time: one subprocess per length loads
both models and alternates them (lctx then transformers, then the other way
round) for `repeats` rounds after a warm-up each, so load from other work on a
shared machine hits both alike; best and median are recorded with the load
average before and after.
Usage: python bench/prefill.py [--family llama|gemma2] [--lengths 1024,4096,16384] [--threads N] [--repeats R]
                               [--out bench/results]"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the test helpers build the tokenizer.json

ARCH = dict(vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=32768)
GEMMA2_ARCH = dict(ARCH, num_key_value_heads=4, head_dim=64, query_pre_attn_scalar=64, sliding_window=4096,
                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
# family -> (transformers config and model classes, architecture, {implementation: attn_implementation})
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", ARCH, {"transformers": "sdpa"}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", GEMMA2_ARCH,
               {"transformers-eager": "eager", "transformers-flex": "flex_attention"}),
}
FAMILY = "llama"  # set by main from --family; the children get it on their command line


def impls() -> tuple[str, ...]:
    return (*FAMILIES[FAMILY][3], "lctx")


def eager_fits(length: int) -> bool:
    """Whether transformers' eager attention (a few fp32 score tensors of heads x T x T
    alive at once) fits in half the available memory."""
    arch = FAMILIES[FAMILY][2]
    need = 4 * arch["num_attention_heads"] * length * length * 4
    return need < 0.5 * _meminfo_mb("MemAvailable") * 2**20


def _meminfo_mb(key: str) -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)
# Memory runs only: a fixed mmap threshold makes glibc return every large freed
# block to the system, so memory the warm-up freed cannot hide the measured
# prefill's growth (a dynamic threshold would keep it in the heap, resident).
MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def make_checkpoint(path: Path) -> None:
    import transformers

    config_cls, model_cls, arch, _ = FAMILIES[FAMILY]
    torch.manual_seed(0)
    getattr(transformers, model_cls)(getattr(transformers, config_cls)(**arch)).save_pretrained(path)
    from tests.checkpoints.hf_models import write_tokenizer

    write_tokenizer(path, arch["vocab_size"])


def _status_mb(key: str) -> float:
    """A memory figure of this process from /proc/self/status (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def reset_peak_rss() -> float:
    """Reset the peak-RSS mark to the current RSS (so loading's own peak does not
    hide the prefill's) and return the current RSS in MiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mb("VmRSS")


def prefill_step(impl: str, path: str, ids: torch.Tensor):
    """A function that runs one prefill of `ids` (1, T) with a fresh cache and
    returns the last position's logits (V,)."""
    if impl == "lctx":
        from checkpoints.generate import prefill
        from checkpoints.loading import load_model

        model = load_model(path).model
        return lambda: prefill(model, ids[0].tolist(), model.new_cache())
    import transformers

    model_cls = getattr(transformers, FAMILIES[FAMILY][1])
    hf = model_cls.from_pretrained(path, attn_implementation=FAMILIES[FAMILY][3][impl], dtype=torch.float32).eval()

    def step() -> torch.Tensor:
        with torch.inference_mode():
            return hf(ids, use_cache=True, logits_to_keep=1).logits[0, -1]

    return step


def prompt(length: int) -> torch.Tensor:
    return torch.randint(3, ARCH["vocab_size"], (1, length), generator=torch.Generator().manual_seed(0))


def measured(length: int) -> tuple[str, ...]:
    """The implementations run at `length` (eager only where its scores fit)."""
    return tuple(i for i in impls() if not (FAMILIES[FAMILY][3].get(i) == "eager" and not eager_fits(length)))


def child_memory(impl: str, path: str, length: int, threads: int) -> dict:
    """Runs inside a subprocess: load, a warm-up prefill (it pages in the weights,
    which may be memory-mapped), then the peak RSS growth during a second one."""
    torch.set_num_threads(threads)
    step = prefill_step(impl, path, prompt(length))
    step()
    base = reset_peak_rss()
    step()
    return {"impl": impl, "tokens": length, "peak_extra_mb": _status_mb("VmHWM") - base}


def child_time(path: str, length: int, threads: int, repeats: int) -> dict:
    """Runs inside a subprocess: both models, alternating rounds of one prefill each."""
    torch.set_num_threads(threads)
    ids = prompt(length)
    names = measured(length)
    steps = {impl: prefill_step(impl, path, ids) for impl in names}
    last = {impl: step() for impl, step in steps.items()}  # warm-up; the same logits, or no comparison
    logits_diff = max(float((last["lctx"] - last[i]).abs().max()) for i in names if i != "lctx")
    times: dict[str, list[float]] = {impl: [] for impl in names}
    load_before = os.getloadavg()[0]
    for r in range(repeats):
        for impl in names if r % 2 else names[::-1]:
            t0 = time.perf_counter()
            steps[impl]()
            times[impl].append(time.perf_counter() - t0)
    return {"tokens": length, "seconds": times, "load_before": load_before, "load_after": os.getloadavg()[0],
            "last_logits_max_abs_diff": logits_diff}


def run_child(args: list[str], env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, "--family", FAMILY, *args], capture_output=True, text=True,
                         check=True, env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--family", choices=sorted(FAMILIES), default="llama")
    ap.add_argument("--lengths", default="1024,4096,16384")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--_memory", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--_time", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    global FAMILY
    FAMILY = args.family
    if args._memory:
        impl, path, length = args._memory
        print(json.dumps(child_memory(impl, path, int(length), args.threads)))
        return
    if args._time:
        path, length = args._time
        print(json.dumps(child_time(path, int(length), args.threads, args.repeats)))
        return

    rows = []
    flags = ["--threads", str(args.threads), "--repeats", str(args.repeats)]
    with tempfile.TemporaryDirectory() as tmp:
        make_checkpoint(Path(tmp))
        for length in [int(x) for x in args.lengths.split(",")]:
            peak = {impl: run_child([*flags, "--_memory", impl, tmp, str(length)], MEMORY_ENV)["peak_extra_mb"]
                    for impl in measured(length)}
            timed = run_child([*flags, "--_time", tmp, str(length)])
            for impl in measured(length):
                secs = timed["seconds"][impl]
                rows.append({"impl": impl, "tokens": length, "seconds": min(secs),
                             "median_seconds": statistics.median(secs), "all_seconds": secs,
                             "tokens_per_s": length / min(secs), "peak_extra_mb": peak[impl],
                             "repeats": args.repeats, "load_before": timed["load_before"],
                             "load_after": timed["load_after"],
                             "last_logits_max_abs_diff": timed["last_logits_max_abs_diff"]})
                print(f"{impl:>12} {length:>6} tokens: {length / min(secs):8.0f} tok/s best, "
                      f"{length / statistics.median(secs):8.0f} median, peak +{peak[impl]:.0f} MB "
                      f"(load {timed['load_before']:.2f} -> {timed['load_after']:.2f}, "
                      f"logits max diff {timed['last_logits_max_abs_diff']:.1e})", flush=True)

    write_results(rows, args)


def write_results(rows: list[dict], args: argparse.Namespace) -> None:
    """prefill.{json,md} (Llama) or prefill_<family>.{json,md}: one table row per length,
    transformers' implementations against lctx."""
    theirs = list(FAMILIES[FAMILY][3])
    head = " | ".join(f"{i} tok/s | {i} / lctx time, best (median) | {i} peak MB" for i in theirs)
    table = [f"| tokens | lctx tok/s | lctx peak MB | {head} | load avg |",
             "|---|---|---|" + "---|---|---|" * len(theirs) + "---|"]
    by = {(r["impl"], r["tokens"]): r for r in rows}
    for length in sorted({r["tokens"] for r in rows}):
        ours = by[("lctx", length)]
        cells = []
        for impl in theirs:
            hf = by.get((impl, length))
            if hf is None:
                cells.append("not run: dense scores do not fit in memory | | ")
                continue
            cells.append(f"{hf['tokens_per_s']:.0f} | {hf['seconds'] / ours['seconds']:.2f} "
                         f"({hf['median_seconds'] / ours['median_seconds']:.2f}) | {hf['peak_extra_mb']:.0f}")
        table.append(f"| {length} | {ours['tokens_per_s']:.0f} | {ours['peak_extra_mb']:.0f} | {' | '.join(cells)} | "
                     f"{ours['load_before']:.2f} -> {ours['load_after']:.2f} |")
    config_cls, _, arch, attn = FAMILIES[FAMILY]
    meta = {"family": FAMILY, "arch": arch, "dtype": "float32", "threads": args.threads, "torch": torch.__version__,
            "transformers": __import__("transformers").__version__, "transformers_attention": attn,
            "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "note": "time: best (and median) of `repeats` alternating rounds in one process after a warm-up; "
                    "peak = growth of the peak RSS (VmHWM, reset after a warm-up prefill) during one prefill in a fresh "
                    "process with MALLOC_MMAP_THRESHOLD_=131072; load avg = 1-minute load average before and after "
                    "the timed rounds (2 shared cores: other work slows both alike); transformers keeps only the last "
                    "logits (logits_to_keep=1), lctx prefills in 4096-token chunks; a ratio above 1 means lctx is faster"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "prefill" if FAMILY == "llama" else f"prefill_{FAMILY}"
    title = f"# Prefill: lctx vs transformers, {FAMILY}-shaped (CPU, fp32)"
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    (out / f"{stem}.md").write_text(title + "\n\n" + "\n".join(table) + "\n\n" + json.dumps(meta) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
