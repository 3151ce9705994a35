"""What building RULER v2's prompts costs against encoding each prompt once (issue #58, item 4:
"RULER v2 built on the same generator and held to the same bound", at most 2x at 32k).

lctx draws RULER v2's samples itself (`evaluators/ruler_v2/synthetic.py`: NeMo-Skills' prepare
scripts on RULER's generator, sized with counted units, each prompt encoded once and its ids
kept for the request). Per task this times `synthetic.generate` at the asked length with the
prompt the evaluator sends (SmolLM2's chat template around the question, thinking as the task
leaves it), beside the time of encoding each finished prompt once (the floor), and counts the
tokenizer's calls and the characters it encoded against the finished prompts' (as
bench/ruler_build.py does for RULER). The evaluator's build adds no encode: the request is the
kept ids (checked here: they are the finished prompt's encode).

Tokenizer: SmolLM2-135M-Instruct's (the real model of the tests, as bench/ruler_build.py finds
it, or --model). Data: stand-ins in the layouts `evaluators/ruler_v2/sources.py` reads, made here
from Python's own documentation text (`pydoc_data.topics`): MMLU-style four-option questions
and HotpotQA-style ten-document questions; the prompts have RULER v2's shapes and sizes, not its
words (--data-dir for the real files).

    TOKENIZERS_PARALLELISM=false nice .venv/bin/python bench/ruler_v2_build.py [--samples 32] [--length 32768] \\
        [--tasks mk_niah_basic,mv_niah_basic,mk_niah_medium,qa_medium] [--repeats 3]

TOKENIZERS_PARALLELISM=false makes the batched unit counts single-threaded, so the CPU times
compare the work done (the library's idle worker threads would add their spinning to it).

Writes bench/results/ruler_v2_build.{json,md}."""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ruler_build import tokenizer_folder  # noqa: E402 - the same real model folder

RESULTS = ROOT / "bench" / "results"
TASKS = "mk_niah_basic,mv_niah_basic,mk_niah_medium,qa_medium"


def stand_in_sources(folder: Path) -> Path:
    """<folder>/ruler2/: mmlu_test.jsonl (2,000), mmlu_auxiliary_train.jsonl (20,000), hotpotqa.json
    (200 questions) and hotpot_train_v1.1.json (5,000 questions, 50,000 documents), from pydoc's text."""
    import pydoc_data.topics

    rng = random.Random(0)
    sentences = [s.strip() for t in pydoc_data.topics.topics.values() for s in re.split(r"(?<=\.)\s+", t)
                 if 6 <= len(s.split()) <= 40]
    words = sorted({w for s in sentences for w in re.findall(r"[A-Za-z]{4,}", s)})

    def mc() -> dict[str, Any]:
        return {"question": rng.choice(sentences) + " Which word fits?", "subject": "stand-in",
                "choices": [" ".join(rng.sample(words, rng.randint(1, 4))) for _ in range(4)], "answer": rng.randrange(4)}

    def hotpot(n: int, tag: str) -> list[dict[str, Any]]:
        out = []
        for q in range(n):
            docs = [[f"{tag} {rng.choice(words)} {q}-{k}", [rng.choice(sentences) + " " for _ in range(rng.randint(2, 5))]]
                    for k in range(10)]
            out.append({"_id": f"{tag}{q}", "question": f"What does {docs[0][0]} say about {rng.choice(words)}?",
                        "answer": rng.choice(words), "supporting_facts": [[docs[0][0], 0], [docs[3][0], 1]],
                        "context": docs})
        return out

    d = folder / "ruler2"
    d.mkdir(parents=True, exist_ok=True)
    (d / "mmlu_test.jsonl").write_text("".join(json.dumps(mc()) + "\n" for _ in range(2000)))
    (d / "mmlu_auxiliary_train.jsonl").write_text("".join(json.dumps(mc()) + "\n" for _ in range(20000)))
    (d / "hotpotqa.json").write_text(json.dumps(hotpot(200, "dev")))
    (d / "hotpot_train_v1.1.json").write_text(json.dumps(hotpot(5000, "train")))
    return folder


