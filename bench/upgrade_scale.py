"""Upgrade scale (#61): how long a home the previous release made takes to be served by this one.

Each home is made as the release before 0007 left it (tests.helpers.old_home): the database
migrated by the migrations up to 0006 only, one row per succeeded passkey job as that store wrote
it, and each job's results.json on disk; the history is bench/history_scale.py's (50 checkpoint
lineages evaluated night after night, one job in 10 with YaRN x4, one in 7 on the torch
backend). Then the app of this code is started on it (uvicorn on loopback, as `lctx serve`
runs it, no executor) and timed:

    answers    from the start until /healthz answers (the schema upgrade: 0007 to head)
    ready      from the start until /readyz answers 200 (the data migration: every job's
               leaderboard rows from its results.json, in batches of LCTX_UPGRADE_BATCH)

with /healthz's `upgrading` as seen midway, and checked at the end: every job has its rows once,
the leaderboard's first page answers. On SQLite and on PostgreSQL (a throw-away cluster, as the
tests start one; a new database per size). Saves bench/results/upgrade_scale.{json,md}.

Usage: python bench/upgrade_scale.py [--sizes 1000 10000 25000 100000] [--databases sqlite postgres]
       [--batch 500] [--out bench/results] [--append] [--note TEXT]"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from history_scale import LENGTHS, LINEAGES, passkey_entry  # noqa: E402

from service.app import create_app  # noqa: E402
from tests.helpers import Postgres, ThreadServer, make_settings, new_postgres_database, old_home  # noqa: E402

NIGHT0 = datetime(2025, 1, 1, 2, 0)


def history(settings: Any, size: int) -> list[dict[str, Any]]:
    """Jobs 0..size-1: lineage i % 50, night i // 50, each its own checkpoint and fingerprint."""
    jobs = []
    for i in range(size):
        lineage, night = i % LINEAGES, i // LINEAGES
        name = f"run{lineage:02d}-step{night:05d}"
        jobs.append({
            "id": hashlib.sha256(f"job{i}".encode()).hexdigest()[:32], "checkpoint": name,
            "checkpoint_path": str(settings.roots[0] / "runs" / f"run{lineage:02d}" / name),
            "fingerprint": f"{lineage:02d}{night:05d}{i:08d}".ljust(64, "f"),
            "tasks": [{"name": "passkey", "lengths": list(LENGTHS), "trials": 20}],
            "rope": {"rope_type": "yarn", "factor": 4} if i % 10 == 3 else None,
            "backend": "torch" if i % 7 == 5 else "auto", "schedule": "nightly" if lineage == 7 else None,
            "finished_at": NIGHT0 + timedelta(days=night, minutes=lineage),
            "results": {"passkey": passkey_entry(i, night)}})
    return jobs


def server_cpu(pg: Any) -> float | None:
    """The CPU seconds the PostgreSQL cluster's processes have used, read from /proc (None: not
    PostgreSQL, or not Linux): the server's side of an upgrade. Its live processes' own, and
    through the postmaster's children's figures those that ended (backends, autovacuum and
    parallel index-build workers)."""
    if pg is None or not Path("/proc").is_dir():
        return None
    postmaster = int((pg.dir / "data" / "postmaster.pid").read_text().split()[0])
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(pid) == postmaster or int(fields[1]) == postmaster:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        if int(pid) == postmaster:
            ticks += int(fields[13]) + int(fields[14])  # cutime, cstime: its children that ended
    return ticks / os.sysconf("SC_CLK_TCK")


