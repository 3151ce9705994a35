"""lctx against lm-eval's `hf` backend on the real model (SmolLM2-135M-Instruct, fp32, CPU):
passkey, the needle grid and RULER niah_single_1 at 1k-8k tokens. Scores, seconds per
sample and peak memory (the process's peak resident set, model load included), each
backend in a process of its own.

- Same prompts: lctx's evaluators plan and build every sample once; lctx runs them
  through its engine, lm-eval's `HFLM.generate_until` gets the same prompt text (the
  token ids decoded, special tokens kept; HFLM adds no BOS, nor does this tokenizer),
  the same greedy budget and stop strings, batch size 1; both outputs are scored by
  lctx's evaluator.
- lm-eval's own RULER: `niah_single_1` through `lm_eval.simple_evaluate` draws its own
  samples with its own generator and seed (its metric list starts at 4096, so only
  4k and 8k): the same protocol, other samples; read it beside ours, not cell by cell.

    nice .venv/bin/python bench/real_model.py [--n 1] [--lengths 1000 4000 8000]

Writes bench/results/real_model.{json,md}."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
TASKS = ("passkey", "needle", "ruler")
LM_EVAL_RULER_LENGTHS = (4096, 8192)  # niah_single_1.yaml's metric list starts at 4096


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def task_spec(task: str, lengths: list[int], n: int) -> dict[str, Any]:
    if task == "passkey":
        return {"name": "passkey", "lengths": lengths, "trials": n, "seed": 0}
    if task == "needle":
        depths = [50] if n == 1 else [round(100 * i / (n - 1)) for i in range(n)]
        return {"name": "needle", "lengths": lengths, "depths": depths,
                "trials": 1, "seed": 0}
    return {"name": "ruler", "tasks": ["niah_single_1"], "lengths": lengths, "samples": n, "bootstrap": 0}


def length_of(sample_params: dict[str, Any]) -> int:
    return int(sample_params["length"])


def build_all(model: Path, spec: dict[str, Any]) -> tuple[Any, list[Any], Any]:
    """The evaluator, every built sample (prompt ids, budget, stops) of `spec`, the model."""
    from checkpoints.loading import load_model
    from evaluators.registry import make_evaluator

    loaded = load_model(model)
    evaluator = make_evaluator(spec)
    evaluator.prepare(loaded)
    return evaluator, [evaluator.build(loaded, s) for s in evaluator.plan(loaded)], loaded


# --- children: one backend and task per process ------------------------------------------


def child_lctx(model: Path, spec: dict[str, Any]) -> dict[str, Any]:
    from checkpoints.loading import load_model
    from evaluators import run_task
    from evaluators.samplelog import SAMPLES_FILE

    start = time.perf_counter()
    loaded = load_model(model)
    loaded_at = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run_task(loaded, spec, Path(tmp))
        records = [json.loads(line) for line in (Path(tmp) / SAMPLES_FILE).read_text().splitlines()]
    end = time.perf_counter()
    return {"records": [{"id": r["id"], "length": r.get("length") or r.get("target_length"), "score": r["score"],
                         "prediction": r["prediction"]} for r in records],
            "load_s": loaded_at - start, "run_s": end - loaded_at, "peak_mib": peak_mib()}


def child_hf(model: Path, prompts_file: Path) -> dict[str, Any]:
    import torch
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    prompts = json.loads(prompts_file.read_text())
    start = time.perf_counter()
    lm = HFLM(pretrained=str(model), dtype=torch.float32, batch_size=1, max_length=32768, device="cpu")
    loaded_at = time.perf_counter()
    requests = [Instance("generate_until", {}, (p["text"], {"until": p["stop"], "max_gen_toks": p["max_new_tokens"],
                                                             "do_sample": False}), i)
                for i, p in enumerate(prompts)]
    outputs = lm.generate_until(requests, disable_tqdm=True)
    end = time.perf_counter()
    return {"outputs": outputs, "load_s": loaded_at - start, "run_s": end - loaded_at, "peak_mib": peak_mib()}


def child_lm_eval_ruler(model: Path, length: int, n: int) -> dict[str, Any]:
    import lm_eval

    start = time.perf_counter()
    out = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={model},dtype=float32,max_length=32768",
                                  tasks=["niah_single_1"], batch_size=1, limit=n, device="cpu",
                                  metadata={"max_seq_lengths": [length]}, log_samples=False)
    end = time.perf_counter()
    score = out["results"]["niah_single_1"].get(f"{length},none")
    return {"score": score, "seconds": end - start, "peak_mib": peak_mib()}


def spawn(args: list[str]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    subprocess.run([sys.executable, __file__, "--child", *args, "--child-out", str(out)], check=True)
    return json.loads(out.read_text())


# --- the parent -------------------------------------------------------------------------


def by_length(lengths: list[int], scored: list[tuple[int, float]]) -> dict[str, float | None]:
    out = {}
    for n in lengths:
        vals = [s for length, s in scored if length == n]
        out[str(n)] = sum(vals) / len(vals) if vals else None
    return out


def save(report: dict[str, Any]) -> None:
    """Written after every task: a run cut short keeps what it measured."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "real_model.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "real_model.md").write_text(markdown(report))


