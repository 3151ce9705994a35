"""A warm worker's second identical job on the CPU (issue #41: within 1.3x of its engine
time): two RULER niah_single_1 jobs on one loaded model (the real SmolLM2-135M-Instruct,
float32), as `bench/gpu_eval.py --warm-job` runs them on a GPU, with the drawn streams kept in
the process (evaluators/ruler/cache.py, the default) and without (MEMO_STREAMS = 0, as before).

    .venv/bin/python bench/warm_job.py [--length 2048] [--samples 16]

Writes bench/results/warm_job.{json,md}."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]


def main() -> None:
    from gpu_eval import warm_jobs

    from evaluators.ruler import cache

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, default=REPO / "var" / "models" / "smollm2-135m-instruct")
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for label, streams in (("streams not kept (before)", 0), ("streams kept in the process", cache.MEMO_STREAMS)):
            cache.MEMO_STREAMS = streams
            cache._memo.clear()
            for row in warm_jobs(args.checkpoint, args.length, args.samples, Path(work), "cpu", "float32"):
                rows.append({"setting": label, **row})
                print(rows[-1], flush=True)
    doc = {"machine": f"{platform.platform()}, {__import__('os').cpu_count()} cores", "checkpoint": str(args.checkpoint),
           "length": args.length, "samples": args.samples, "rows": rows}
    (args.out / "warm_job.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# A warm worker's second identical job, CPU (RULER niah_single_1, {args.length} x {args.samples})", "",
             f"{doc['machine']}; the real model (SmolLM2-135M-Instruct, float32), loaded once, two jobs on it "
             "(`bench/gpu_eval.py`'s `warm_jobs`: the worker's path without Ray and the database). Engine seconds: "
             "prefill plus decoding. Target (issue #41): the second job within 1.3x of them.", "",
             "| setting | job | wall s | engine s | wall / engine | waiting for prompts s | prefix reused |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['job']} | {r['s']:.2f} | {r['engine_s']:.2f} | {r['wall_over_engine']:.2f} | "
              f"{r['seconds'].get('build_wait_s', 0):.2f} | {(r['prefix_reused'] or {}).get('reused_fraction')} |"
              for r in rows]
    (args.out / "warm_job.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
