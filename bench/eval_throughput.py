"""Evaluation throughput: lctx through its model interface against lm-eval's own
Hugging Face backend (`--model hf`, batch size 16) on the same local lm-eval
`generate_until` task, the same random Llama checkpoint and tokenizer, the same
threads, alternating runs in one process; medians over rounds.

Workloads: (a) decode-heavy, 32 prompts of ~256 tokens, 64 new tokens; (b)
prefill-heavy, 8 prompts of ~2048 tokens, 8 new tokens. End to end means
`lm_eval.simple_evaluate` with the model built inside it (as `lm_eval --model`
does; process start excluded), BOS added by both. The generation loop alone compares
`Engine.generate_until` with transformers' batched `generate` (batch 16, left
padding) on the same token ids. Generated texts of both are compared.

The floor: each workload's FLOPs (the linear layers of every prompt and generated token, the
output projection of every token whose logits are read, causal attention) over the rate this
machine's PyTorch reaches on one of the model's own GEMMs at the same threads (measured, not a
datasheet peak). Neither implementation can be faster than that; the ratio to it says how
much is left.

Usage: python bench/eval_throughput.py [--rounds 3] [--threads 2] [--out bench/results]"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VOCAB = 32000
ARCH = dict(vocab_size=VOCAB, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=4096,
            bos_token_id=1, eos_token_id=2)
WORKLOADS = {"decode_heavy": dict(prompts=32, tokens=256, new=64),
             "prefill_heavy": dict(prompts=8, tokens=2048, new=8)}
HF_BATCH = 16


def write_tokenizer(path: Path) -> None:
    """A whitespace word-level tokenizer: <unk>, <s> (BOS, 1), </s> (EOS, 2), then w3..w{VOCAB-1};
    BOS added as a special token. lm-eval's hf model stops on the EOS *text* too, so it
    must not be a prefix of other tokens (t2 would cut t26120)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "tokenizer_class": "PreTrainedTokenizerFast"}))


def make_checkpoint(path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**ARCH)).save_pretrained(path)
    write_tokenizer(path)


def make_task(folder: Path, name: str, prompts: int, tokens: int, new: int) -> None:
    """A local generate_until task: `prompts` documents of ~`tokens` word tokens
    (ids 3.. so no BOS/EOS inside), greedy, `new` tokens, no stop string a
    word-level tokenizer could produce."""
    rng = random.Random(hash(name) % 1000)
    rows = [{"text": " ".join(f"w{rng.randrange(3, VOCAB)}" for _ in range(tokens - 1)), "target": "w3"}
            for _ in range(prompts)]
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{name}.yaml").write_text(f"""task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{text}}}}"
doc_to_target: "{{{{target}}}}"
generation_kwargs:
  until: ["<never>"]
  max_gen_toks: {new}
  do_sample: false
metric_list:
  - metric: exact_match
metadata:
  version: 1.0
""")


def workload_flops(prompts: int, tokens: int, new: int) -> float:
    """FLOPs of greedy generation with a KV cache: every prompt token through the layers, the
    last one's logits, then `new - 1` decoding tokens each through the layers and the output
    projection; attention 2 * context * hidden FLOPs per token and layer for QK^T and as many for
    PV (half the square in a causal prefill)."""
    h, inter, layers, vocab = ARCH["hidden_size"], ARCH["intermediate_size"], ARCH["num_hidden_layers"], VOCAB
    kv = h * ARCH["num_key_value_heads"] // ARCH["num_attention_heads"]
    layer_macs = h * (h + 2 * kv) + h * h + 3 * h * inter  # q, k, v, o and the gated MLP, per token
    prefill = tokens * 2 * layers * layer_macs + 2 * h * vocab + layers * 2 * tokens * tokens * h
    decode = sum(2 * layers * layer_macs + 2 * h * vocab + layers * 4 * (tokens + t) * h for t in range(1, new))
    return float(prompts * (prefill + decode))


def gemm_rate(threads: int) -> float:
    """FLOP/s of the model's MLP up-projection on 2,048 tokens (fp32, `threads`), best of 5."""
    torch.set_num_threads(threads)
    x, w = torch.randn(2048, ARCH["hidden_size"]), torch.randn(ARCH["hidden_size"], ARCH["intermediate_size"])
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            torch.mm(x, w)
        best = min(best, (time.perf_counter() - t0) / 10)
    return 2 * x.shape[0] * x.shape[1] * w.shape[1] / best


def run_lm_eval(impl: str, ckpt: Path, task: str, manager) -> tuple[float, list[str]]:
    import lm_eval

    import evaluators.lm_eval_adapter  # noqa: F401  (registers "lctx")

    if impl == "hf":
        # BOS as lctx adds it (lm-eval's hf model leaves it out unless asked), so prompts are equal
        model, args = "hf", f"pretrained={ckpt},dtype=float32,device=cpu,add_bos_token=True"
        batch = HF_BATCH
    else:
        model, args = "lctx", {"checkpoint": str(ckpt), "device": "cpu"}
        batch = None
    t0 = time.perf_counter()
    out = lm_eval.simple_evaluate(model=model, model_args=args, tasks=[task], batch_size=batch,
                                  task_manager=manager, log_samples=True, verbosity="ERROR")
    seconds = time.perf_counter() - t0
    samples = sorted(out["samples"][task], key=lambda s: s["doc_id"])
    return seconds, [s["resps"][0][0] for s in samples]


