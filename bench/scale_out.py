"""One job spread over Ray workers: a RULER job on the demo checkpoints run on 1 worker and on
2 workers of 1 CPU thread each (a local Ray of 2 CPUs), through the service's own coordinator
and actors (`service.runner.coordinator.JobRun`, `service.runner.executor.ActorHandle`): wall time ratio and
whether every sample's output and the results are identical. Then the fault run: the same
kind of job on a real two-node Ray cluster on loopback (head and worker raylets of one CPU
each), the worker node's processes killed by pid while it runs a unit: units re-run, samples
lost and duplicated. Saves bench/results/scale_out.{json,md}.

    nice .venv/bin/python bench/scale_out.py [--samples 40] [--lengths 1024 2048] [--unit 16]

Wall times include starting the actors and loading the checkpoint in each (what a user
waits for); run it on an otherwise idle machine: two workers need both cores."""

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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evaluators.samplelog import SAMPLES_FILE  # noqa: E402
from service.core.layout import task_dir  # noqa: E402
from service.core.settings import Settings  # noqa: E402
from service.runner.coordinator import JobRun  # noqa: E402
from service.runner.executor import DIED, ActorHandle  # noqa: E402
from service.runner.progress import unit_notes  # noqa: E402
from service.store import Store  # noqa: E402

RESULTS = REPO / "bench" / "results"
DEMOS = REPO / "demo" / "checkpoints"
RULER_TASKS = ["niah_single_1", "niah_multikey_2", "fwe"]


def settings_for(home: Path, unit: int, workers: int) -> Settings:
    settings = Settings(home=home, checkpoint_roots=[DEMOS], executor=False, scheduler=False, unit_samples=unit,
                        job_workers=workers, job_cpus=1, engine_prefix_cache=True)
    settings.prepare()
    return settings


def run_job(settings: Settings, checkpoint: Path, tasks: list[dict[str, Any]], workers: int,
            during: Any = None) -> dict[str, Any]:
    """One job through JobRun on Ray actors; `during(run, job)` runs in a thread while it does."""
    import threading

    store = Store(settings.database)
    store.create_all()
    store.add_job(checkpoint=checkpoint.name, checkpoint_path=str(checkpoint), fingerprint="f" * 64, tasks=tasks,
                  rope=None, backend="auto", priority=0)
    job = store.claim_next("bench")
    run = JobRun(settings, store, job, lambda: ActorHandle(settings, job.id, 0), workers, died=DIED)
    side = threading.Thread(target=during, args=(run, job), daemon=True) if during else None
    if side:
        side.start()
    start = time.perf_counter()
    status = run.run()
    seconds = time.perf_counter() - start
    error = store.get_job(job.id).error
    store.close()
    results = json.loads((settings.results / job.id / "results.json").read_text()) if status == "succeeded" else {}
    records = {}
    for key in ("ruler", "passkey"):
        f = task_dir(settings, job.id, key) / SAMPLES_FILE
        if f.is_file():
            records[key] = [json.loads(line) for line in f.read_text().splitlines()]
    notes = {key: unit_notes(task_dir(settings, job.id, key)) for key in records}
    return {"job": job.id, "status": status, "error": error, "seconds": round(seconds, 1), "results": results,
            "records": records, "notes": notes, "work": results.get("work")}


def comparable(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in ("samples_file", "plots", "prefix_cache")}


def speedup(samples: int, lengths: list[int], unit: int) -> list[dict[str, Any]]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    task = {"name": "ruler", "tasks": RULER_TASKS, "lengths": lengths, "samples": samples, "bootstrap": 200}
    try:
        for demo in ("softmax", "tda"):
            runs = {}
            for workers in (1, 2):
                with tempfile.TemporaryDirectory() as home:
                    runs[workers] = run_job(settings_for(Path(home), unit, workers), DEMOS / demo, [task], workers)
                print(f"{demo}: {workers} worker(s): {runs[workers]['seconds']} s ({runs[workers]['status']})",
                      flush=True)
            one, two = runs[1], runs[2]
            outputs = {w: {r["id"]: r["prediction"] for r in runs[w]["records"]["ruler"]} for w in (1, 2)}
            rows.append({
                "checkpoint": f"demo-{demo}", "samples": len(outputs[1]), "units": two["work"]["units"],
                "one_worker_s": one["seconds"], "two_workers_s": two["seconds"],
                "ratio": round(one["seconds"] / two["seconds"], 2),
                "identical_outputs": outputs[1] == outputs[2],
                "identical_results": comparable(one["results"]["results"]["ruler"])
                == comparable(two["results"]["results"]["ruler"]),
                "worker_pids": len({n["pid"] for n in two["notes"]["ruler"]}),
            })
    finally:
        ray.shutdown()
    return rows


