"""Start-up time of the `lctx` command: `lctx --help`, `lctx status --help` and a client
command against a port where nothing listens (connection refused is the expected
answer: the time is what the command costs before it can talk to a server).

Each command runs as a subprocess RUNS times after one warm-up run (hyperfine-like:
median, min and max of the wall time), for every console script given, typically the
tree before the CLI moved to `cli/` and the tree after it. Saves JSON + markdown.

Usage: python bench/cli_startup.py [--lctx NAME=PATH ...] [--runs 10] [--out bench/results]
(default: before=/work/main/.venv/bin/lctx, after=<this repo>/.venv/bin/lctx)"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LCTX = ["before=/work/main/.venv/bin/lctx", f"after={REPO / '.venv' / 'bin' / 'lctx'}"]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands(port: int) -> dict[str, list[str]]:
    url = f"http://127.0.0.1:{port}"
    return {
        "lctx --help": ["--help"],
        "lctx status --help": ["status", "--help"],
        "lctx status (refused)": ["status", "--url", url],
        "lctx checkpoints list (refused)": ["checkpoints", "list", "--url", url],
    }


def time_command(argv: list[str], runs: int, cwd: str, env: dict[str, str]) -> dict[str, float | int]:
    def once() -> tuple[float, int]:
        t0 = time.perf_counter()
        rc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=120).returncode
        return time.perf_counter() - t0, rc

    once()  # warm-up: file cache, .pyc files
    times, codes = zip(*(once() for _ in range(runs)), strict=True)
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3), "runs": runs, "exit_code": codes[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lctx", action="append", metavar="NAME=PATH", help="console script to time (repeatable)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    scripts = dict(item.split("=", 1) for item in (args.lctx or DEFAULT_LCTX))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LCTX_")}
    port = closed_port()
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as cwd:  # no ./var or settings file of the repo in the way
        for name, script in scripts.items():
            results[name] = {}
            for label, argv in commands(port).items():
                results[name][label] = time_command([script, *argv], args.runs, cwd, env)
                print(f"{name:<8} {label:<34} median {results[name][label]['median_s']:.3f} s "
                      f"(min {results[name][label]['min_s']:.3f}, max {results[name][label]['max_s']:.3f}, "
                      f"exit {results[name][label]['exit_code']})", flush=True)
    doc = {"benchmark": "cli_startup", "scripts": scripts, "results": results,
           "machine": {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
                       "python": platform.python_version(), "platform": platform.platform()},
           "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cli_startup.json").write_text(json.dumps(doc, indent=2) + "\n")
    names = list(scripts)
    lines = ["# `lctx` start-up time", "",
             f"Median wall time of {args.runs} subprocess runs after one warm-up, {doc['date']}, "
             f"{doc['machine']['cpus']} CPUs, load average {doc['machine']['load_average']} "
             "(a shared host: other jobs run beside this one).", "",
             "| command | " + " | ".join(f"{n} median (min-max) s" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for label in commands(port):
        cells = [f"{results[n][label]['median_s']:.2f} ({results[n][label]['min_s']:.2f}-"
                 f"{results[n][label]['max_s']:.2f})" for n in names]
        lines.append(f"| `{label}` | " + " | ".join(cells) + " |")
    lines += ["", "Scripts: " + ", ".join(f"{n} = `{p}`" for n, p in scripts.items()), ""]
    (out / "cli_startup.md").write_text("\n".join(lines))
    print(f"saved {out / 'cli_startup.json'} and {out / 'cli_startup.md'}")


if __name__ == "__main__":
    main()
