"""`lctx backup`, `lctx restore`, `lctx prune`: what an operator runs on the service's machine,
on its settings (the environment, or the same flags as `lctx serve`). Imported when they run:
the service's store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli.server import add_setting_flags, apply_setting_flags


def _settings(args: argparse.Namespace):  # noqa: ANN202 - service.core.settings.Settings, imported here
    """The service's settings as its environment and these flags give them, read now (not the
    process's cached ones: the flags were just put in the environment)."""
    from service.core.settings import Settings

    apply_setting_flags(args)
    return Settings()


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _backup(args: argparse.Namespace) -> int:
    from service.core.backup import backup

    manifest = backup(_settings(args), Path(args.folder))
    print(f"backed up the store ({manifest['database']}, schema {manifest['revision']}) and "
          f"{_size(manifest['results_bytes'])} of results into {args.folder}: {manifest['checked']} "
          f"({manifest['board']['rows']} leaderboard rows)")
    return 0


def _restore(args: argparse.Namespace) -> int:
    from service.core.backup import restore
    from service.core.serverlock import ServerLock

    settings = _settings(args)
    lock = ServerLock(settings)
    lock.acquire()  # a running service stops this here: restore into a stopped one
    try:
        done = restore(settings, Path(args.folder))
    finally:
        lock.release()
    for key, value in done.items():
        print(f"{key}: {value}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from service.retention import apply_prune, plan_prune
    from service.store import Store

    settings = _settings(args)
    store = Store(settings.database)
    try:
        plan = plan_prune(store, settings)
    finally:
        store.close()
    if args.json:
        print(json.dumps({**plan.as_dict(), "dry_run": args.dry_run}, indent=2))
    kept = ", ".join(f"{n} {why}" for why, n in sorted(plan.kept.items())) or "none"
    verb = "would prune" if args.dry_run else "pruning"
    if not args.json:
        print(f"{verb} the samples and plots of {len(plan.jobs)} job(s): {_size(plan.bytes)} in "
              f"{sum(len(j.files) for j in plan.jobs)} files (results, leaderboard rows and curves kept); "
              f"kept whole: {kept}")
    if not args.dry_run and plan.jobs:
        freed = apply_prune(settings, plan)
        if not args.json:
            print(f"freed {_size(freed)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backup", help="copy the service's store and results into a new folder while it runs "
                       "(SQLite's online backup, or pg_dump), checked: the copy's leaderboard equals the original's")
    p.add_argument("folder", help="a new (or empty) folder to write the backup into")
    add_setting_flags(p, "home", "results_dir")
    p.set_defaults(func=_backup)

    p = sub.add_parser("restore", help="put a backup in place of a stopped service's store and results (the ones "
                       "there are moved aside, never deleted), then check the restored leaderboard")
    p.add_argument("folder", help="a folder `lctx backup` wrote")
    add_setting_flags(p, "home", "results_dir")
    p.set_defaults(func=_restore)

    p = sub.add_parser("prune", help="apply the retention policy (LCTX_RETENTION_DAYS, LCTX_RETENTION_KEEP): remove "
                       "the per-sample records and plots of old jobs, keep their results, leaderboard rows and curves")
    p.add_argument("--dry-run", action="store_true", help="say what would be freed, remove nothing")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_setting_flags(p, "retention_days", "retention_keep", "home", "results_dir")
    p.set_defaults(func=_prune)
