"""What building RULER v2's prompts costs against encoding each prompt once (issue #58, item
4). lctx's RULER v2 reads the files NeMo-Skills' prepare.py writes (the prompts are made
there, sized with the model's tokenizer), so building a sample is the chat template around
the prepared question and one encode; this measures that through the evaluator's own
`prepare`, `plan` and `build` on a real model (SmolLM2-135M-Instruct, converted as the tests'
`real_model` fixture converts it, or --model), beside the time of encoding each finished
prompt once. The prepared files are crafted here in NeMo-Skills' layout at the asked length
(mk_niah_basic-style needle lines, mv_niah_basic-style, qa-style documents, and the MMLU-style
multiple choice), never NVIDIA's data.

    nice .venv/bin/python bench/ruler_v2_build.py [--samples 32] [--length 32768]

Writes bench/results/ruler_v2_build.{json,md}."""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ruler_build import tokenizer_folder  # noqa: E402 - the same real model folder

RESULTS = ROOT / "bench" / "results"
TASKS = ("mk_niah_basic", "mv_niah_basic", "qa_basic", "mk_niah_medium")


def line(task: str, rng: random.Random, i: int) -> str:
    if task.startswith("mk") and task != "mk_niah_medium":
        return f"One of the special magic numbers for key-{rng.randrange(10**6)} is: {rng.randrange(10**9, 10**10)}."
    if task.startswith("mv"):
        return f"One of the special magic numbers for word-{rng.randrange(5000)} is: {rng.randrange(10**9, 10**10)}."
    if task.startswith("qa"):
        return f"Document {i}:\nThe town of Place{rng.randrange(10**5)} lies on river {rng.randrange(900)} and " \
               f"has {rng.randrange(10**6)} people.\n"
    return f"Question {i}: what is {rng.randrange(100)} plus {rng.randrange(100)}?\nA. 1\nB. 2\nC. 3\nD. 4\n"


def prepared(folder: Path, tokenizer, length: int, samples: int) -> None:
    """<folder>/ruler2/bench_<length>/<task>/test.jsonl: questions of about `length` tokens."""
    rng = random.Random(0)
    for task in TASKS:
        out = folder / "ruler2" / f"bench_{length}" / task
        out.mkdir(parents=True)
        probe = "\n".join(line(task, rng, i) for i in range(200))
        per_line = len(tokenizer.encode(probe, add_special_tokens=False)) / 200
        n = int(length * 0.97 / per_line)
        rows = []
        for k in range(samples):
            body = "\n".join(line(task, rng, i) for i in range(n))
            question = f"Some special magic numbers are hidden within the following text.\n{body}\nWhat is it?"
            answer = "B" if task == "mk_niah_medium" else [str(k)]
            rows.append({"index": k, "question": question, "expected_answer": answer, "length": length})
        (out / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--length", type=int, default=32768)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    from checkpoints.loading import load_model
    from evaluators.registry import make_evaluator

    # yarn:4 takes SmolLM2's 8k to the 32k the prompts are sized for (only the budget reads it)
    loaded = load_model(tokenizer_folder(args.model), rope="yarn:4")
    tokenizer = loaded.tokenizer
    data = Path(tempfile.mkdtemp())
    prepared(data, tokenizer, args.length, args.samples)
    rows = []
    for task in TASKS:
        ev = make_evaluator({"name": "ruler_v2", "setups": f"bench_{args.length}", "tasks": [task],
                             "chat_template": True}, data_dir=data)
        t0 = time.perf_counter()
        ev.prepare(loaded)
        built = [ev.build(loaded, s) for s in ev.plan(loaded)]
        build_s = time.perf_counter() - t0
        from evaluators.chat import apply_chat_template, missing_template

        texts = [apply_chat_template(tokenizer, ev.samples[(f"bench_{args.length}", task)][i]["question"],
                                     missing_template("ruler_v2")) for i in range(len(built))]
        t0 = time.perf_counter()
        ids = [tokenizer.encode(t) for t in texts]
        once_s = time.perf_counter() - t0
        assert [list(b.request.prompt_ids) for b in built] == ids  # the same prompts
        r = {"task": task, "length": args.length, "samples": len(built),
             "mean_prompt_tokens": round(sum(map(len, ids)) / len(ids), 1), "build_s": round(build_s, 2),
             "encode_once_s": round(once_s, 2), "time_x": round(build_s / once_s, 2)}
        print(json.dumps(r), flush=True)
        rows.append(r)
    doc = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "python": platform.python_version(), "load": os.getloadavg()[0]},
           "tokenizer": "smollm2-135m-instruct" if args.model is None else str(args.model), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ruler_v2_build.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = ["# RULER v2 prompt building against encoding each prompt once (issue #58)", "",
             f"{doc['machine']}; tokenizer {doc['tokenizer']}; crafted prepared files in NeMo-Skills' layout.",
             "`time x` = the evaluator's prepare + plan + build (reading the file, the chat template, one encode "
             "per sample) over encoding each finished prompt once. Target: at most 2.", "",
             "| task | length | samples | mean prompt tokens | build s | encode once s | time x |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['length']} | {r['samples']} | {r['mean_prompt_tokens']} | {r['build_s']} | "
              f"{r['encode_once_s']} | {r['time_x']} |" for r in rows]
    (args.out / "ruler_v2_build.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