def cheap_speedup(samples: int, unit: int | None) -> dict[str, Any]:
    """The cheap case (issue #40): passkey at 192-256 tokens on demo-softmax, `samples` in all,
    where each sample costs little beside the work around it; units sized by the service's
    rule (`unit` None) or `unit` samples each."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    lengths = [192, 224, 256]
    task = {"name": "passkey", "lengths": lengths, "trials": samples // len(lengths), "seed": 0}
    runs = {}
    try:
        for workers in (1, 2):
            with tempfile.TemporaryDirectory() as home:
                settings = settings_for(Path(home), unit, workers)
                runs[workers] = run_job(settings, DEMOS / "softmax", [task], workers)
            print(f"cheap: {workers} worker(s): {runs[workers]['seconds']} s ({runs[workers]['status']})", flush=True)
    finally:
        ray.shutdown()
    outputs = {w: {r["id"]: r["prediction"] for r in runs[w]["records"]["passkey"]} for w in (1, 2)}
    return {"task": f"passkey {lengths}", "samples": len(outputs[1]), "units": runs[2]["work"]["units"],
            "one_worker_s": runs[1]["seconds"], "two_workers_s": runs[2]["seconds"],
            "ratio": round(runs[1]["seconds"] / runs[2]["seconds"], 2), "identical_outputs": outputs[1] == outputs[2],
            "identical_results": comparable(runs[1]["results"]["results"]["passkey"])
            == comparable(runs[2]["results"]["results"]["passkey"])}


def fault_run(trials: int, unit: int, length: int) -> dict[str, Any]:
    """The two-node run: the worker node is killed as soon as one of its units has recorded a sample."""
    import ray

    from tests.helpers import TwoNodeRay, descendants

    tmp = Path(tempfile.mkdtemp())
    cluster = TwoNodeRay(tmp)
    seen: dict[str, Any] = {}
    try:
        from service.runner.executor import connect_ray

        settings = settings_for(tmp / "var", unit, 2)
        connect_ray(settings.model_copy(update={"ray_address": cluster.address}))
        task = {"name": "passkey", "lengths": [length], "trials": trials, "seed": 7}

        def kill_mid_unit(run: JobRun, job: Any) -> None:
            folder = task_dir(settings, job.id, "passkey")
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                for note in (folder / "units").glob("*.json") if (folder / "units").is_dir() else []:
                    try:
                        pid = json.loads(note.read_text())["pid"]
                    except (ValueError, KeyError, OSError):
                        continue
                    records = note.with_suffix(".jsonl")
                    n = records.read_bytes().count(b"\n") if records.is_file() else 0
                    if 1 <= n < unit and pid in descendants(cluster.worker_raylet):
                        killed = cluster.kill_worker_node()
                        seen.update(unit=note.stem.split("-")[0], killed_pids=len(killed),
                                    recorded_before_kill=records.read_bytes().count(b"\n"))
                        return
                time.sleep(0.002)

        result = run_job(settings, DEMOS / "softmax", [task], 2, during=kill_mid_unit)
    finally:
        ray.shutdown()
        cluster.stop()
    ids = [r["id"] for r in result["records"]["passkey"]]
    reran = [n for n in result["notes"]["passkey"] if n.get("unit") == seen.get("unit") and "samples" in n]
    return {"status": result["status"], "planned": trials, "length": length, "units": result["work"]["units"],
            "unit_runs": result["work"]["unit_runs"], "reruns": result["work"]["reruns"],
            "killed_unit": seen.get("unit"), "killed_pids": seen.get("killed_pids"),
            "recorded_before_kill": seen.get("recorded_before_kill"),
            "rerun_samples": [n["samples"] for n in reran], "records": len(ids), "lost": trials - len(set(ids)),
            "duplicated": len(ids) - len(set(ids)), "seconds": result["seconds"]}


def markdown(report: dict[str, Any]) -> str:
    rows = report["speedup"]
    out = ["# Scale out: one job over Ray workers", "",
           f"{report['machine']}; load average at start {report['load']}. `python bench/scale_out.py "
           f"--samples {report['args']['samples']} --lengths {' '.join(map(str, report['args']['lengths']))} "
           f"--unit {report['args']['unit']}`. A RULER job ({', '.join(RULER_TASKS)}) through the service's "
           "coordinator and Ray actors (each loads the checkpoint once, 1 CPU thread); wall time from the job's "
           "start to its results.json, actor start-up and checkpoint loading included.", "",
           "| checkpoint | samples | units | 1 worker s | 2 workers s | ratio | identical outputs | identical results |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['checkpoint']} | {r['samples']} | {r['units']} | {r['one_worker_s']} | {r['two_workers_s']} "
                   f"| {r['ratio']}x | {r['identical_outputs']} | {r['identical_results']} |")
    c = report.get("cheap")
    if c:
        out += ["", "## The cheap case: many samples that each cost little", "",
                f"`python bench/scale_out.py --only-cheap --cheap {c['samples'] + 1}`: {c['task']} tokens on "
                f"demo-softmax, units sized by the service's rule (LCTX_UNIT_TOKENS), 1 worker against 2 workers of "
                f"1 CPU thread each (a local Ray of 2 CPUs); load average after {report.get('cheap_load')}. Target "
                "(issue #40): at least 1.7x.", "",
                "| task | samples | units | 1 worker s | 2 workers s | ratio | identical outputs | identical results |",
                "|---|---|---|---|---|---|---|---|",
                f"| {c['task']} | {c['samples']} | {c['units']} | {c['one_worker_s']} | {c['two_workers_s']} | "
                f"{c['ratio']}x | {c['identical_outputs']} | {c['identical_results']} |"]
    f = report["fault"]
    if f is None:
        return "\n".join(out + [""])
    out += ["", "## Fault run: a two-node Ray cluster on loopback, the worker node killed mid-unit", "",
            f"passkey at {f.get('length')} tokens, {f['planned']} samples in {f['units']} units over 2 workers (one per node). The worker node's "
            f"{f['killed_pids']} processes (raylet, agents, its actor) were SIGKILLed by pid while its unit "
            f"{f['killed_unit']} had {f['recorded_before_kill']} samples recorded.", "",
            "| status | unit runs | units re-run | samples the re-run ran | records | lost | duplicated | seconds |",
            "|---|---|---|---|---|---|---|---|",
            f"| {f['status']} | {f['unit_runs']} | {len(f['reruns'])} | {f['rerun_samples']} | {f['records']} | "
            f"{f['lost']} | {f['duplicated']} | {f['seconds']} |", ""]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40, help="RULER samples per task and length")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--unit", type=int, default=16, help="samples per work unit")
    parser.add_argument("--fault-trials", type=int, default=36)
    parser.add_argument("--fault-unit", type=int, default=12)
    parser.add_argument("--fault-length", type=int, default=4096, help="long enough that the kill lands mid-unit")
    parser.add_argument("--no-fault", action="store_true", help="skip the two-node fault run")
    parser.add_argument("--only-fault", action="store_true", help="run the fault run again, keep the saved speedup")
    parser.add_argument("--cheap", type=int, default=0, help="also (or with --only-cheap, only) the cheap case: "
                        "this many passkey samples at 192-256 tokens, units sized by the service's rule")
    parser.add_argument("--only-cheap", action="store_true", help="run the cheap case, keep the rest saved")
    args = parser.parse_args()
    if args.only_cheap:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        saved = json.loads((RESULTS / "scale_out.json").read_text()) if (RESULTS / "scale_out.json").is_file() else {}
        saved["cheap"] = cheap_speedup(args.cheap, None)
        saved["cheap_load"] = [round(x, 1) for x in os.getloadavg()]
        (RESULTS / "scale_out.json").write_text(json.dumps(saved, indent=2) + "\n")
        (RESULTS / "scale_out.md").write_text(markdown(saved))
        print(markdown(saved))
        return
    os.environ.setdefault("TRITON_INTERPRET", "1")
    report: dict[str, Any] = {"machine": f"{platform.platform()}, {os.cpu_count()} cores",
                              "load": [round(x, 1) for x in os.getloadavg()], "args": vars(args)}
    report["fault"] = fault_run(args.fault_trials, args.fault_unit, args.fault_length) if not args.no_fault else None
    print(json.dumps(report["fault"], indent=1), flush=True)
    if args.only_fault:
        saved = json.loads((RESULTS / "scale_out.json").read_text())
        report = {**saved, "fault": report["fault"], "fault_args": vars(args), "fault_load": report["load"]}
    else:
        report["speedup"] = speedup(args.samples, args.lengths, args.unit)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scale_out.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "scale_out.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
