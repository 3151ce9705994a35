"""The GPU results of issue #30 as tables with the issue's targets: reads what
`bench/gpu_run.sh` left in one or more device output folders (later folders
win for the same measurement) and writes bench/results/gpu_{env,tests,kernels,model}.{json,md}.

The test outcomes come from the streamed log (bench/pytest_stream.py), so a
run cut off by its time limit still says what passed, what failed and what
never ran (the collection of the same files, read here, minus what ran).

Usage: python bench/gpu_report.py DEVICE_OUT [DEVICE_OUT ...] [--out bench/results]"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_FILES = ["tests/checkpoints/attention", "tests/checkpoints/kv", "tests/checkpoints/engine/test_engine.py",
              "tests/checkpoints/test_generate_long_prefill.py"]
SOFTMAX_TARGET, OTHER_TARGET, DECODE_TARGET = 1.10, 1.25, 70.0


def fmt(v, digits: int = 3) -> str:
    return f"{v:.{digits}g}" if isinstance(v, float) else ("" if v is None else str(v))


def table(cols: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + \
        ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]


def env(folders: list[Path]) -> dict:
    text = (folders[-1] / "gpu_env.txt").read_text()
    driver = re.search(r"Driver Version: (\S+)", text)
    versions = next((line for line in text.splitlines() if line.startswith("python ")), "")
    return {"driver": driver.group(1) if driver else None, "versions": versions,
            "flash_attn": next((ln for ln in text.splitlines() if ln.startswith("flash_attn")), None),
            "vllm": next((ln for ln in text.splitlines() if ln.startswith("vllm")), None), "text": text}


def tests(folders: list[Path]) -> dict:
    outcome: dict[str, str] = {}
    failures: dict[str, str] = {}
    for folder in folders:
        log = folder / "gpu_tests_stream.log"
        if not log.exists():
            continue
        current = None
        for line in log.read_text().splitlines():
            m = re.match(r"^(PASSED|FAILED|SKIPPED|ERROR) (.+) \[(call|setup|teardown), [0-9.]+ s\]$", line)
            if m:
                outcome[m.group(2)] = m.group(1)
                current = m.group(2) if m.group(1) in ("FAILED", "ERROR") else None
                if current:
                    failures[current] = ""
            elif current and line.startswith("E "):
                failures[current] += line[2:].strip() + " "
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co", *TEST_FILES],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"},
    ).stdout.splitlines()
    collected = sorted({line for line in collected if "::" in line})
    counts = {k: sum(1 for v in outcome.values() if v == k) for k in ("PASSED", "FAILED", "SKIPPED", "ERROR")}
    return {"files": TEST_FILES, "counts": counts, "collected": len(collected),
            "not_run": [t for t in collected if t not in outcome],
            "failures": {t: failures.get(t, "").strip() for t, v in outcome.items() if v in ("FAILED", "ERROR")}}


def merged(folders: list[Path], name: str, parts: list[str], key) -> dict:
    doc: dict = {"info": []}
    for folder in folders:
        path = folder / name
        if not path.exists():
            continue
        d = json.loads(path.read_text())
        doc["info"] += [{**i, "from": folder.name} for i in (d["info"] if isinstance(d["info"], list) else [d["info"]])]
        for part in parts:
            rows = {key(r): r for r in doc.get(part, [])}
            rows.update({key(r): r for r in d.get(part, [])})
            doc[part] = list(rows.values())
    return doc


def kernels_md(doc: dict, gpu_env: dict) -> str:
    info = doc["info"][0]
    lines = [f"# Triton kernels against SDPA on {info['gpu']}", "",
             f"Driver {gpu_env['driver']}; {gpu_env['versions'].split(' NVIDIA')[0]}; {gpu_env['flash_attn']}.",
             f"Measured copy bandwidth {info['copy_bw_measured'] / 1e12:.2f} TB/s (read + written); datasheet "
             f"{info['datasheet_bw'] / 1e12:.1f} TB/s; dense bf16 peak {info['peak_bf16_flops'] / 1e12:.0f} TFLOP/s.",
             f"Prefill: causal, {info['hq']} query heads over {info['hkv']} key/value heads, batch = 65536 / N; "
             "FLOPs = 2 B H N^2 d (so a window's skipped blocks count as work done). `bench/gpu_kernels.py`.", ""]
    prefill = doc["prefill"]
    base = {(r["dtype"], r["d"], r["n"]): r for r in prefill
            if r["path"].startswith("sdpa") and not r["path"].startswith("sdpa-cudnn")}
    cudnn = {(r["dtype"], r["d"], r["n"]): r for r in prefill if r["path"].startswith("sdpa-cudnn")}
    rows = []
    for r in sorted(prefill, key=lambda r: (r["dtype"], -r["d"], r["n"], r["path"] != "triton", r["variant"])):
        if r["path"] != "triton" or "ms" not in r:
            continue
        b = base.get((r["dtype"], r["d"], r["n"]))
        ratio = r["ms"] / b["ms"] if b and "ms" in b else None
        target = SOFTMAX_TARGET if r["variant"] == "softmax" else OTHER_TARGET
        judged = r["dtype"] == "bfloat16" and r["n"] == 16384
        c = cudnn.get((r["dtype"], r["d"], r["n"])) or {}
        rows.append([r["dtype"], r["d"], r["n"], r["variant"], r["ms"], b and b.get("ms"), c.get("ms"), r["tflops"],
                     b and b.get("tflops"), ratio, f"<= {target}" if judged else "",
                     ("yes" if ratio <= target else f"no ({ratio / target:.1f}x over)") if judged and ratio else ""])
    lines += ["## Prefill", ""] + table(
        ["dtype", "d", "N", "variant", "Triton ms", "SDPA ms", "cuDNN SDPA ms", "Triton TFLOP/s", "SDPA TFLOP/s",
         "time / SDPA", "target (16k bf16)", "met"], rows)
    fp32 = [r for r in prefill if r["dtype"] == "float32"]
    lines += ["", "fp32: " + "; ".join(f"{r['path']} N={r['n']}: {fmt(r.get('ms'))} ms ({fmt(r.get('tflops'))} TFLOP/s)"
                                     for r in fp32)
              + ". No Triton fp32 row: two runs (50 s and 45 s limits) ended in Triton's fp32 compile and autotune "
                "before the first measurement, so the fp32 target is not measured.", ""]
    rows = []
    for r in sorted(doc["decode"], key=lambda r: (r["cache"], r["path"] != "triton", r["variant"])):
        if "ms" not in r:
            continue
        met = "" if r["path"] != "triton" else ("yes" if r["pct_datasheet_bw"] >= DECODE_TARGET else "no")
        rows.append([r["cache"], r["batch"], r["variant"], r["path"], r["ms"], r["gb_s"], r["pct_copy_bw"],
                     r["pct_datasheet_bw"], met])
    lines += ["## Decode (one token per row, bf16, d = 128, K + V bytes read)", ""] + table(
        ["cache", "batch", "variant", "path", "ms", "GB/s", "% copy bw", "% datasheet bw", ">= 70% datasheet"], rows)
    return "\n".join(lines) + "\n"


def model_md(doc: dict) -> str:
    info = doc["info"][0]
    rows = doc["rows"]
    lines = [f"# Whole models on {info['gpu']}: lctx (Triton) against transformers {info['transformers']} (SDPA)", "",
             "Random bf16 weights in each shape, saved by transformers as safetensors; `bench/gpu_model.py`.", "",
             "## Logits at 4k (relative RMS error against transformers fp32 on the same ids)", ""]
    lines += table(["shape", "lctx bf16", "transformers bf16", "lctx argmax agree", "transformers argmax agree"],
                   [[r["shape"], r["lctx_bf16_vs_hf_fp32"]["rel_rms"], r["hf_bf16_vs_hf_fp32"]["rel_rms"],
                     r["lctx_bf16_vs_hf_fp32"]["argmax_agree"], r["hf_bf16_vs_hf_fp32"]["argmax_agree"]]
                    for r in rows if r["part"] == "parity"])
    lines += ["", "## Prefill of one prompt (peak memory above the loaded weights)", ""]
    lines += table(["shape", "N", "rope", "lctx s", "transformers s", "speed-up", "lctx MiB", "transformers MiB",
                    "memory ratio", "same next token"],
                   [[r["shape"], r["n"], r["rope"] or "own", r.get("lctx_s"), r.get("transformers_s"), r.get("speedup"),
                     r.get("lctx_peak_mib"), r.get("transformers_peak_mib"), r.get("memory_ratio"),
                     r.get("lctx_argmax") == r.get("transformers_argmax")] for r in rows if r["part"] == "prefill"])
    lines += ["", "## Batched greedy decoding (decode only: time(new + 1) - time(1))", "",
              "Memory: peak allocated during the run, both models' weights included (both are loaded)."]
    if not info.get("decode_warmup"):
        lines += ["This run had no untimed warm-up: its first row (batch 1, 4k) carries both sides' first-call "
                  "costs (Triton compiles, cuBLAS and allocator start-up); `bench/gpu_model.py` warms up since."]
    lines += [""]
    lines += table(["shape", "batch", "cache", "new", "lctx tok/s", "transformers tok/s", "speed-up", "lctx MiB",
                    "transformers MiB"],
                   [[r["shape"], r["batch"], r["cache"], r["new_tokens"], r.get("lctx_tokens_per_s"),
                     r.get("transformers_tokens_per_s"), r.get("speedup"), r.get("lctx_peak_mib"),
                     r.get("transformers_peak_mib")] for r in rows if r["part"] == "decode"])
    errors = [r for r in rows if r["part"] == "error"]
    if errors:
        lines += ["", "Errors: " + "; ".join(f"{r['shape']}: {r['error']}" for r in errors)]
    return "\n".join(lines) + "\n"


def tests_md(t: dict, gpu_env: dict, note: str | None) -> str:
    c = t["counts"]
    lines = ["# Kernel and engine tests compiled on the GPU (TRITON_INTERPRET=0)", "",
             f"{gpu_env['versions']}; driver {gpu_env['driver']}.", "",
             f"Files: {', '.join(t['files'])}; {t['collected']} tests collected; passed {c['PASSED']}, failed "
             f"{c['FAILED']}, errors {c['ERROR']}, skipped {c['SKIPPED']}; {len(t['not_run'])} not finished within the "
             "run's time limit (listed below).", ""] + ([note, ""] if note else []) + ["## Failures", ""]
    lines += [f"- `{name}`: {msg}" for name, msg in t["failures"].items()] or ["none"]
    lines += ["", "## Not run (time limit)", ""] + [f"- `{name}`" for name in t["not_run"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--tests-note", help="a paragraph for gpu_tests.md (what changed since the run, say)")
    args = p.parse_args()
    gpu_env = env(args.folders)
    (args.out / "gpu_env.json").write_text(json.dumps(gpu_env, indent=1) + "\n")
    (args.out / "gpu_env.md").write_text("# The GPU machine\n\n```\n" + gpu_env["text"] + "```\n")
    t = tests(args.folders)
    (args.out / "gpu_tests.json").write_text(json.dumps(t, indent=1) + "\n")
    (args.out / "gpu_tests.md").write_text(tests_md(t, gpu_env, args.tests_note))
    kernel_key = lambda r: (r["variant"], r["path"], r["dtype"], r["d"], r.get("n"), r.get("cache"))  # noqa: E731
    k = merged(args.folders, "gpu_kernels.json", ["prefill", "decode"], kernel_key)
    (args.out / "gpu_kernels.json").write_text(json.dumps(k, indent=1) + "\n")
    (args.out / "gpu_kernels.md").write_text(kernels_md(k, gpu_env))
    model_key = lambda r: (r["part"], r["shape"], r.get("n"), r.get("batch"), r.get("cache"), r.get("error"))  # noqa: E731
    m = merged(args.folders, "gpu_model.json", ["rows"], model_key)
    m["rows"] = [r for r in m["rows"] if r["part"] != "error" or not any(  # errors a later run got past
        x["part"] == "parity" and x["shape"] == r["shape"] for x in m["rows"])]
    (args.out / "gpu_model.json").write_text(json.dumps(m, indent=1) + "\n")
    (args.out / "gpu_model.md").write_text(model_md(m))
    print("wrote", ", ".join(f"gpu_{n}.{{json,md}}" for n in ("env", "tests", "kernels", "model")))


if __name__ == "__main__":
    main()