def upgrade(settings: Any, size: int, pg: Any = None) -> dict[str, Any]:
    """Start the app on the home and time it to /healthz, then to /readyz 200."""
    app = create_app(settings)
    seen: dict[str, Any] | None = None
    server0 = server_cpu(pg)
    t, cpu = time.perf_counter(), time.process_time()
    with ThreadServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
        health = client.get("/healthz").json()
        answers = time.perf_counter() - t
        while True:
            ready = client.get("/readyz")
            if ready.status_code == 200:
                break
            health = client.get("/healthz").json()
            if "upgrading" in health and health["upgrading"].get("total") and (
                    seen is None or health["upgrading"]["done"] <= size // 2):
                seen = {"healthz": health, "readyz": ready.json(), "at_s": round(time.perf_counter() - t, 2)}
            time.sleep(0.25)
        ready_s, cpu_s = time.perf_counter() - t, time.process_time() - cpu
        server_s = server_cpu(pg) - server0 if pg is not None else None
        board = client.get("/v1/leaderboard?task=passkey&limit=50")
        board.raise_for_status()
        assert board.json()["total"] > 0
    with create_engine(settings.database).connect() as conn:
        jobs = conn.execute(text("SELECT count(DISTINCT job_id) FROM task_results")).scalar()
        twice = conn.execute(text("SELECT count(*) FROM (SELECT job_id, task FROM task_results "
                                  "GROUP BY job_id, task HAVING count(*) > 1) d")).scalar()
        rows = conn.execute(text("SELECT count(*) FROM task_results")).scalar()
    assert jobs == size and twice == 0, (jobs, size, twice)
    return {"jobs": size, "answers_s": round(answers, 2), "ready_s": round(ready_s, 2),
            "data_migration_s": round(ready_s - answers, 2), "jobs_per_s": round(size / ready_s, 1),
            "s_per_10000_jobs": round(ready_s * 10_000 / size, 1), "cpu_s": round(cpu_s, 2),
            "cpu_s_per_10000_jobs": round(cpu_s * 10_000 / size, 1),
            "server_cpu_s": round(server_s, 2) if server_s is not None else None, "load_avg": round(os.getloadavg()[0], 1),
            "rows": rows, "midway": seen}


def run_database(kind: str, sizes: list[int], batch: int, tmp: Path, save: Any) -> dict[str, Any]:
    pg = Postgres().start() if kind == "postgres" else None
    steps: list[dict[str, Any]] = []
    try:
        for size in sizes:
            home = tmp / f"{kind}-{size}"
            url = {"database_url": new_postgres_database(pg.url, "upgrade")} if pg else {}
            settings = make_settings(home, upgrade_batch=batch, **url)
            t = time.perf_counter()
            old_home(settings, history(settings, size))
            made = time.perf_counter() - t
            print(f"{kind} {size}: the old home made in {made:.0f} s", file=sys.stderr, flush=True)
            step = upgrade(settings, size, pg) | {"old_home_made_s": round(made, 1)}
            steps.append(step)
            save({"database": kind, "steps": steps})  # what has finished stays saved if a later size is cut short
            print(f"{kind} {size}: answers {step['answers_s']} s, ready {step['ready_s']} s "
                  f"({step['jobs_per_s']} jobs/s)", file=sys.stderr, flush=True)
            shutil.rmtree(home, ignore_errors=True)
    finally:
        if pg:
            pg.stop()
    return {"database": kind, "steps": steps}


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Upgrade scale (#61)", "", report["note"], "", f"Machine: {report['machine']}", "",
             "| database | jobs | /healthz answers (s) | /readyz 200 (s) | jobs/s | s per 10,000 jobs | CPU s "
             "| CPU s per 10,000 jobs | server CPU s | load | rows |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for db in report["databases"]:
        for s in db["steps"]:
            lines.append(f"| {db['database']} | {s['jobs']:,} | {s['answers_s']} | {s['ready_s']} | {s['jobs_per_s']} "
                         f"| {s['s_per_10000_jobs']} | {s['cpu_s']} | {s['cpu_s_per_10000_jobs']} "
                         f"| {s.get('server_cpu_s') if s.get('server_cpu_s') is not None else '-'} | {s['load_avg']} "
                         f"| {s['rows']:,} |")
    lines += ["", "What /healthz and /readyz answered midway (the first upgrade of each database):", ""]
    for db in report["databases"]:
        mid = next((s["midway"] for s in db["steps"] if s["midway"]), None)
        if mid:
            lines.append(f"- {db['database']}, at {mid['at_s']} s: `{json.dumps(mid['healthz'])}`; /readyz 503 "
                         f"`{json.dumps(mid['readyz'])}`")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 25000, 100000])
    ap.add_argument("--databases", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--append", action="store_true", help="keep the saved output's other databases")
    ap.add_argument("--note", default="", help="said in the saved output (what was left out, the machine's load)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    note = (f"Homes made as the release before 0007 left them (schema 0006, results.json per job), upgraded to "
            f"head by this code's app start; batches of {args.batch} jobs; load average {load:.1f} at the start on "
            f"this {os.cpu_count()}-core machine (cpu_s: this process's CPU seconds, what a quiet machine's wall "
            f"time comes near). {args.note}").strip()
    saved = args.out / "upgrade_scale.json"
    old = json.loads(saved.read_text()) if args.append and saved.exists() else None
    done: dict[str, dict[str, Any]] = {}

    def save(result: dict[str, Any]) -> None:
        done[result["database"]] = result
        databases = list(done.values())
        notes = note
        if old is not None:
            mine = {(d["database"], s["jobs"]) for d in databases for s in d["steps"]}
            for d in old["databases"]:  # earlier runs' sizes kept, this run's replacing them
                keep = [s for s in d["steps"] if (d["database"], s["jobs"]) not in mine]
                same = next((n for n in databases if n["database"] == d["database"]), None)
                if same is not None:
                    same["steps"] = sorted(keep + same["steps"], key=lambda s: s["jobs"])
                elif keep:
                    databases.append({"database": d["database"], "steps": keep})
            notes = f"{old['note']} {note}" if note not in old["note"] else old["note"]
        report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                             f"Python {platform.python_version()}", "note": notes, "databases": databases}
        args.out.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(report, indent=1, default=str) + "\n")
        (args.out / "upgrade_scale.md").write_text(markdown(report))

    with tempfile.TemporaryDirectory(prefix="lctx-upgrade-") as tmp:
        for kind in args.databases:
            run_database(kind, args.sizes, args.batch, Path(tmp), save)
    print((args.out / "upgrade_scale.md").read_text())


if __name__ == "__main__":
    main()
