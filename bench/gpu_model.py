"""Whole models on a CUDA GPU: lctx (Triton backend) against transformers
(SDPA) on the same safetensors checkpoints (issue #30).

Checkpoints: random bf16 weights in SmolLM2-135M, Llama-3.2-1B and
Llama-3.1-8B shapes, built with transformers' own classes on the GPU and
saved with `save_pretrained` (safetensors), with a word-level tokenizer over
the whole vocabulary (the engine needs one; the prompts are token ids).

1. Logits at 4k: lctx bf16 and transformers bf16 against transformers fp32
   on the same ids (relative RMS error of the logits, max abs error, argmax
   agreement): lctx is within bf16 tolerance when its error is of the size of
   transformers' own bf16 error.
2. Prefill time and peak memory (above the loaded weights) of one prompt at
   --lengths: lctx `generate.prefill` (4096-token chunks) against one
   transformers forward with `logits_to_keep=1`. RoPE: the shape's own
   (Llama 3 scaling to 128k); SmolLM2 (8k trained) gets YaRN x4 at 32k and x16 at 128k
   on both sides.
3. Batched greedy decoding: B prompts of L tokens, `--new` tokens each;
   lctx `Engine.generate_until` (ragged KV cache, prefix cache off) against
   transformers `generate` (static batch, greedy); decode time = time(new+1
   tokens) - time(1 token), so prefill is left out of both; one short untimed
   run of each warms up first (Triton compiles, allocator).

Rows are written to --out as they come.
Usage: python bench/gpu_model.py [--shapes smollm2-135m,llama-3.2-1b,llama-3.1-8b] [--out FILE] [--smoke]"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
SHAPES = {
    "smollm2-135m": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         intermediate_size=1536, vocab_size=49152, rope_theta=100000.0, max_position_embeddings=8192,
                         tie_word_embeddings=True),
    "llama-3.2-1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64, intermediate_size=8192, vocab_size=128256, rope_theta=500000.0,
                         max_position_embeddings=131072, tie_word_embeddings=True,
                         rope_scaling={**LLAMA3_ROPE, "factor": 32.0}),
    "llama-3.1-8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         intermediate_size=14336, vocab_size=128256, rope_theta=500000.0,
                         max_position_embeddings=131072, tie_word_embeddings=False,
                         rope_scaling={**LLAMA3_ROPE, "factor": 8.0}),
    "smoke": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, vocab_size=512, rope_theta=10000.0, max_position_embeddings=256,
                  tie_word_embeddings=False),
}


def build(shape: str, folder: Path, device: str) -> None:
    """Random weights in the shape, saved by transformers (safetensors) with a tokenizer."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[shape], bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(folder)
    del model
    vocab = {f"t{i}": i for i in range(cfg.vocab_size)}
    tok = Tokenizer(WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "t1", "eos_token": "t2"}))


