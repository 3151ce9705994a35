"""Error bars (#57): do the intervals lctx prints cover what they claim, and what they cost.

1. Coverage of the CLT interval of a 0/1 score (evaluators.uncertainty.mean_error's formula,
   vectorised) over 4,000 seeded runs per (n, p): near 95% where n p (1-p) is not tiny.
2. Samples that share contexts (G contexts of m samples; a context's effect shared): the plain
   CLT interval's coverage against the cluster-robust one's (Miller 2024, eq. 4), 2,000 runs.
3. Two runs of the same questions (a checkpoint and the next, a share of its answers drawn
   again): the paired difference's standard error against the unpaired one's, and the share of
   runs whose interval excludes zero when the second lost 3 points.
4. `attach` on a RULER-sized result (13 tasks x 4 lengths x 100 samples, its 1,000 bootstrap
   resamples through RULER's own aggregate): CPU seconds, the cost a job's end pays once.

Prints a table and saves bench/results/error_bars.md.
Usage: python bench/error_bars.py"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from evaluators import uncertainty as u

OUT = Path(__file__).parent / "results" / "error_bars.md"


def binomial_coverage() -> list[str]:
    lines = ["| n | p | coverage of the 95% CLT interval |", "|---|---|---|"]
    for n in (50, 100, 400):
        for p in (0.5, 0.8, 0.95):
            rng = np.random.default_rng([n, int(p * 100)])
            x = (rng.random((4000, n)) < p).astype(float)
            mean, se = x.mean(axis=1), x.std(axis=1, ddof=1) / math.sqrt(n)
            lines.append(f"| {n} | {p} | {np.mean(np.abs(mean - p) <= u.Z95 * se):.3f} |")
    return lines


def clustered_coverage() -> list[str]:
    lines = ["| contexts x samples | shared effect s.d. | CLT coverage | clustered coverage | se ratio |",
             "|---|---|---|---|---|"]
    for g, m, tau in ((20, 10, 0.0), (20, 10, 0.5), (20, 10, 1.0), (50, 4, 1.0)):
        rng = np.random.default_rng([g, m, int(tau * 10)])
        truth = None
        hits_plain = hits_cluster = 0
        ratios = []
        runs = 2000
        # the true mean of P(effect + noise > 0) with effect ~ N(0, tau), noise ~ N(0, 1)
        truth = 0.5
        groups = np.repeat(np.arange(g), m)
        for _ in range(runs):
            effect = np.repeat(rng.normal(scale=tau, size=g), m) if tau else 0.0
            y = (effect + rng.normal(size=g * m) > 0).astype(float)
            mean, se = u.clt(y)
            _, sec, _ = u.clustered(y, list(groups))
            hits_plain += abs(mean - truth) <= u.Z95 * se
            hits_cluster += abs(mean - truth) <= u.Z95 * sec
            ratios.append(sec / se if se else 1.0)
        lines.append(f"| {g} x {m} | {tau} | {hits_plain / runs:.3f} | {hits_cluster / runs:.3f} | "
                     f"{np.median(ratios):.2f} |")
    return lines


def paired_vs_unpaired() -> list[str]:
    lines = ["| questions | answers drawn again between runs | paired se | unpaired se | drop of 3 points found (paired) | "
             "(unpaired) |", "|---|---|---|---|---|---|"]
    for n, flip in ((200, 0.05), (400, 0.05), (400, 0.15)):
        rng = np.random.default_rng([n, int(flip * 100)])
        paired_se, unpaired_se, found_p, found_u = [], [], 0, 0
        runs = 500
        for _ in range(runs):
            a = rng.random(n) < 0.7
            b = np.where(rng.random(n) < flip, rng.random(n) < 0.7, a)  # `flip` of the answers drawn again
            lose = np.flatnonzero(b)[: int(0.03 * n)]
            b[lose] = False  # 3 points lost on top of the noise
            da = {str(i): float(v) for i, v in enumerate(a)}
            db = {str(i): float(v) for i, v in enumerate(b)}
            p = u.paired_difference(da, db)
            q = u.unpaired_difference(list(da.values()), list(db.values()))
            paired_se.append(p.stderr)
            unpaired_se.append(q.stderr)
            found_p += p.high < 0
            found_u += q.high < 0
        lines.append(f"| {n} | {flip} | {np.mean(paired_se):.4f} | {np.mean(unpaired_se):.4f} | "
                     f"{found_p / runs:.2f} | {found_u / runs:.2f} |")
    return lines


def attach_cost() -> list[str]:
    from evaluators.registry import make_evaluator
    from evaluators.ruler.protocol import TASKS

    tasks = list(TASKS)
    lengths = [4096, 8192, 16384, 32768]
    ev = make_evaluator({"name": "ruler", "tasks": tasks, "lengths": lengths, "samples": 100})
    rng = np.random.default_rng(0)
    records = [{"id": f"{t}/{n}/{i}", "ruler_task": t, "length": n, "index": i, "null": False,
                "score": float(rng.random() < 0.9 - 0.1 * k)}
               for t in tasks for k, n in enumerate(lengths) for i in range(100)]
    start = time.process_time()
    result = u.attach(ev.aggregate(records), records, ev.error_rule(), ev.aggregate, "ruler")
    cpu = time.process_time() - start
    avg = result.metric("average")
    return ["| records | resamples | CPU seconds | average | its error |", "|---|---|---|---|---|",
            f"| {len(records)} | {avg.error.resamples} | {cpu:.2f} | {avg.value:.2f} | "
            f"± {avg.error.stderr:.2f} [{avg.error.low:.2f}, {avg.error.high:.2f}] ({avg.error.method}) |"]


def main() -> None:
    parts = [
        ("Coverage of the CLT interval of a 0/1 score (4,000 seeded runs each)", binomial_coverage()),
        ("Shared contexts: plain and cluster-robust intervals (2,000 runs each; truth 0.5)", clustered_coverage()),
        ("Paired against unpaired differences (500 runs each)", paired_vs_unpaired()),
        ("The cost of a RULER-sized result's error bars", attach_cost()),
    ]
    text = "# Error bars (bench/error_bars.py)\n\n" + "\n\n".join(f"## {title}\n\n" + "\n".join(lines)
                                                                 for title, lines in parts) + "\n"
    print(text)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)


if __name__ == "__main__":
    main()
