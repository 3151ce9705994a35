"""Attention diagnostics at long inputs: time and peak memory (VmHWM) of the streaming
path (chunked prefill with RowStats) on a tiny random model, each length in its own
process, against the size one dense weight matrix per layer would take.
Prints a table and saves bench/results/diagnostics.{json,md}."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = [2048, 8192, 16384]

CHILD = """
import json, sys, time, torch
from pathlib import Path
sys.path.insert(0, {root!r})
torch.set_num_threads(1)
from evaluators.diagnostics.evaluator import measure
from checkpoints.loading import load_model
loaded = load_model({ckpt!r})
n = {n}
ids = torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(0)).tolist()
t = time.perf_counter()
out = measure(loaded, ids, dense=False, chunk=1024)
dt = time.perf_counter() - t
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(json.dumps({{"length": n, "path": out["path"], "seconds": dt, "peak_rss_mib": hwm / 1024}}))
"""


def main() -> None:
    sys.path.insert(0, str(ROOT))
    import torch

    from checkpoints.config import ModelConfig
    from checkpoints.loading import save_model
    from checkpoints.model import Decoder
    from checkpoints.tokenizer import ByteTokenizer

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        cfg = ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
                          vocab_size=259, max_position_embeddings=32768)
        save_model(Decoder(cfg), tmp, ByteTokenizer())
        for n in LENGTHS:
            res = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), ckpt=tmp, n=n)],
                                 capture_output=True, text=True, check=True)
            row = json.loads(res.stdout.strip().splitlines()[-1])
            row["dense_weights_one_layer_mib"] = cfg.num_heads * n * n * 4 / 2**20
            rows.append(row)
            print(row, flush=True)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "diagnostics.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["| tokens | path | seconds | peak RSS (MiB) | one dense layer (MiB) |", "|---|---|---|---|---|"]
    lines += [f"| {r['length']} | {r['path']} | {r['seconds']:.1f} | {r['peak_rss_mib']:.0f} | "
              f"{r['dense_weights_one_layer_mib']:.0f} |" for r in rows]
    (out / "diagnostics.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