def rope_for(shape: str, n: int) -> dict | None:
    """YaRN where the shape's trained context is shorter than n (both sides get the same)."""
    trained = SHAPES[shape]["max_position_embeddings"]
    if n <= trained:
        return None
    factor = float(2 ** (n // trained - 1).bit_length())
    return {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": trained}


SHAPES_THETA = {name: shape["rope_theta"] for name, shape in SHAPES.items()}


def hf_model(folder: Path, dtype: torch.dtype, device: str, rope: dict | None):
    from transformers import AutoConfig, LlamaForCausalLM

    cfg = AutoConfig.from_pretrained(folder)
    if rope:
        theta = (cfg.rope_parameters or {}).get("rope_theta", SHAPES_THETA.get(folder.name, 10000.0))
        cfg.rope_parameters = {**rope, "rope_theta": theta}
        cfg.max_position_embeddings = int(cfg.max_position_embeddings * rope["factor"])
    return LlamaForCausalLM.from_pretrained(folder, config=cfg, dtype=dtype, attn_implementation="sdpa").to(device).eval()


def lctx_model(folder: Path, device: str, rope: dict | None):
    from checkpoints.loading import load_model

    override = None if rope is None else f"yarn:{rope['factor']:g}"
    return load_model(folder, dtype="bfloat16", device=device, rope=override,
                      backend="triton" if device == "cuda" else "torch")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def release(device: str) -> None:
    """Free what the last model or run left (so the next one's peak is its own)."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def peak_reset(device: str) -> int:
    release(device)
    if device != "cuda":
        return 0
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def peak_mib(device: str, base: int) -> float:
    return (torch.cuda.max_memory_allocated() - base) / 2**20 if device == "cuda" else float("nan")


def ids_for(n: int, vocab: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))


def parity(shape: str, folder: Path, device: str, n: int) -> dict:
    """Logits of all n positions: lctx bf16 and transformers bf16 against transformers fp32."""
    ids = ids_for(n, SHAPES[shape]["vocab_size"]).to(device)
    with torch.inference_mode():
        hf = hf_model(folder, torch.float32, device, None)
        ref = hf(ids).logits[0].float()
        del hf
        hf = hf_model(folder, torch.bfloat16, device, None)
        hf_bf16 = hf(ids).logits[0].float()
        del hf
        gc.collect()
        lm = lctx_model(folder, device, None).model
        ours, _ = lm(ids)
        ours = ours[0].float()
        del lm
    rms = ref.pow(2).mean().sqrt()

    def err(x):
        return {"rel_rms": ((x - ref).pow(2).mean().sqrt() / rms).item(), "max_abs": (x - ref).abs().max().item(),
                "argmax_agree": (x.argmax(-1) == ref.argmax(-1)).float().mean().item()}

    return {"part": "parity", "shape": shape, "n": n, "lctx_bf16_vs_hf_fp32": err(ours),
            "hf_bf16_vs_hf_fp32": err(hf_bf16), "lctx_vs_hf_bf16_max_abs": (ours - hf_bf16).abs().max().item()}


def head_dim(shape: str) -> int:
    c = SHAPES[shape]
    return c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])


def kv_bytes_per_token(shape: str) -> int:
    """bf16 keys and values one token leaves in the cache, over every layer."""
    c = SHAPES[shape]
    return c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * head_dim(shape) * 2


def shape_params(shape: str) -> tuple[int, int]:
    """(parameters a token's forward multiplies by, outside attention; bytes of all weights in
    bf16): the layers' matrices and the LM head (the embedding lookup is a read of one row)."""
    c = SHAPES[shape]
    h, layers, inter, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
    attn = h * head_dim(shape) * (2 * c["num_attention_heads"] + 2 * c["num_key_value_heads"])
    per_token = layers * (attn + 3 * h * inter) + vocab * h
    stored = per_token + (0 if c["tie_word_embeddings"] else vocab * h)
    return per_token, 2 * stored


def prefill_flops(shape: str, n: int) -> float:
    """A causal prefill of n tokens with the last position's logits: 2 x params x n for the
    matrices (the LM head once) plus attention's 2 x 2 x n^2/2 x d per query head and layer."""
    c = SHAPES[shape]
    per_token, _ = shape_params(shape)
    h, vocab = c["hidden_size"], c["vocab_size"]
    matrices = 2 * (per_token - vocab * h) * n + 2 * vocab * h
    attention = 2 * n * n * head_dim(shape) * c["num_attention_heads"] * c["num_hidden_layers"]
    return float(matrices + attention)


# The datasheet figures (SXM) every GPU benchmark reads: dense bf16 FLOP/s, HBM bytes/s.
DATASHEET = {"H100": (989.4e12, 3.35e12), "H200": (989.4e12, 4.8e12)}
PEAK, HBM = 0, 1  # which figure `datasheet` reads


def datasheet(which: int) -> float:
    """This GPU's datasheet figure (NaN on a GPU the table does not list, or none)."""
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return next((v[which] for k, v in DATASHEET.items() if k in name), float("nan"))


def prefill_rows(shape: str, folder: Path, device: str, lengths: list[int], chunks: list[int]):
    from checkpoints.generate import prefill

    vocab = SHAPES[shape]["vocab_size"]
    peak = datasheet(PEAK)
    for n in lengths:
        rope = rope_for(shape, n)
        row = {"part": "prefill", "shape": shape, "n": n, "rope": rope and f"yarn x{rope['factor']:g}",
               "flops": prefill_flops(shape, n)}
        ids = ids_for(n, vocab)
        impls = [f"lctx_c{c}" for c in chunks if c <= n or c == chunks[0]] + ["transformers"]
        for impl in impls:
            try:
                if impl.startswith("lctx"):
                    chunk = int(impl.removeprefix("lctx_c"))
                    model = lctx_model(folder, device, rope).model
                    step = lambda model=model, ids=ids, chunk=chunk: prefill(  # noqa: E731
                        model, ids[0].tolist(), model.new_cache(), chunk)
                else:
                    model = hf_model(folder, torch.bfloat16, device, rope)
                    dev_ids = ids.to(device)

                    def step(model=model, dev_ids=dev_ids):
                        with torch.inference_mode():
                            return model(dev_ids, use_cache=True, logits_to_keep=1).logits[0, -1]
                warm_ids = ids[:, :1024]
                if impl.startswith("lctx"):
                    prefill(model, warm_ids[0].tolist(), model.new_cache())
                else:
                    with torch.inference_mode():
                        model(warm_ids.to(device), use_cache=True, logits_to_keep=1)
                base = peak_reset(device)
                sync(device)
                t0 = time.perf_counter()
                logits = step()
                sync(device)
                row[f"{impl}_s"] = time.perf_counter() - t0
                row[f"{impl}_peak_mib"] = peak_mib(device, base)
                row[f"{impl}_argmax"] = int(logits.float().argmax())
                row[f"{impl}_pct_peak"] = 100 * row["flops"] / row[f"{impl}_s"] / peak
                del model, step, logits
            except torch.OutOfMemoryError as e:
                row[f"{impl}_error"] = f"OutOfMemoryError: {str(e)[:160]}"
            release(device)
            print({k: v for k, v in row.items() if k.startswith(impl)}, flush=True)
        ours = {k.removesuffix("_s"): v for k, v in row.items() if k.startswith("lctx_c") and k.endswith("_s")}
        if ours and "transformers_s" in row:
            best = min(ours, key=ours.get)
            row.update(lctx_best=best, lctx_s=ours[best], lctx_peak_mib=row[f"{best}_peak_mib"],
                       lctx_argmax=row[f"{best}_argmax"], lctx_pct_peak=row[f"{best}_pct_peak"])
            row["speedup"] = row["transformers_s"] / row["lctx_s"]
            row["memory_ratio"] = row["lctx_peak_mib"] / row["transformers_peak_mib"]
        yield row


def decode_rows(shape: str, folder: Path, device: str, batches: list[int], caches: list[int], new: int):
    from checkpoints.engine import Engine, GenerateRequest

    vocab = SHAPES[shape]["vocab_size"]
    loaded = lctx_model(folder, device, None)
    budget = int(torch.cuda.mem_get_info()[0] * 0.5) if device == "cuda" else None
    engines = {impl: Engine(loaded.model, loaded.tokenizer, prefix_cache=False, memory_budget=budget,
                            max_batch=max(batches), cuda_graphs=graphs)
               for impl, graphs in (("lctx", None), ("lctx_eager", False))}
    engine, eager = engines["lctx"], engines["lctx_eager"]
    hf = hf_model(folder, torch.bfloat16, device, None)
    warm = ids_for(256, vocab, 2, seed=99)  # compile and allocator warm-up for both, untimed
    for e in engines.values():
        e.generate_until([GenerateRequest(prompt_ids=row.tolist(), max_new_tokens=4, stop_at_eos=False) for row in warm])
    _, weight_bytes = shape_params(shape)
    kv_per_token = kv_bytes_per_token(shape)
    hbm = datasheet(HBM)
    with torch.inference_mode():
        hf.generate(warm.to(device), attention_mask=torch.ones_like(warm).to(device), max_new_tokens=4, do_sample=False,
                    pad_token_id=0)
    for length in caches:
        for b in batches:
            ids = ids_for(length, vocab, b, seed=b)
            row = {"part": "decode", "shape": shape, "batch": b, "cache": length, "new_tokens": new}

            def ours(k, ids=ids, b=b, engine=engine):
                reqs = [GenerateRequest(prompt_ids=ids[i].tolist(), max_new_tokens=k, min_new_tokens=k,
                                        stop_at_eos=False) for i in range(b)]
                return engine.generate_until(reqs)

            def theirs(k, ids=ids):
                with torch.inference_mode():
                    return hf.generate(ids.to(device), attention_mask=torch.ones_like(ids).to(device),
                                       max_new_tokens=k, min_new_tokens=k, do_sample=False, pad_token_id=0)

            # bytes a step must read: every weight once, and each row's keys and values
            row["bytes_per_step"] = weight_bytes + b * (length + new // 2) * kv_per_token
            for impl, fn in (("lctx", ours), ("lctx_eager", lambda k, ours=ours: ours(k, engine=eager)),
                             ("transformers", theirs)):
                try:
                    times = {}
                    for k in (1, new + 1):
                        peak_reset(device)
                        sync(device)
                        t0 = time.perf_counter()
                        fn(k)
                        sync(device)
                        times[k] = time.perf_counter() - t0
                    decode_s = times[new + 1] - times[1]
                    row[f"{impl}_decode_s"] = decode_s
                    row[f"{impl}_tokens_per_s"] = b * new / decode_s
                    row[f"{impl}_ms_per_step"] = 1e3 * decode_s / new
                    row[f"{impl}_pct_hbm"] = 100 * row["bytes_per_step"] / (decode_s / new) / hbm
                    row[f"{impl}_peak_mib"] = peak_mib(device, 0)
                except torch.OutOfMemoryError as e:
                    row[f"{impl}_error"] = f"OutOfMemoryError: {str(e)[:160]}"
                release(device)
            if "lctx_decode_s" in row and "transformers_decode_s" in row:
                row["speedup"] = row["transformers_decode_s"] / row["lctx_decode_s"]
            if engine.step.graphs is not None:
                row["graphs"] = {"captures": engine.step.graphs.captures, "replays": engine.step.graphs.replays}
            yield row


def main() -> None:
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=lambda s: s.split(","), default=["llama-3.2-1b", "smollm2-135m", "llama-3.1-8b"])
    p.add_argument("--parity-n", type=int, default=4096)
    p.add_argument("--lengths", type=ints, default=[32768, 131072])
    p.add_argument("--chunks", type=ints, default=[4096, 16384, 131072],
                   help="lctx prefill chunk sizes to measure (the first is the engine's default)")
    p.add_argument("--batches", type=ints, default=[8, 32])
    p.add_argument("--caches", type=ints, default=[4096, 32768])
    p.add_argument("--decode-shapes", type=lambda s: [x for x in s.split(",") if x], default=["llama-3.2-1b"])
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--parts", type=lambda s: s.split(","), default=["prefill", "decode"])
    p.add_argument("--smoke", action="store_true", help="CPU, the tiny 'smoke' shape, short lengths: checks the script")
    p.add_argument("--work", help="folder for the checkpoints (default: a temporary one)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "gpu_model.json"))
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    if args.smoke:
        args.shapes, args.decode_shapes, args.parity_n = ["smoke"], ["smoke"], 64
        args.lengths, args.batches, args.caches, args.new, args.chunks = [128, 512], [1, 3], [64], 4, [64, 512]
    import transformers

    doc = {"info": {"gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
                    "transformers": transformers.__version__, "cuda": torch.version.cuda, "args": vars(args),
                    "decode_warmup": True},
           "rows": []}
    out = Path(args.out)
    if out.exists():  # runs into one file append (one run per shape, say)
        old = json.loads(out.read_text())
        doc = {"info": [*(old["info"] if isinstance(old["info"], list) else [old["info"]]), doc["info"]],
               "rows": old["rows"]}
    else:
        doc["info"] = [doc["info"]]

    def add(row: dict) -> None:
        doc["rows"].append(row)
        print(row, flush=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")

    work = Path(args.work or tempfile.mkdtemp(prefix="lctx-gpu-"))

    def guarded(shape: str, rows) -> None:
        try:  # one shape failing must not hide the others
            for row in rows():
                add(row)
        except Exception as e:
            add({"part": "error", "shape": shape, "error": f"{type(e).__name__}: {str(e)[:500]}"})
            import traceback

            traceback.print_exc()

    for shape in args.shapes:  # parity and prefill for every shape first, decoding last
        folder = work / shape
        t0 = time.perf_counter()
        if not (folder / "config.json").exists():
            build(shape, folder, device)
        add({"part": "build", "shape": shape, "s": time.perf_counter() - t0})
        if "parity" in args.parts:
            guarded(shape, lambda shape=shape, folder=folder: [parity(shape, folder, device, args.parity_n)])
        if "prefill" in args.parts:
            guarded(shape, lambda shape=shape, folder=folder: prefill_rows(shape, folder, device, args.lengths, args.chunks))
    for shape in args.decode_shapes if "decode" in args.parts else []:
        guarded(shape, lambda shape=shape: decode_rows(shape, work / shape, device, args.batches, args.caches, args.new))

if __name__ == "__main__":
    main()