def row(task: str, length: int, samples: int, tokenizer: Any, wrap: Any, data_dir: Path,
        repeats: int) -> dict[str, Any]:
    from evaluators.ruler.counting import CountingTokenizer
    from evaluators.ruler_v2 import sources
    from evaluators.ruler_v2.synthetic import family, generate

    t0 = time.perf_counter()  # the source files, read once per process (cached): timed apart
    for name in sources.FAMILY_FILES[family(task)]:
        path = sources.find(data_dir, name)
        {sources.MMLU_TEST: sources.mmlu, sources.MMLU_AUX: sources.mmlu, sources.HOTPOT_DEV: sources.hotpot_needles,
         sources.HOTPOT_TRAIN: sources.hotpot_haystack}[name](path)
    load_s = time.perf_counter() - t0
    runs = []  # (generate s, generate cpu s, encode once s, encode once cpu s) per repeat
    for _ in range(repeats):  # the same draws each time (one seed): repeats only steady the clocks
        counting = CountingTokenizer(tokenizer)
        t0, c0 = time.perf_counter(), time.process_time()
        drawn = generate(task, counting, length, samples, wrap=wrap, data_dir=data_dir)
        gen_s, gen_cpu = time.perf_counter() - t0, time.process_time() - c0
        prompts = [wrap(s.question) for s in drawn]
        t0, c0 = time.perf_counter(), time.process_time()
        ids = [tokenizer.encode(p) for p in prompts]
        runs.append((gen_s, gen_cpu, time.perf_counter() - t0, time.process_time() - c0))
    gen_s, gen_cpu, once_s, once_cpu = (statistics.median(r[i] for r in runs) for i in range(4))
    same = all(list(s.ids) == i for s, i in zip(drawn, ids, strict=True))  # the request is the finished encode
    once_chars = sum(map(len, prompts))
    return {"task": task, "length": length, "samples": len(drawn), "same_ids": same,
            "mean_question_tokens": round(sum(s.length for s in drawn) / len(drawn), 1),
            "mean_prompt_tokens": round(sum(map(len, ids)) / len(ids), 1),
            "calls_per_sample": round(counting.calls / len(drawn), 2), "chars_x": round(counting.chars / once_chars, 3),
            "load_sources_s": round(load_s, 2), "generate_s": round(gen_s, 2), "encode_once_s": round(once_s, 2), "time_x": round(gen_s / once_s, 2),
            "generate_cpu_s": round(gen_cpu, 2), "encode_once_cpu_s": round(once_cpu, 2),
            "cpu_x": round(gen_cpu / once_cpu, 2), "repeats": repeats,
            "cpu_x_per_repeat": [round(r[1] / r[3], 2) for r in runs]}


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# RULER v2 prompt building against encoding each prompt once (issue #58)", "",
             f"{doc['machine']}; tokenizer {doc['tokenizer']} with its chat template; data: {doc['data']}.",
             "Samples drawn by lctx's generator (`evaluators/ruler_v2/synthetic.py`, RULER's machinery). `calls/sample` "
             "and `chars x` are the generator's tokenizer calls and the characters it encoded over those of the "
             "finished prompts (encoding each once = 1); the evaluator's build adds none (`same ids`: the kept ids are "
             "the finished prompt's encode). `cpu x` = the generator's CPU time (this process, every thread: the "
             "batched unit counts' threads included) / the CPU time of encoding each finished prompt once; `time x` "
             "the same in wall time, which a loaded machine makes noisy (`load`: its 1-minute load average); times are "
             "medians of the repeats (`cpu x each`: every repeat's). Target: at most 2. Reading the source files (once per process, `load s`) is timed apart.", "",
             "| task | length | samples | same ids | mean question tokens | mean prompt tokens | calls/sample | "
             "chars x | load s | generate cpu s | encode once cpu s | cpu x | cpu x each | generate s | encode once s | time x |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['length']} | {r['samples']} | {'yes' if r['same_ids'] else 'NO'} | "
              f"{r['mean_question_tokens']} | {r['mean_prompt_tokens']} | {r['calls_per_sample']} | {r['chars_x']} | "
              f"{r['load_sources_s']} | {r['generate_cpu_s']} | {r['encode_once_cpu_s']} | {r['cpu_x']} | "
              f"{', '.join(map(str, r['cpu_x_per_repeat']))} | "
              f"{r['generate_s']} | {r['encode_once_s']} | {r['time_x']} |" for r in doc["rows"]]
    lines.append(f"\nWorst `cpu x` {max(r['cpu_x'] for r in doc['rows'])}, `chars x` "
                 f"{max(r['chars_x'] for r in doc['rows'])}, `time x` {max(r['time_x'] for r in doc['rows'])} "
                 "(target: at most 2).")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--length", type=int, default=32768)
    ap.add_argument("--tasks", default=TASKS)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--data-dir", type=Path, help="the real source files (default: stand-ins made here)")
    ap.add_argument("--repeats", type=int, default=3, help="times each task is drawn and encoded (medians kept)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    from checkpoints.tokenizer import load_tokenizer
    from evaluators.chat import missing_template, user_message

    folder = tokenizer_folder(args.model)
    tokenizer = load_tokenizer(folder, None)
    wrap = user_message(tokenizer, missing_template("ruler_v2"), "ruler_v2")  # what Evaluator.wrap sends
    data_dir = args.data_dir or stand_in_sources(Path(tempfile.mkdtemp()))
    rows = []
    for task in args.tasks.split(","):
        r = row(task, args.length, args.samples, tokenizer, wrap, data_dir, args.repeats)
        print(json.dumps(r), flush=True)
        rows.append(r)
    doc = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "python": platform.python_version(), "load": round(os.getloadavg()[0], 1),
                       "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "(unset)")},
           "tokenizer": folder.name, "data": str(args.data_dir) if args.data_dir else
           "stand-ins (pydoc_data.topics: MMLU-style and HotpotQA-style)", "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ruler_v2_build.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "ruler_v2_build.md").write_text(markdown(doc))


if __name__ == "__main__":
    main()