def loop_only(ckpt: Path, prompts: list[list[int]], new: int, rounds: int) -> dict:
    """The generation loops alone: Engine.generate_until against HF batched generate."""
    from transformers import LlamaForCausalLM

    from checkpoints.engine import GenerateRequest
    from checkpoints.opening import open_model

    engine = open_model(ckpt, device="cpu").engine
    hf = LlamaForCausalLM.from_pretrained(ckpt, attn_implementation="sdpa", dtype=torch.float32).eval()
    reqs = [GenerateRequest(p, max_new_tokens=new) for p in prompts]

    def lctx_run() -> list[list[int]]:
        return [g.token_ids for g in engine.generate_until(reqs)]

    def hf_run() -> list[list[int]]:
        out = []
        for lo in range(0, len(prompts), HF_BATCH):
            chunk = prompts[lo:lo + HF_BATCH]
            width = max(map(len, chunk))
            ids = torch.tensor([[0] * (width - len(p)) + p for p in chunk])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
            with torch.inference_mode():
                gen = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                                  pad_token_id=0, eos_token_id=2)
            for row in gen[:, width:].tolist():
                out.append(row[:row.index(2)] if 2 in row else row)
        return out

    times: dict[str, list[float]] = {"lctx": [], "hf": []}
    outputs = {}
    lctx_run(), hf_run()  # warm-up
    for r in range(rounds):
        for impl in (("lctx", "hf") if r % 2 == 0 else ("hf", "lctx")):
            t0 = time.perf_counter()
            outputs[impl] = lctx_run() if impl == "lctx" else hf_run()
            times[impl].append(time.perf_counter() - t0)
    same = sum(a == b for a, b in zip(outputs["lctx"], outputs["hf"], strict=True))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"seconds": times, "median_s": med, "speed_ratio_lctx_over_hf": med["hf"] / med["lctx"],
            "identical_outputs": same, "outputs": len(prompts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from lm_eval.tasks import TaskManager

    rate = gemm_rate(args.threads)
    report: dict = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
                                "torch": torch.__version__, "python": platform.python_version(),
                                "gemm_flops_per_s": rate},
                    "arch": ARCH, "hf_batch_size": HF_BATCH, "rounds": args.rounds, "workloads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, tasks = Path(tmp) / "ckpt", Path(tmp) / "tasks"
        tasks.mkdir()
        make_checkpoint(ckpt)
        for name in args.workloads.split(","):
            w = WORKLOADS[name]
            make_task(tasks, f"bench_{name}", w["prompts"], w["tokens"], w["new"])
        manager = TaskManager(include_path=str(tasks))
        for name in args.workloads.split(","):
            w, task = WORKLOADS[name], f"bench_{name}"
            load_before = os.getloadavg()
            times: dict[str, list[float]] = {"lctx": [], "hf": []}
            texts: dict[str, list[str]] = {}
            for r in range(args.rounds):
                for impl in (("lctx", "hf") if r % 2 == 0 else ("hf", "lctx")):
                    seconds, texts[impl] = run_lm_eval(impl, ckpt, task, manager)
                    times[impl].append(seconds)
                    print(f"{name} round {r} {impl}: {seconds:.1f} s", flush=True)
            med = {k: statistics.median(v) for k, v in times.items()}
            rows = [json.loads(line)["text"] for line in (tasks / f"{task}.jsonl").read_text().splitlines()]
            from checkpoints.loading import load_model

            tok = load_model(ckpt).tokenizer
            prompts = [[1, *tok.encode(t, add_special_tokens=False)] for t in rows]
            flops = workload_flops(w["prompts"], w["tokens"], w["new"])
            entry = {**w, "flops": flops, "floor_s": flops / rate, "end_to_end": {"seconds": times, "median_s": med,
                                         "speed_ratio_lctx_over_hf": med["hf"] / med["lctx"],
                                         "identical_texts": sum(a == b for a, b in zip(texts["lctx"], texts["hf"],
                                                                                       strict=True)),
                                         "texts": len(rows)},
                     "generation_loop": loop_only(ckpt, prompts, w["new"], args.rounds),
                     "load_average": {"before": load_before, "after": os.getloadavg()}}
            report["workloads"][name] = entry
            print(json.dumps({name: {"end_to_end": entry["end_to_end"]["speed_ratio_lctx_over_hf"],
                                     "loop": entry["generation_loop"]["speed_ratio_lctx_over_hf"]}}), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eval_throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["# Evaluation throughput: lctx engine vs lm-eval hf (batch 16)", "",
             f"CPU fp32, {args.threads} threads, random Llama (hidden 512, 4 layers, vocab 32000), "
             f"medians of {args.rounds} alternating rounds; ratio = hf time / lctx time (> 1: lctx faster). "
             f"Floor: the workload's FLOPs at the {rate / 1e9:.0f} GFLOP/s this machine's PyTorch reaches on the "
             "model's MLP GEMM (2,048 x 512 x 1,376, fp32) at the same threads.", "",
             "| workload | GFLOP | floor s | lctx e2e s | hf e2e s | e2e ratio | lctx / floor | hf / floor | identical texts "
             "| lctx loop s | hf generate s | loop ratio | identical tokens |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, e in report["workloads"].items():
        a, b = e["end_to_end"], e["generation_loop"]
        lines.append(f"| {name} ({e['prompts']} x ~{e['tokens']} tok, {e['new']} new) | {e['flops'] / 1e9:.0f} | "
                     f"{e['floor_s']:.1f} | {a['median_s']['lctx']:.1f} | "
                     f"{a['median_s']['hf']:.1f} | {a['speed_ratio_lctx_over_hf']:.2f}x | "
                     f"{a['median_s']['lctx'] / e['floor_s']:.1f}x | {a['median_s']['hf'] / e['floor_s']:.1f}x | "
                     f"{a['identical_texts']}/{a['texts']} | "
                     f"{b['median_s']['lctx']:.1f} | {b['median_s']['hf']:.1f} | {b['speed_ratio_lctx_over_hf']:.2f}x | "
                     f"{b['identical_outputs']}/{b['outputs']} |")
    (args.out / "eval_throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