def run(model: Path, lengths: list[int], n: int) -> dict[str, Any]:
    from checkpoints.generate import Generation

    rows: list[dict[str, Any]] = []
    own: list[dict[str, Any]] = []
    report = {"model": str(model.name), "lengths": lengths, "n": n, "rows": rows, "lm_eval_own_ruler": own}
    for task in TASKS:
        spec = task_spec(task, lengths, n)
        evaluator, built, loaded = build_all(model, spec)
        tok = loaded.tokenizer
        del loaded
        prompts = [{"text": tok.decode(list(b.request.prompt_ids), skip_special_tokens=False),
                    "max_new_tokens": b.request.max_new_tokens, "stop": list(b.request.stop)} for b in built]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(prompts, f)
        print(f"{task}: {len(built)} samples; lctx ...", flush=True)
        ours = spawn(["lctx", str(model), json.dumps(spec)])
        print(f"{task}: hf ...", flush=True)
        theirs = spawn(["hf", str(model), f.name])
        lctx_scores = [(int(r["length"]), float(r["score"])) for r in ours["records"]]
        hf_scores = []
        for b, text in zip(built, theirs["outputs"], strict=True):
            record = evaluator.score(b, Generation(text=text, token_ids=[], prompt_tokens=len(b.request.prompt_ids),
                                                   stop_reason="length"))
            hf_scores.append((length_of(b.sample.params), float(record["score"])))
        ours_by_id = {r["id"]: r["prediction"].strip() for r in ours["records"]}
        same = sum(ours_by_id.get(b.sample.id) == text.strip() for b, text in zip(built, theirs["outputs"], strict=True))
        for backend, scores, res in (("lctx", lctx_scores, ours), ("lm-eval hf", hf_scores, theirs)):
            rows.append({"task": task, "backend": backend, "prompts": "lctx's", "n": len(scores),
                         "score_by_length": by_length(lengths, scores),
                         "score": sum(s for _, s in scores) / len(scores),
                         "seconds_per_sample": res["run_s"] / len(scores), "load_s": res["load_s"],
                         "peak_mib": res["peak_mib"]})
        rows[-1]["same_prediction_as_lctx"] = f"{same}/{len(built)}"
        print(f"{task}: lctx {rows[-2]['score']:.2f} ({rows[-2]['seconds_per_sample']:.1f} s/sample), "
              f"hf {rows[-1]['score']:.2f} ({rows[-1]['seconds_per_sample']:.1f} s/sample); same predictions "
              f"{same}/{len(built)}", flush=True)
        save(report)
    for length in LM_EVAL_RULER_LENGTHS:
        if length > max(lengths) * 1.1:
            continue
        print(f"lm-eval's own niah_single_1 at {length} ...", flush=True)
        res = spawn(["lm-eval-ruler", str(model), str(length), str(n)])
        own.append({"length": length, "n": n, **res})
        save(report)
    return report


def markdown(report: dict[str, Any]) -> str:
    lengths = report["lengths"]
    head = ("| task | backend | " + " | ".join(f"{n // 1000}k" for n in lengths) +
            " | all | s / sample | load s | peak MiB | same output |")
    lines = [head, "|" + "---|" * (len(lengths) + 7)]
    for r in report["rows"]:
        cells = " | ".join("-" if v is None else f"{v:.2f}" for v in r["score_by_length"].values())
        lines.append(f"| {r['task']} | {r['backend']} | {cells} | {r['score']:.2f} | {r['seconds_per_sample']:.1f} | "
                     f"{r['load_s']:.1f} | {r['peak_mib']:.0f} | {r.get('same_prediction_as_lctx', '')} |")
    own = "\n".join(f"| niah_single_1 (lm-eval's samples) | lm-eval hf | {o['length']} | {o['n']} | "
                    f"{o['score'] if o['score'] is None else round(o['score'], 1)} | {o['seconds']:.0f} | "
                    f"{o['peak_mib']:.0f} |" for o in report["lm_eval_own_ruler"])
    return (f"{report['model']}, float32 on CPU, {report['n']} samples per length and task (needle: {report['n']} "
            "depths, one trial); RULER niah_single_1 on lctx's samples scored 0-1 per sample as RULER's "
            "string_match_all. Both backends read the same prompts (lctx's), batch size 1 for lm-eval's hf, lctx's "
            "engine batches as it does in jobs. Peak MiB: the process's peak resident memory, model load included.\n\n"
            + "\n".join(lines) + "\n\nlm-eval's own RULER niah_single_1 draws its own samples (its generator, its "
            "seed; string_match_all 0-1), so it is not the same samples as the rows above:\n\n"
            "| task | backend | length | n | score | seconds (sample generation included) | peak MiB |\n"
            "|---|---|---|---|---|---|---|\n" + own + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 4000, 8000])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", nargs="+")
    parser.add_argument("--child-out")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.child:
        kind, model, *rest = args.child
        if kind == "lctx":
            out = child_lctx(Path(model), json.loads(rest[0]))
        elif kind == "hf":
            out = child_hf(Path(model), Path(rest[0]))
        else:
            out = child_lm_eval_ruler(Path(model), int(rest[0]), int(rest[1]))
        Path(args.child_out).write_text(json.dumps(out))
        return
    from clients.pull import ensure_gguf_checkpoint
    from service.demo import real_model_dir, real_model_gguf

    model = ensure_gguf_checkpoint(real_model_gguf(), real_model_dir(ROOT / "var" / "checkpoints")).path
    report = run(model, args.lengths, args.n)
    save(report)
    print(markdown(report))


if __name__ == "__main__":
    main()
