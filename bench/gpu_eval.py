"""`lctx eval` as a whole command on a CUDA GPU (issue #41's end-to-end targets): RULER
niah_single_1 at 16k x 32 and 128k x 4 on a Llama-3.2-1B-shaped checkpoint with random bf16
weights and SmolLM2's tokenizer, against

- a bare `python -c "import torch, triton, transformers"` (what any tool pays to start here;
  the target is lctx at most 5 s (16k) and 12 s (128k) above it, warm cache);
- transformers' batched `generate` as a whole process (SDPA, bf16, left-padded, the prompt
  lengths lctx's samples had, 128 new tokens every row: the work lm-eval's `hf` model does),
  and its `generate` calls alone.

Each lctx run is a fresh process with a fresh --out. The first run of a length compiles and
tunes into TRITON_CACHE_DIR (`cold`); the next runs are `warm` (the machine's cache, as a
service's home keeps it); `eager` is a warm run with LCTX_CUDA_GRAPHS=0. The GPU-work floor
is each run's FLOPs (prefill of every prompt plus 128 decode steps of every row) at the
dense bf16 peak, or its bytes at the HBM bandwidth, whichever is larger.

Usage: python bench/gpu_eval.py --tokenizer DIR --work DIR --out FILE
           [--runs 16384:32,131072:4] [--modes cold,warm,eager] [--transformers 16384:16,131072:1]"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from checkpoints.requests import DEFAULT_DRAFT_TOKENS  # noqa: E402  (a light module: no torch)

SHAPE = "llama-3.2-1b"
NEW_TOKENS = 128  # RULER niah's generation budget


def checkpoint(work: Path, tokenizer: Path, shape: str, device: str) -> Path:
    """The shape with random bf16 weights (bench/gpu_model.py's), SmolLM2's tokenizer files."""
    from gpu_model import build

    folder = work / f"{shape}-smollm2-tok"
    if not (folder / "config.json").exists():
        build(shape, folder, device)
        for f in tokenizer.iterdir():
            shutil.copy(f, folder / f.name)
    return folder


def timed(cmd: list[str], env: dict[str, str], log: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.call(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    return time.perf_counter() - t0, rc


def samples(out: Path) -> list[dict]:
    path = out / "ruler" / "samples.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def floor_seconds(prompts: list[int], new: int) -> dict:
    """What the GPU needs for the run at its datasheet rates (bench/gpu_model.py's counts)."""
    from gpu_model import HBM, PEAK, datasheet, kv_bytes_per_token, prefill_flops, shape_params

    from checkpoints.requests import DEFAULT_MAX_BATCH

    per_token, weight_bytes = shape_params(SHAPE)
    kv = kv_bytes_per_token(SHAPE)
    flops = sum(prefill_flops(SHAPE, n) for n in prompts) + 2 * per_token * new * len(prompts)
    rows = len(prompts)
    batch = min(rows, DEFAULT_MAX_BATCH)
    steps = new * -(-rows // batch)
    bytes_ = steps * weight_bytes + new * sum(n + new // 2 for n in prompts) * kv
    compute, memory = flops / datasheet(PEAK), bytes_ / datasheet(HBM)
    return {"flops": flops, "bytes": bytes_, "compute_s": compute, "memory_s": memory, "floor_s": max(compute, memory)}


def hf_worker(folder: str, lengths: str, batch: int, device: str) -> None:
    """A whole transformers process: load, then `generate` over prompts of `lengths` tokens."""
    t_start = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM

    prompts = [int(x) for x in lengths.split(",")]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="sdpa").to(device).eval()
    gen = torch.Generator().manual_seed(0)
    t_gen = time.perf_counter()
    for lo in range(0, len(prompts), batch):
        group = prompts[lo : lo + batch]
        width = max(group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, n in enumerate(group):  # left-padded
            ids[i, width - n :] = torch.randint(3, 49152, (n,), generator=gen)
            mask[i, width - n :] = 1
        with torch.inference_mode():
            model.generate(ids.to(device), attention_mask=mask.to(device), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                           do_sample=False, pad_token_id=0)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
    print(json.dumps({"generate_s": time.perf_counter() - t_gen, "in_process_s": time.perf_counter() - t_start,
                      "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}))


def warm_jobs(folder: Path, length: int, n: int, work: Path, device: str, dtype: str) -> list[dict]:
    """Two identical jobs on one loaded model, as a warm worker runs them (service/runner/worker.py
    keeps the model, its engine and compiled kernels between jobs of the same model; Ray and
    the database are not on this machine: bench/job_latency.py measures what they add):
    each job's wall time from building its samples to its results, against the seconds the
    engine spent prefilling and decoding (the GPU-bound part)."""
    from checkpoints.opening import open_model
    from evaluators.registry import validate_task
    from evaluators.suite import run_suite

    opened = open_model(folder, dtype=dtype, device=device)  # as lctx eval and the worker open it (kernels warm)
    loaded, engine = opened.loaded, opened.engine
    task = validate_task({"name": "ruler", "tasks": "niah_single_1", "lengths": str(length), "samples": n})
    rows = []
    for job in (1, 2):
        out = work / f"warm-job-{length}-{job}"
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        results = run_suite(loaded, [task], out, engine)
        wall = time.perf_counter() - t0
        seconds = next(iter(results.values())).get("seconds", {})
        engine_s = seconds.get("prefill_s", 0) + seconds.get("decode_s", 0)
        rows.append({"part": "warm_job", "length": length, "samples": n, "job": job, "s": wall, "seconds": seconds,
                     "engine_s": engine_s, "wall_over_engine": wall / engine_s if engine_s else None,
                     "prefix_reused": next(iter(results.values())).get("prefix_cache")})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", type=Path)
    ap.add_argument("--work", type=Path, default=Path("/tmp/lctx-eval-bench"))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu_eval.json")
    ap.add_argument("--runs", default="16384:32,131072:4", help="LENGTH:SAMPLES,...")
    ap.add_argument("--modes", default="cold,warm,eager",
                    help="cold, warm, eager (no CUDA graphs), lookup (prompt lookup on: --draft-tokens)")
    ap.add_argument("--transformers", default="", help="LENGTH:BATCH,... (lengths of --runs) to run transformers on")
    ap.add_argument("--warm-job", default="", help="LENGTH:SAMPLES: two identical jobs on one loaded model")
    ap.add_argument("--bare", type=int, default=2, help="bare imports to time first (0: none)")
    ap.add_argument("--lengths-from", type=Path, help="a gpu_eval.json whose lctx runs give the prompt lengths")
    ap.add_argument("--smoke", action="store_true", help="CPU, a tiny shape, 1k x 2: checks the script")
    ap.add_argument("--hf-worker", nargs=4, metavar=("FOLDER", "LENGTHS", "BATCH", "DEVICE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_worker:
        return hf_worker(args.hf_worker[0], args.hf_worker[1], int(args.hf_worker[2]), args.hf_worker[3])
    import torch

    shape, device, dtype = (SHAPE, "cuda", "bfloat16") if not args.smoke else ("smoke-tok", "cpu", "float32")
    if args.smoke:
        from gpu_model import SHAPES

        SHAPES["smoke-tok"] = {**SHAPES["smoke"], "vocab_size": 49152, "max_position_embeddings": 4096}
        args.runs, args.transformers = "1024:2", "1024:2"

    args.work.mkdir(parents=True, exist_ok=True)
    log = args.out.with_suffix(".log")
    doc = json.loads(args.out.read_text()) if args.out.exists() else {"info": [], "rows": []}
    doc["info"].append({"gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
                        "argv": sys.argv[1:]})

    def add(row: dict) -> None:
        doc["rows"].append(row)
        print(row, flush=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")

    t0 = time.perf_counter()
    folder = checkpoint(args.work, args.tokenizer, shape, device)
    add({"part": "build", "s": time.perf_counter() - t0})
    env = {**os.environ, "TRITON_CACHE_DIR": str(args.work / "triton"), "TOKENIZERS_PARALLELISM": "false"}
    for i in range(1, args.bare + 1):
        s, rc = timed([sys.executable, "-c", "import torch, triton, transformers"], env, log)
        add({"part": "bare_import", "run": i, "s": s, "rc": rc})
    prompts_of: dict[int, list[int]] = {}
    for spec in args.runs.split(","):
        length, n = map(int, spec.split(":"))
        for earlier in sorted(args.work.glob(f"out-{length}-*")):  # an earlier run's prompt lengths
            prompts_of[length] = [r["prompt_tokens"] for r in samples(earlier)] or prompts_of.get(length, [])
        if args.lengths_from and not prompts_of.get(length):  # or those an earlier machine recorded
            rows = json.loads(args.lengths_from.read_text())["rows"]
            prompts_of[length] = next((r["prompt_lengths"] for r in rows if r.get("part") == "lctx_eval"
                                       and r["length"] == length and r.get("prompt_lengths")), [])
        for mode in filter(None, args.modes.split(",")):
            out = args.work / f"out-{length}-{mode}"
            shutil.rmtree(out, ignore_errors=True)
            run_env = {**env, **({"LCTX_CUDA_GRAPHS": "0"} if mode == "eager" else {})}
            cmd = [sys.executable, "-m", "cli.main", "eval", "--checkpoint", str(folder), "--task", "ruler",
                   "--option", "tasks=niah_single_1", "--lengths", str(length), "--samples", str(n),
                   "--device", device, "--dtype", dtype, "--out", str(out), "-q",
                   *(["--draft-tokens", str(DEFAULT_DRAFT_TOKENS)] if mode == "lookup" else [])]
            s, rc = timed(cmd, run_env, log)
            rows = samples(out)
            seconds = {}
            if (out / "results.json").exists():  # lctx's own account: loading, compiling, building, prefill, decoding
                seconds = json.loads((out / "results.json").read_text()).get("seconds", {})
                seconds.update(json.loads((out / "ruler" / "result.json").read_text()).get("seconds", {}))
            prompts_of[length] = [r["prompt_tokens"] for r in rows] or prompts_of.get(length, [])
            add({"part": "lctx_eval", "length": length, "samples": n, "mode": mode, "s": s, "rc": rc,
                 "samples_done": len(rows), "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
                 "prompt_lengths": [r["prompt_tokens"] for r in rows], "lctx_seconds": seconds,
                 **({"floor": floor_seconds(prompts_of[length], NEW_TOKENS)} if rows and not args.smoke else {})})
    if args.warm_job:
        length, n = map(int, args.warm_job.split(":"))
        for row in warm_jobs(folder, length, n, args.work, device, dtype):
            add(row)
    for spec in filter(None, args.transformers.split(",")):
        length, batch = map(int, spec.split(":"))
        prompts = prompts_of.get(length)
        if not prompts:
            add({"part": "transformers", "length": length, "error": "no lctx samples to take the prompt lengths from"})
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "--hf-worker", str(folder),
               ",".join(map(str, prompts)), str(batch), device]
        t = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
        s = time.perf_counter() - t
        with log.open("a") as f:
            f.write(proc.stdout + proc.stderr)
        inner = next((json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")), {})
        add({"part": "transformers", "length": length, "samples": len(prompts), "batch": batch, "s": s,
             "rc": proc.returncode, **inner})


if __name__ == "__main__":
    main()
